"""GQABwd's Gluon warp-specialized kernels (``gqa_bwd/ws_kernel.py`` dK / dV with the Triton dQ role or, with
``gluon_dq``, ``ws_dq_kernel.py``): GPU checks of dq / dk / dv against the fp32 reference (Hopper only), and
everywhere: the offline sm_90 build, the launches' argument binding, the refusal of calls they do not serve."""

import functools

import pytest
import torch

from attnops.attn_core.gqa_bwd import launch as bwd
from attnops.attn_core.gqa_bwd import ws_dq_kernel, ws_kernel, ws_launch
from attnops.attn_core.gqa_bwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.pytest_plugin import run_offline_compile

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
# the edge cases run one config of each kernel pairing and the Gluon dQ kernel's other slot counts (the seed rows
# run every config)
EDGE_CONFIGS = (ws_launch.WS_CONFIGS[0], *(c for c in ws_launch.WS_CONFIGS if c.gluon_dq))
PERSISTENT = next(c for c in ws_launch.WS_CONFIGS if c.persistent)
hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                            reason="needs a Hopper GPU")


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("ATTNOPS_POISON", "1")


def _check(case, cfg, keep_views=False):
    with bwd.forced(cfg):
        SPEC.check(case, keep_views=keep_views)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", ws_launch.WS_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("row", ["llama-8b-short/bf16", "llama-8b-short-mha/f16", "llama-70b-short/bf16"])
def test_seed_rows(row, cfg):
    """GQA 32:8 and 64:8, MHA, D = 128, causal, at the benchmark's shapes."""
    _check(make_case(ROWS[row], DEV, shrink=False, seed=3), cfg)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("splits", [1, 2, 4, 8])
@pytest.mark.parametrize("cfg", [ws_launch.WS_CONFIGS[0], bwd.WS_DEFAULT, PERSISTENT], ids=lambda c: c.name)
@pytest.mark.parametrize("head_dim", ws_launch.HEAD_DIMS)
@pytest.mark.parametrize("is_causal,s_q,s_kv", [(True, 300, 300), (False, 77, 200), (True, 100, 333), (True, 1, 1)],
                         ids=["causal", "full-ragged", "causal-q-lt-kv", "one-key"])
def test_head_splits(monkeypatch, is_causal, s_q, s_kv, head_dim, cfg, splits):
    """Head subgroups on the Gluon dK / dV kernel (``forced(cfg, splits=s)``; 1: unsplit): each program sums G / s of
    the 8 query heads of a KV head into fp32 partials, the head-sum launch adds them; ragged key and query blocks.
    The persistent kernel runs on 3 programs (``num_sms`` pinned), so each walks several tiles of unequal pair
    counts: the ring's slot and phase carried across tiles, K / V handed back and refilled per tile."""
    if cfg.persistent:
        monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 3)
    w = ROWS["llama-8b-short/f16" if (s_q + s_kv) % 2 else "llama-8b-short/bf16"]
    case = make_case(w, DEV, seed=s_q + splits, batch=2, s_q=s_q, s_kv=s_kv, heads=(16, 2), head_dim=head_dim,
                     is_causal=is_causal)
    with bwd.forced(cfg, splits=splits):
        SPEC.check(case)


@pytest.mark.gpu
@hopper
def test_head_splits_seed_row():
    """llama-70b-long (128 programs unsplit) on the default Gluon config with 2 subgroups, at the benchmark's shape."""
    with bwd.forced(bwd.WS_DEFAULT, splits=2):
        SPEC.check(make_case(ROWS["llama-70b-long/bf16"], DEV, shrink=False, seed=5))


@pytest.mark.gpu
@hopper
def test_dq_stream_joins_the_callers_stream():
    """``launch.CONCURRENT_DQ`` runs the Gluon dQ kernel on a side stream: a call on a user's stream whose next
    work reads the gradients, and a call captured in a CUDA graph and replayed, give the reference's gradients
    (the caller's stream waits for the side stream; capture sees the fork and the join). 4 head subgroups."""
    case = make_case(ROWS["llama-8b-short/bf16"], DEV, seed=11, batch=1, s_q=1000, s_kv=1000, heads=(8, 2),
                     head_dim=128)
    expected = case.fresh().run(SPEC.reference)
    assert bwd.CONCURRENT_DQ
    with bwd.forced(bwd.WS_DEFAULT):
        user = torch.cuda.Stream()
        with torch.cuda.stream(user):
            ours = case.fresh().run(SPEC.fn)
            read_next = {name: t.clone() for name, t in ours.items()}  # ordered after the call on ``user`` only
        user.synchronize()
        SPEC.compare(read_next, expected, case)
        static = case.fresh()
        static.run(SPEC.fn)  # compiled before the capture
        captured = testing.replayed_in_graph(lambda: static.run(SPEC.fn))
        SPEC.compare(captured, expected, case)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", EDGE_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("head_dim", ws_launch.HEAD_DIMS)
@pytest.mark.parametrize("is_causal,s_q,s_kv", [(True, 300, 300), (True, 100, 333), (False, 77, 200),
                                                (True, 1, 200), (False, 1, 129), (False, 333, 100),
                                                (False, 77, 30), (True, 1, 1)],
                         ids=["causal", "causal-q-lt-kv", "full-ragged", "causal-one-query", "one-query",
                              "full-q-gt-kv", "one-partial-key-tile", "one-key"])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (7, 1)], ids=["mha", "gqa4", "mqa7"])
def test_edge_cases(heads, is_causal, s_q, s_kv, head_dim, cfg):
    """Ragged key blocks (S_kv not a multiple of 128) and query blocks, one query row (causal: it sees every key),
    S_q > S_kv (non-causal only: the op refuses it causal), GQA ratios 1 / 4 / 7, both head dims, both dtypes
    by parity."""
    w = ROWS["llama-8b-short/f16" if (s_q + s_kv) % 2 else "llama-8b-short/bf16"]
    _check(make_case(w, DEV, seed=s_q + s_kv, batch=2, s_q=s_q, s_kv=s_kv, heads=heads, head_dim=head_dim,
                     is_causal=is_causal), cfg)


@pytest.mark.gpu
@hopper
def test_nondeterministic_calls_take_the_gluon_kernels(monkeypatch):
    """deterministic=False on a call the Gluon kernels serve by default (more than 512 keys) runs them, not the
    Triton kernel's atomic dQ: the reference's gradients, bitwise the same on a second call."""
    runs = []
    real = ws_launch.run
    monkeypatch.setattr(ws_launch, "run", lambda cfg, *a, **kw: runs.append(cfg) or real(cfg, *a, **kw))
    case = make_case(ROWS["llama-8b-short/bf16"], DEV, seed=9, batch=1, s_q=700, s_kv=700, heads=(8, 2),
                     head_dim=128)
    fn = functools.partial(SPEC.fn, deterministic=False)
    first = SPEC.check(case, fn)
    again = case.fresh().run(fn)
    assert runs == [bwd.ws_default(bwd.Problem(*(case.inputs[n] for n in ("q", "k", "v", "o", "do", "lse")),
                                               case.inputs["q"], case.inputs["k"], case.inputs["v"], True, 0.1),
                                   runtime.num_sms())] * 2
    for name in ("dq", "dk", "dv"):
        testing.assert_bitwise(name, first[name], again[name])


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("cfg", EDGE_CONFIGS[:2], ids=lambda c: c.name)
def test_fused_qkv_views(cfg):
    """q, k, v as views of one [B, S, H + 2·H_kv, D] buffer (rows wider than each tensor's heads): the TMA
    descriptors read each view's own row stride."""
    case = make_case(ROWS["llama-8b-short/bf16"], DEV, seed=5, batch=2, s_q=200, s_kv=200, heads=(8, 2),
                     head_dim=128)
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    fused = torch.cat([q, k, v], dim=2)
    case.inputs["q"], case.inputs["k"], case.inputs["v"] = fused[:, :, :8], fused[:, :, 8:10], fused[:, :, 10:]
    assert case.inputs["k"].stride(1) == 12 * 128
    _check(case, cfg, keep_views=True)


def test_compiles_for_sm90():
    """Both kernels at both head dims, every slot count the configs use, causal and not, both dtypes through
    Gluon's sm_90 pipeline and ptxas: no compile error, no spill, shared memory under the limit (the tool exits 1
    otherwise); the dK / dV kernel's head-subgroup epilogue (causal bf16) at every slot count; its persistent form
    (causal, full, causal with the head-subgroup epilogue); the ``-e`` configs' builds (both masks, bf16)."""
    listing = run_offline_compile(__file__, "sm90_compile_bwd_ws")
    lines = [ln for ln in listing.splitlines() if " regs " in ln]
    dkdv_stages = len({c.stages for c in ws_launch.WS_CONFIGS})
    kernels = dkdv_stages + len({c.stages for c in ws_launch.WS_CONFIGS if c.gluon_dq})
    persistent = 3 * len({c.stages for c in ws_launch.WS_CONFIGS if c.persistent})
    early = sum(c.early_scores for c in ws_launch.WS_CONFIGS)
    early = 2 * (early + len({c.stages for c in ws_launch.WS_CONFIGS if c.early_scores and c.gluon_dq}))
    assert len(lines) == (4 * kernels + dkdv_stages + persistent + early) * len(ws_launch.HEAD_DIMS), listing
    assert sum(" persistent" in ln for ln in lines) == persistent * len(ws_launch.HEAD_DIMS), listing


class _Launches:
    """Stands in for a Gluon kernel: ``kernel[grid](*args, **kwargs)`` is recorded as (grid, bound arguments)."""

    def __init__(self, kernel, calls):
        self.kernel, self.calls = kernel, calls

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append(
            (self.kernel, grid, {**dict(zip(self.kernel.arg_names, args)), **kwargs}))


def test_launches_bind_every_kernel_argument(monkeypatch):
    """Runs everywhere (TMA descriptors of host tensors): each launch binds exactly its kernel's parameters, dK /
    dV over (128-key blocks x B x H_kv) with 32-row query pairs at D = 128 and 64 at D = 64, dQ (``gluon_dq``)
    over (128-row query blocks x B x H)."""
    calls = []
    dkdv, dq = ws_kernel.gqa_bwd_dkdv_ws_kernel, ws_dq_kernel.gqa_bwd_dq_ws_kernel
    monkeypatch.setattr(ws_launch, "gqa_bwd_dkdv_ws_kernel", _Launches(dkdv, calls))
    monkeypatch.setattr(ws_launch, "gqa_bwd_dq_ws_kernel", _Launches(dq, calls))
    both = next(c for c in ws_launch.WS_CONFIGS if c.gluon_dq)
    for d, cfg in ((64, ws_launch.WS_CONFIGS[0]), (128, both)):
        q = torch.zeros(2, 300, 8, d, dtype=torch.float16)
        k = torch.zeros(2, 260, 2, d, dtype=torch.float16)
        p = bwd.Problem(q, k, k, q, q, torch.zeros(2, 8, 300), q, k, k, is_causal=True, sm_scale=0.1)
        ws_launch.run(cfg, p, torch.zeros(2, 8, 300))
    part = torch.zeros(2, 2, 2 * 2, 260, 128)  # 2 head subgroups of the 4 query heads per KV head
    ws_launch.run(ws_launch.WS_CONFIGS[0], p, torch.zeros(2, 8, 300), part)
    split = calls.pop()
    assert split[1] == (3 * 2 * 2 * 2,) and split[2]["GS"] == 2 and split[2]["PARTIAL"] is True
    assert split[2]["part_ptr"] is part
    assert [(kernel, grid) for kernel, grid, _ in calls] == [(dkdv, (3 * 2 * 2,)), (dkdv, (3 * 2 * 2,)),
                                                             (dq, (3 * 2 * 8,))]
    assert [bound["PARTIAL"] for _, _, bound in calls[:2]] == [False, False]
    for kernel, _, bound in calls:
        assert set(bound) - {"num_warps"} == set(kernel.arg_names)
    assert [bound["BLOCK_M"] for _, _, bound in calls[:2]] == [64, 32] and calls[0][2]["G"] == 4
    assert calls[2][2]["H"] == 8 and calls[2][2]["G"] == 4
    # values, not only names: strides, scales and constexprs where they belong
    for _, _, bound in calls:
        assert bound["qk_scale"] == pytest.approx(0.1 * 1.4426950408889634) and bound["sm_scale"] == 0.1
        assert bound["IS_CAUSAL"] is True and bound["S_q"] == 300 and bound["S_kv"] == 260
        assert (bound["stride_lb"], bound["stride_lh"]) == (8 * 300, 300)
    assert [calls[i][2]["STAGES"] for i in range(3)] == [ws_launch.WS_CONFIGS[0].stages, both.stages, both.stages]
    d128 = 300 * 8 * 128
    assert (calls[1][2]["stride_dkb"], calls[1][2]["stride_dkt"], calls[1][2]["stride_dkh"]) == (260 * 2 * 128,
                                                                                                2 * 128, 128)
    assert (calls[2][2]["stride_dqb"], calls[2][2]["stride_dqt"], calls[2][2]["stride_dqh"]) == (d128, 8 * 128, 128)
    assert [bound["n_tiles"] for _, _, bound in calls[:2]] == [3 * 2 * 2] * 2
    assert [bound["PERSISTENT"] for _, _, bound in calls[:2]] == [False, False]
    # the persistent dK / dV kernel: at most one program per SM, each walking the tiles
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 5)
    ws_launch.run(PERSISTENT, p, torch.zeros(2, 8, 300))
    persistent = calls[3]
    assert persistent[1] == (5,) and persistent[2]["n_tiles"] == 3 * 2 * 2 and persistent[2]["PERSISTENT"] is True


def test_calls_it_does_not_serve_are_refused():
    """Runs everywhere: a forced ws config on a call outside its domain raises before any launch, naming why."""
    narrow = make_case(ROWS["llama-8b-short/f16"], DEV, shrink=True, seed=1, head_dim=32)
    with bwd.forced(ws_launch.WS_CONFIGS[0]), pytest.raises(ValueError, match=r"needs D in \(64, 128\), got 32"):
        narrow.run(SPEC.fn)
    case = make_case(ROWS["llama-8b-short/f16"], DEV, shrink=True, seed=1)
    if ws_launch.refusal(bwd.Problem(*(case.inputs[n] for n in ("q", "k", "v", "o", "do", "lse")),
                                     case.inputs["q"], case.inputs["k"], case.inputs["v"], True, 0.1)):
        with bwd.forced(ws_launch.WS_CONFIGS[0]), pytest.raises(ValueError, match="needs a Hopper GPU"):
            case.run(SPEC.fn)


def test_early_scores_need_two_slots():
    """The early form waits for the next tile's slot while the current one is still held: one slot would hang."""
    with pytest.raises(ValueError, match="early_scores needs stages >= 2, got 1"):
        ws_launch.WsBwdConfig(1, True, early_scores=True)
