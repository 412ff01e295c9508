"""The Gluon warp-specialized MLA decode (``mla_decode_with_kvcache_fwd/ws_kernel.py``): GPU checks against the
fp32 reference on seed rows and edge cases (Hopper only: TMA, wgmma, warp specialization), and everywhere: the
offline sm_90 build, the launch's argument binding and grid, which layouts it takes, the refusal of calls it
does not serve."""

import dataclasses
import functools

import pytest
import torch
from mla_testlib import mla_case, pinned

from attnops.attn_mla.mla_decode_with_kvcache_fwd import op as mla_op
from attnops.attn_mla.mla_decode_with_kvcache_fwd import ws_kernel, ws_launch
from attnops.attn_mla.mla_decode_with_kvcache_fwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.opspec import Case
from attnops.kernel_utils.pytest_plugin import run_offline_compile

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
CONFIG_IDS = [c.name for c in ws_launch.WS_CONFIGS]
_case = functools.partial(mla_case, h=64)  # whole 64-head blocks unless a test says otherwise
hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                            reason="needs a Hopper GPU")


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    """Split partials start NaN-filled on the GPU too: a partial column or lse the kernel never wrote fails."""
    monkeypatch.setenv("ATTNOPS_POISON", "1")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("row", ["mla-b128-4096/f16", "ds-v3-32k/bf16", "mla-tp-b1/bf16", "mla-tp-b64/f16"])
def test_seed_rows(row, cfg):
    """A full batch (no split), a long context (splits and the combine launch), a single request with H = 64
    (one head block, 32 splits) and a batch of 64 with H = 64."""
    SPEC.check(make_case(ROWS[row], DEV, shrink=False, seed=11), pinned(mla_op, cfg))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("shape,splits", [
    (dict(n_kv=1), None),  # one key: the first tile is the last, 31 of its rows masked
    (dict(n_kv=33), None),  # a 1-key tail tile
    (dict(n_kv=100), 3),  # 3 asked, 2 made: splits of 64 and 36 keys
    (dict(h=32, h_kv=2, n_kv=70), None),  # two KV heads, groups of 16 in 64-head blocks
    (dict(h=128, b=3, n_kv=257), 5),  # two head blocks per KV head, splits
    (dict(h=96, b=3, n_kv=70), None),  # the second head block half full: its Q box reads the next request's heads
    (dict(h=192, h_kv=2, n_kv=300), 3),  # groups of 96 over two KV heads, splits
    (dict(n_kv=96, q_scale=8.0), None),  # a sharp softmax: a few keys dominate each row
], ids=["one-key", "tail", "splits", "two-kv-heads", "two-head-blocks", "partial-head-block", "kv-heads-splits",
        "sharp"])
def test_edge_cases(shape, splits, dtype, cfg):
    SPEC.check(_case(dtype=dtype, seed=7, **shape), pinned(mla_op, cfg, num_splits=splits))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_climbing_scores(dtype, cfg):
    """Scores that rise by ~12 (base 2) every 96 keys over 400 keys, ~0.6 between: a running max that moves
    by more than the lazy rescale's slack at every third 32-key block and not in between (``latent_alt``)."""
    case = _case(n_kv=400, dtype=dtype, seed=12)
    testing.climbing_scores(case.inputs["q_pe"], case.inputs["k_pe"], 576 ** -0.5)
    SPEC.check(case, pinned(mla_op, cfg))


@pytest.mark.gpu
@hopper
def test_fused_cache_views():
    """k / k_pe as the two parts of one [B, N, 1, 576] cache row (FlashMLA's layout): rows 1152 bytes apart."""
    case = _case(n_kv=77, seed=3)
    cache = testing.randn((2, 77, 1, 576), torch.float16, DEV, testing.generator(8))
    case.inputs["k"], case.inputs["k_pe"] = cache[..., :512], cache[..., 512:]
    SPEC.check(case, pinned(mla_op, ws_launch.WS_CONFIGS[0]), keep_views=True)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("n_kv", [17, 33, 65, 161], ids=["one-tile", "tail-in-tile-1", "tail-in-tile-2",
                                                         "tail-in-tile-5"])
def test_another_requests_nan_keys_stay_out(n_kv, cfg):
    """Request 0's keys end inside a tile whose other rows are request 1's keys, all NaN here: request 0's output
    must not see them (request 1's is NaN, as the reference's). With 32-key tiles the last tile is the only one,
    the second, the third or the sixth (alternating configs: the first warpgroup's block or the other's, after the
    4-slot ring has wrapped); with 64-key blocks the only one, the second or the third (after the 2-slot ring
    has wrapped, P written over the rope slot in between)."""
    case = _case(b=2, n_kv=n_kv, seed=4)
    case.inputs["k"][1] = float("nan")
    out = pinned(mla_op, cfg)(**case.inputs)
    first = Case({n: t[:1] for n, t in case.inputs.items()}, outputs=("o",))
    SPEC.compare({"o": out[:1]}, first.fresh().run(SPEC.reference), first)
    assert bool(out[1].isnan().all())


@pytest.mark.parametrize("fields", [dict(block_n=32, stages=3, lazy_rescale=True),
                                    dict(block_n=32, stages=3, half_ready=True),
                                    dict(block_n=64, stages=2, alternating=True, lazy_rescale=True),
                                    dict(block_n=64, stages=2, alternating=True, split_free=True)],
                         ids=["lazy-channel-split", "half-ready-channel-split", "lazy-64-key", "split-free-no-halves"])
def test_config_flags_it_cannot_build_are_refused(fields):
    """Runs everywhere: a forced config whose flags the kernels do not build fails on the host, naming them."""
    with pytest.raises(ValueError, match="WsConfig"):
        ws_launch.WsConfig(**fields)


def test_compiles_for_sm90():
    """Every config, both dtypes, with and without splits, through Gluon's sm_90 pipeline and ptxas: no compile
    error, no spill, no serialized wgmma, shared memory under the limit."""
    listing = run_offline_compile(__file__, "sm90_compile_attn_mla", "--op", "mla-ws")
    lines = [ln for ln in listing.splitlines() if ln.startswith("mla-ws ")]
    assert len(lines) == 4 * len(ws_launch.WS_CONFIGS), listing
    assert not any(flag in ln for ln in lines for flag in ("SPILL", "SERIALIZED", "FAIL", "SMEM")), listing


class _Launches:
    """Stands in for the Gluon kernel: ``kernel[grid](*args, **kwargs)`` is recorded, not run."""

    def __init__(self):
        self.grids, self.arguments = [], []

    def __getitem__(self, grid):
        def record(*args, **kwargs):
            self.grids.append(grid)
            self.arguments.append({**dict(zip(ws_kernel.mla_decode_ws_kernel.arg_names, args)), **kwargs})
        return record


def test_launch_binds_every_kernel_argument(monkeypatch):
    """Runs everywhere (TMA descriptors of host tensors): one launch binds exactly the kernel's parameters over
    (head blocks, splits, B); splits switch the partial path on."""
    launches = _Launches()
    monkeypatch.setattr(ws_launch, "mla_decode_ws_kernel", launches)
    inputs = _case(b=3, h=128, n_kv=64, h_kv=2, dtype=torch.float16).inputs
    out = torch.empty_like(inputs["q"])
    part = torch.empty(1)
    for cfg in ws_launch.WS_CONFIGS:
        for splits in (1, 4):
            ws_launch.run(cfg, *inputs.values(), out, part, part, head_blocks_per_kv=1, split_len=16, splits=splits,
                          qk_scale=0.1)
    assert launches.grids == [(2, 1, 3), (2, 4, 3)] * len(ws_launch.WS_CONFIGS)
    for bound in launches.arguments:
        assert set(bound) - {"num_warps"} == set(ws_kernel.mla_decode_ws_kernel.arg_names)
    assert [a["SPLIT"] for a in launches.arguments] == [False, True] * len(ws_launch.WS_CONFIGS)
    assert [a["ALTERNATING"] for a in launches.arguments[::2]] == [c.alternating for c in ws_launch.WS_CONFIGS]
    assert launches.arguments[0]["group"] == 64 and launches.arguments[0]["n_kv"] == 64


def test_row_views():
    """Runs everywhere: the 2-D row views the descriptors read, and the layouts without one."""
    x = torch.empty(4, 8, 2, 512, dtype=torch.float16)
    assert ws_launch._row_view(x) == (32, 1024)
    assert ws_launch._row_view(torch.empty(4, 16, 1, 576, dtype=torch.float16)[..., :512]) == (64, 576)
    assert ws_launch._row_view(torch.empty(3, 64, 512, dtype=torch.float16)) == (192, 512)
    single = torch.empty(512, dtype=torch.float16).as_strided((1, 1, 1, 512), (0, 0, 512, 1))
    assert ws_launch._row_view(single) == (1, 512)  # a size-1 dim's stride (here 0) is not the row stride
    assert ws_launch._row_view(x.transpose(1, 2)) is None  # tokens not one row apart
    assert ws_launch._row_view(x[..., ::2]) is None  # last dim strided
    assert ws_launch._row_view(torch.empty(4, 8, 2, 520, dtype=torch.float16)[..., :512]) is None  # heads apart


def test_calls_it_does_not_serve_are_refused():
    """Runs everywhere: a forced ws config on a call outside its domain raises before any launch, naming why,
    instead of running something else."""
    gen = testing.generator(1)
    narrow = {"q": testing.randn((1, 16, 64), torch.float16, DEV, gen),
              "q_pe": testing.randn((1, 16, 16), torch.float16, DEV, gen),
              "k": testing.randn((1, 8, 1, 64), torch.float16, DEV, gen),
              "k_pe": testing.randn((1, 8, 1, 16), torch.float16, DEV, gen)}
    forced = mla_op.with_config(ws_launch.WS_CONFIGS[0])
    with pytest.raises(ValueError, match="needs D = 512 and PE = 64, got D = 64, PE = 16"):
        forced(**narrow)
    for dsa_only in (dict(persistent=True), dict(half_ready=True, split_free=True)):
        forced_dsa = mla_op.with_config(dataclasses.replace(ws_launch.WS_CONFIGS[0], **dsa_only))
        with pytest.raises(ValueError, match="no persistent or split-free form"):
            forced_dsa(**_case().inputs)
    if not ws_launch.applies(*_case().inputs.values()):  # off Hopper: every call, for that reason
        with pytest.raises(ValueError, match="needs a Hopper GPU"):
            forced(**_case().inputs)


def test_default_rule(monkeypatch):
    """Runs everywhere: under ``WS_DEFAULT`` calls the kernel serves take ``WS_CONFIGS[0]`` when their KV groups
    fill 64-head blocks, others (groups of 16, or a call it refuses) the Triton kernel; off, every call."""
    full, narrow = _case(h=128).inputs, _case(h=16).inputs
    monkeypatch.setattr(ws_launch, "applies", lambda *tensors: True)
    monkeypatch.setattr(mla_op, "WS_DEFAULT", False)
    assert mla_op.default_config(*full.values()) == mla_op.pick_config()
    monkeypatch.setattr(mla_op, "WS_DEFAULT", True)
    assert mla_op.default_config(*full.values()) == ws_launch.WS_CONFIGS[0]
    assert ws_launch.WS_CONFIGS[0].alternating  # the fastest on every seed row
    assert mla_op.default_config(*narrow.values()) == mla_op.pick_config()
    monkeypatch.setattr(ws_launch, "applies", lambda *tensors: False)
    assert mla_op.default_config(*full.values()) == mla_op.pick_config()
