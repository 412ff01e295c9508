"""The Gluon warp-specialized DSA kernel (``dsa_decode_with_kvcache_fwd/ws_kernel.py``): GPU checks against the
fp32 reference on seed rows and edge cases (Hopper only: TMA, cp.async gathers, wgmma, warp specialization),
and everywhere: the offline sm_90 build, the launch's argument binding and grid, q's row view, refusals."""

import dataclasses
import functools
import re

import pytest
import torch
from mla_testlib import dsa_case, pinned

from attnops.attn_mla.dsa_decode_with_kvcache_fwd import op as dsa_op
from attnops.attn_mla.dsa_decode_with_kvcache_fwd import ws_kernel, ws_launch
from attnops.attn_mla.dsa_decode_with_kvcache_fwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.pytest_plugin import run_offline_compile

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
CONFIG_IDS = [c.name for c in ws_launch.WS_CONFIGS]
# the kernel's shape: D = 512 with a 64-channel tail, 64-head blocks, 300 cache rows, query rows at 290..
_case = functools.partial(dsa_case, s_kv=300, h=64, d=512, tail=64, q_start=290)
hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                            reason="needs a Hopper GPU")


def _skip_unserved(cfg, tail):
    """Configs that do not serve this rope tail (``ws_launch.config_refusal``: 64-key blocks without it) are
    refused before any launch (``test_calls_it_does_not_serve_are_refused``), not run."""
    why = ws_launch.config_refusal(cfg, tail)
    if why:
        pytest.skip(why)


def _random_indices(b, s, h_kv, k, s_kv, seed):
    return torch.randint(-3, s_kv + 3, (b, s, h_kv, k), generator=testing.generator(seed))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("row", ["ds-v32-kv4k/f16", "ds-v32-kv2k/bf16", "mla-d576-h128-kv8k/bf16",
                                 "mla-d512-h64-kv8k/bf16"])
def test_seed_rows(row, cfg):
    """576- and 512-wide rows, H = 128 (two head blocks) and H = 64, mostly-padded index rows (kv4k)."""
    _skip_unserved(cfg, 0 if row.startswith("mla-d512") else 64)
    SPEC.check(make_case(ROWS[row], DEV, shrink=False, seed=5), pinned(dsa_op, cfg))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("shape", [
    dict(),  # ragged counts: random slots, repeats, invalid and future rows
    dict(tail=0),  # 512-wide rows, no rope channels
    dict(h=32, h_kv=2),  # two KV heads, each with its own index list, groups of 16 in 64-head blocks
    dict(h=128, b=2),  # two head blocks per KV head, two requests
    dict(is_causal=False, k=7),  # future rows count; fewer slots than a tile
], ids=["ragged", "no-tail", "two-kv-heads", "two-head-blocks", "not-causal-short"])
def test_edge_cases(shape, dtype, cfg):
    shape = dict(shape)
    b, h_kv, k = shape.pop("b", 1), shape.get("h_kv", 1), shape.pop("k", 100)
    _skip_unserved(cfg, shape.get("tail", 64))
    SPEC.check(_case(_random_indices(b, 4, h_kv, k, 300, seed=3), dtype=dtype, seed=9, **shape),
               pinned(dsa_op, cfg))


PERSISTENT = [c for c in ws_launch.WS_CONFIGS if c.persistent]


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", PERSISTENT, ids=[c.name for c in PERSISTENT])
@pytest.mark.parametrize("tail", [64, 0])
def test_persistent_programs_carry_state_across_items(cfg, tail, monkeypatch):
    """3 programs over 40 work items (2 requests x 5 query rows x 2 KV heads x 2 head blocks) whose rows keep 0,
    5, 40, 64, 65 or all 100 slots: items of 0 to 4 tiles, odd and even, in every order, so the ring, the query
    slot and the two warpgroups' hand-off phases run on across items of every parity; rows of one item check
    against the reference, zeros where nothing is selected."""
    _skip_unserved(cfg, tail)
    monkeypatch.setattr(runtime, "num_sms", lambda: 3)
    indices = torch.randint(0, 290, (2, 5, 2, 100), generator=testing.generator(4))
    kept = torch.tensor([0, 5, 40, 64, 65, 100])
    keep = kept[torch.randint(0, len(kept), (2, 5, 2), generator=testing.generator(5))]
    indices[torch.arange(100) >= keep[..., None]] = -1
    case = _case(indices, h=256, h_kv=2, tail=tail, seed=8)
    out = SPEC.check(case, pinned(dsa_op, cfg))["o"]
    assert bool((out.view(2, 5, 2, 128, 512)[keep == 0] == 0).all())


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=CONFIG_IDS)
def test_climbing_scores(cfg):
    """Each query row selects cache rows 0, 1, .., 279 in order, whose scores rise by ~12 (base 2) every 96 rows:
    the lazy rescale's reference max moves at every third 32-key block and not in between (``latent_alt``)."""
    indices = torch.arange(280).expand(1, 4, 1, 280)
    case = _case(indices, seed=13)
    testing.climbing_scores(case.inputs["q"][..., 512:], case.inputs["kv"][..., 512:], 576 ** -0.5)
    SPEC.check(case, pinned(dsa_op, cfg))


@pytest.mark.gpu
@hopper
def test_rows_without_valid_slots_are_zeros():
    """Row 1 selects nothing valid (the pad, −1, the future): zeros, and its neighbours unaffected."""
    rows = [[5, 9, 200, 7, 7], [300, -1, 295, 299, 1000], [0, 1, 2, 3, 291]]
    out = SPEC.check(_case([[[r] for r in rows]], seed=2), pinned(dsa_op, ws_launch.WS_CONFIGS[0]))["o"]
    assert bool((out[0, 1] == 0).all())


@pytest.mark.gpu
@hopper
def test_strided_views():
    """q as a view of wider rows (pitch 640) and the cache padded to 584 elements a row (16 bytes, not 16
    elements, apart: the strides Triton does not specialize), two KV heads."""
    case = _case(_random_indices(1, 3, 2, 50, 300, seed=6), h=32, h_kv=2, seed=6)
    gen = testing.generator(7)
    case.inputs["q"] = testing.randn((1, 3, 32, 640), torch.float16, DEV, gen)[..., :576]
    case.inputs["kv"] = testing.randn((1, 300, 2, 584), torch.float16, DEV, gen)[..., :576]
    SPEC.check(case, pinned(dsa_op, ws_launch.WS_CONFIGS[0]), keep_views=True)


def test_compiles_for_sm90():
    """Every config, tails 64 and 0, both dtypes, cache rows 576 / 512 and padded to 584 elements, through
    Gluon's sm_90 pipeline and ptxas: no compile error, no spill, no serialized wgmma, shared memory under the
    limit. (The alternating config with the rope tail spilled 40 B of scalars until its consumers read the queries
    through a runtime index, attn-mla 0.2.8: ``latent_alt._queries``.) Exceptions: the lazy-rescale builds with
    the rope tail may spill up to 12 B, a 32-bit value of the kernel's prologue stored before the partitions split
    and loaded once by the loader (at their 200 / 48 register split, ``ws_kernel._alternating_registers``); and the
    split-free builds (``-f``, forced only) up to 52 B, values of the prologue reloaded once a work item (sm_90 SASS,
    2026-12-07: no reload inside a block or tile loop)."""
    listing = run_offline_compile(__file__, "sm90_compile_attn_mla", "--op", "dsa-ws")
    lines = [ln for ln in listing.splitlines() if ln.startswith("dsa-ws ")]
    built = [c for c in ws_launch.WS_CONFIGS for tail in (64, 0, 64, 64) if not ws_launch.config_refusal(c, tail)]
    assert len(lines) == len(built), listing
    assert not any(flag in ln for ln in lines for flag in ("SERIALIZED", "FAIL", "SMEM")), listing
    for ln in lines:
        spill = int(re.search(r"spill\s+(\d+) B", ln).group(1))
        allowed = 52 if re.search(r"-h-f\b", ln) else 12 if re.search(r" ws-alt-n32s4-l(-p)? .*tail=64", ln) else 0
        assert spill <= allowed, ln


def test_launch_binds_every_kernel_argument(monkeypatch):
    """Runs everywhere (TMA descriptors of host tensors): the launch binds exactly the kernel's parameters, with
    and without the rope tail, over one program per work item (head blocks per KV head x B·S·H_kv rows) or, a
    persistent config, at most one per SM (5 here)."""
    grids, bound = [], []

    class _Launches:
        def __getitem__(self, grid):
            def record(*args, **kwargs):
                grids.append(grid)
                bound.append({**dict(zip(ws_kernel.dsa_decode_ws_kernel.arg_names, args)), **kwargs})
            return record

    monkeypatch.setattr(ws_launch, "dsa_decode_ws_kernel", _Launches())
    monkeypatch.setattr(runtime, "num_sms", lambda: 5)
    one_each = next(c for c in ws_launch.WS_CONFIGS if not c.persistent)
    for cfg in (ws_launch.WS_CONFIGS[0], one_each):
        for tail in (64, 0):
            case = _case(_random_indices(2, 3, 2, 16, 300, seed=1), h=128, h_kv=2, tail=tail)
            q, kv = case.inputs["q"], case.inputs["kv"]
            clean, count = torch.zeros(12, 16, dtype=torch.int32), torch.zeros(12, dtype=torch.int32)
            out = torch.empty(2, 3, 128, 512, dtype=q.dtype)
            ws_launch.run(cfg, q, kv, clean, count, out, tail, head_blocks_per_kv=1, qk_scale=0.1)
    assert ws_launch.WS_CONFIGS[0].persistent and grids == [(5,), (5,), (12,), (12,)]
    for arguments in bound:
        assert set(arguments) - {"num_warps"} == set(ws_kernel.dsa_decode_ws_kernel.arg_names)
        assert arguments["n_items"] == 12
    assert [a["TAIL"] for a in bound] == [64, 0] * 2 and bound[0]["group"] == 64 and bound[0]["BLOCK_K"] == 16


def test_q_row_view():
    """Runs everywhere: q ``[B, S, H, W]`` as ``[B·S·H, W]`` rows, and the layouts without such a view."""
    q = torch.empty(2, 3, 8, 576, dtype=torch.float16)
    assert ws_launch._q_rows(q) == (48, 576)
    assert ws_launch._q_rows(torch.empty(2, 3, 8, 640, dtype=torch.float16)[..., :576]) == (48, 640)
    assert ws_launch._q_rows(q.transpose(1, 2)) is None  # heads not the innermost row axis
    assert ws_launch._q_rows(q[:, :2]) is None  # requests not S·H rows apart
    assert ws_launch._q_rows(q[..., ::2]) is None  # last dim strided


def test_calls_it_does_not_serve_are_refused():
    """Runs everywhere: a forced ws config on a call outside its domain raises before any launch, naming why."""
    forced = dsa_op.with_config(ws_launch.WS_CONFIGS[0])
    narrow = _case([[[[1, 2, 3]]]], seed=1)
    narrow.inputs["q"], narrow.inputs["kv"] = narrow.inputs["q"][..., :80], narrow.inputs["kv"][..., :80].clone()
    narrow.inputs["dim_tail"] = 16
    with pytest.raises(ValueError, match="needs D = 512 and dim_tail in"):
        forced(**narrow.inputs)
    case = _case([[[[1, 2, 3]], [[4, 5, 6]]]], h=2, seed=1)  # B 1, S 2, H_kv 1, K 3
    strided = dict(case.inputs, q=case.inputs["q"].transpose(1, 2).contiguous().transpose(1, 2))  # S, H swapped
    with pytest.raises(ValueError, match="q: strides .* give no 2-D row view"):
        forced(**strided)
    misaligned = dict(case.inputs, kv=torch.empty(1, 300, 1, 580, dtype=torch.float16, device=DEV)[..., :576])
    with pytest.raises(ValueError, match="kv: strides .* do not keep every row 16-byte aligned"):
        forced(**misaligned)
    n64 = next(c for c in ws_launch.WS_CONFIGS if c.block_n == 64)
    no_tail = _case([[[[1, 2, 3]]]], tail=0, seed=1)
    with pytest.raises(ValueError, match="64-key blocks need the 64-channel rope tail"):
        dsa_op.with_config(n64)(**no_tail.inputs)
    with pytest.raises(ValueError, match="needs each item to start at ring position 0: not persistent"):
        dsa_op.with_config(dataclasses.replace(n64, persistent=True))(**case.inputs)
    if not ws_launch.applies(case.inputs["q"], case.inputs["kv"], 64):  # off Hopper: every call, for that reason
        with pytest.raises(ValueError, match="needs a Hopper GPU"):
            forced(**case.inputs)


def test_default_rule(monkeypatch):
    """Runs everywhere: under ``WS_DEFAULT`` calls the kernel serves take ``ws_launch.default`` when their KV groups
    fill 64-head blocks (the 64-key form with the rope tail on a cache of at most ``SMALL_CACHE_BYTES``, else
    ``WS_CONFIGS[0]``), others (groups of 32, or a call it refuses) the Triton kernel; off, every call."""
    full = _case([[[[1, 2]]]], h=128).inputs
    narrow = _case([[[[1, 2]]]], h=32).inputs
    cache_bytes = full["kv"].numel() * full["kv"].element_size()
    monkeypatch.setattr(ws_launch, "applies", lambda *args: True)
    monkeypatch.setattr(dsa_op, "WS_DEFAULT", False)
    assert dsa_op.default_config(full["q"], full["kv"], 64) == dsa_op.pick_config()
    monkeypatch.setattr(dsa_op, "WS_DEFAULT", True)
    assert dsa_op.default_config(full["q"], full["kv"], 64) == ws_launch.SMALL_CACHE
    assert ws_launch.SMALL_CACHE.name == "ws-alt-n64s2-h"
    assert dsa_op.default_config(full["q"], full["kv"], 0) == ws_launch.WS_CONFIGS[0]  # (no tail: no 64-key form)
    monkeypatch.setattr(ws_launch, "SMALL_CACHE_BYTES", cache_bytes)
    assert dsa_op.default_config(full["q"], full["kv"], 64) == ws_launch.SMALL_CACHE
    monkeypatch.setattr(ws_launch, "SMALL_CACHE_BYTES", cache_bytes - 1)
    assert dsa_op.default_config(full["q"], full["kv"], 64) == ws_launch.WS_CONFIGS[0]
    assert dsa_op.default_config(narrow["q"], narrow["kv"], 64) == dsa_op.pick_config()
    monkeypatch.setattr(ws_launch, "applies", lambda *args: False)
    assert dsa_op.default_config(full["q"], full["kv"], 64) == dsa_op.pick_config()
