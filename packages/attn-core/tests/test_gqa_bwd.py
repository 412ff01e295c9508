"""GQABwd against its reference: every seed row (shrunk on CPU, full size and bf16 on the GPU), the cost model
against the page, the reference itself (fp64 gradcheck, the spec's closed-form gradients), the training
pair (forward lse, autograd end to end), edge cases (GQA ratios, head dims, S_q != S_kv, tile configs,
strided views, empty shapes) and bad input."""

import dataclasses
import functools
import random

import pytest
import torch

from attnops.attn_core import gqa_attention, gqa_attention_fwd, gqa_bwd
from attnops.attn_core.gqa_bwd import launch as bwd
from attnops.attn_core.gqa_bwd.reference import attention_ref, gqa_bwd_closed_form, gqa_bwd_ref
from attnops.attn_core.gqa_bwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.pytest_plugin import row_seed, run_offline_compile, seed_rows

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
GQA = ROWS["llama-8b-short/f16"]  # 32:8, D 128
GQA_BF16 = ROWS["llama-8b-short/bf16"]
MHA = ROWS["llama-8b-short-mha/f16"]


# --- seed rows and cost -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path of each seed row at interpreter size: B <= 2, S = 40 (ragged tiles), H_kv <= 2 with the
    row's GQA ratio, D = 128, causal (bf16 rows: the interpreter rounds bf16 wrongly)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    """The benchmark's exact shapes."""
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_cost_reproduces_the_published_sol(w):
    """FLOPs/bytes at full size (meta tensors) give the page's SOL and bound at the page's TileOPs time."""
    t = w.published.tileops_ms * 1e-3
    cost = SPEC.cost(make_case(w, torch.device("meta")))
    assert abs(cost.sol(t) - w.published.sol) <= 0.006, (cost.sol(t), w.published.sol)
    assert cost.bound(t) == w.published.bound


def test_cost_worked_example():
    """spec README §8: GQABwd llama-8b-short-mha f16 -> 21.47 GFLOP, 134.5 MB -> 191 TF/s, 27% mem."""
    cost = SPEC.cost(make_case(MHA, torch.device("meta")))
    assert round(cost.flops / 1e9, 2) == 21.47 and round(cost.bytes / 1e6, 1) == 134.5
    t = MHA.published.tileops_ms * 1e-3
    assert round(cost.flops / t / 1e12) == 191 and round(cost.sol(t), 2) == 0.27 and cost.bound(t) == "mem"
    assert SPEC.cost(make_case(GQA_BF16, torch.device("meta"))).roof == "tensor_core.bf16"
    # non-causal and S_q < S_kv (not page rows): full count / visible pairs
    nc = SPEC.cost(make_case(MHA, torch.device("meta"), is_causal=False))
    assert nc.flops == 2 * cost.flops
    short = SPEC.cost(make_case(MHA, torch.device("meta"), batch=1, heads=(1, 1), head_dim=16, s_q=3, s_kv=5))
    assert short.flops == 10 * 16 * (3 + 4 + 5)


# --- the reference ------------------------------------------------------------------------------------


@pytest.mark.parametrize("s_q,s_kv,heads,is_causal", [(5, 7, (4, 2), True), (6, 6, (3, 3), True),
                                                      (7, 4, (4, 1), False)], ids=["causal-sq<skv", "mha", "sq>skv"])
def test_reference_gradcheck_fp64(s_q, s_kv, heads, is_causal):
    """torch.autograd.gradcheck of the reference attention (o and its base-2 lse) in fp64: the graph the
    reference gradients come from matches finite differences."""
    gen = testing.generator(1)
    H, H_kv = heads
    args = [testing.randn(s, torch.float64, "cpu", gen).requires_grad_() for s in
            ((2, s_q, H, 8), (2, s_kv, H_kv, 8), (2, s_kv, H_kv, 8))]
    fn = lambda q, k, v: attention_ref(q, k, v, is_causal=is_causal, sm_scale=0.4, compute_dtype=torch.float64)
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("is_causal", [True, False])
def test_reference_matches_the_spec_formulas_fp64(is_causal):
    """The autograd reference equals the spec's closed form in fp64 (``gqa_bwd_closed_form``, which ``compare``
    also uses), computed from o and the base-2 lse exactly as the kernels do: P = 2^(s·log2 e − lse2),
    Δ = rowsum(o·dO), dS = P(dP − Δ), dK/dV summed over the G heads."""
    B, S_q, S_kv, H, H_kv, D = 2, 6, 9 if is_causal else 4, 6, 2, 16
    gen = testing.generator(2)
    q, k, v, do = (testing.randn(s, torch.float64, "cpu", gen) for s in
                   ((B, S_q, H, D), (B, S_kv, H_kv, D), (B, S_kv, H_kv, D), (B, S_q, H, D)))
    o, lse2 = attention_ref(q, k, v, is_causal=is_causal, compute_dtype=torch.float64)
    got = gqa_bwd_ref(q, k, v, o, do, lse2, is_causal=is_causal, compute_dtype=torch.float64)
    want = gqa_bwd_closed_form(q, k, v, o, do, lse2, is_causal=is_causal, compute_dtype=torch.float64)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


# --- the training pair -------------------------------------------------------------------------------


@pytest.mark.parametrize("is_causal,s_q,s_kv", [(True, 33, 33), (False, 20, 45), (True, 17, 40)],
                         ids=["causal", "non-causal", "causal-sq<skv"])
def test_forward_returns_base2_lse(is_causal, s_q, s_kv):
    """gqa_attention_fwd: o as the reference and lse = log2 Σ exp(s) over the visible scaled scores."""
    case = make_case(GQA, DEV, shrink=True, seed=3, s_q=s_q, s_kv=s_kv, head_dim=64, is_causal=is_causal)
    a = case.inputs
    o, lse = gqa_attention_fwd(a["q"], a["k"], a["v"], is_causal=is_causal)
    ref_o, ref_lse = attention_ref(a["q"], a["k"], a["v"], is_causal=is_causal)
    low_o, _ = attention_ref(a["q"], a["k"], a["v"], is_causal=is_causal, compute_dtype=torch.float16)
    testing.assert_close_dual("o", o, ref_o, low_o.to(torch.float16))
    assert lse.shape == ref_lse.shape and lse.dtype == torch.float32
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=2e-3)


@pytest.mark.parametrize("row,is_causal", [(GQA, True), (MHA, False)], ids=["gqa-causal", "mha-non-causal"])
def test_autograd_end_to_end(row, is_causal):
    """gqa_attention forward + backward through torch autograd against the reference's gradients."""
    case = make_case(row, DEV, shrink=True, seed=4, s_q=29, s_kv=29, head_dim=64, is_causal=is_causal)
    a = case.inputs
    q, k, v = (a[n].clone().requires_grad_() for n in ("q", "k", "v"))
    o = gqa_attention(q, k, v, is_causal=is_causal)
    o.backward(a["do"])
    ref = gqa_bwd_ref(**a)
    low = gqa_bwd_ref(**a, compute_dtype=torch.float16)
    for name, got, want, lp in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref, low):
        testing.assert_close_dual(name, got, want, lp)


def test_autograd_expanded_gradient_and_scale():
    """``o.sum().backward()`` hands the backward an expanded (stride-0) dO; a custom sm_scale reaches both
    kernels."""
    case = make_case(GQA, DEV, shrink=True, seed=5, batch=1, s_q=12, s_kv=20, head_dim=32, heads=(4, 2))
    a = case.inputs
    q, k, v = (a[n].clone().requires_grad_() for n in ("q", "k", "v"))
    gqa_attention(q, k, v, is_causal=True, sm_scale=0.3).sum().backward()
    do = torch.ones_like(a["do"])
    ref = gqa_bwd_ref(a["q"], a["k"], a["v"], None, do, None, is_causal=True, sm_scale=0.3)
    low = gqa_bwd_ref(a["q"], a["k"], a["v"], None, do, None, is_causal=True, sm_scale=0.3,
                      compute_dtype=torch.float16)
    for name, got, want, lp in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref, low):
        testing.assert_close_dual(name, got, want, lp)


# --- edge cases -------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [(4, 4), (6, 3), (8, 1), (16, 2), (71, 1)], ids=lambda h: f"H{h[0]}-Hkv{h[1]}")
@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
def test_gqa_ratios(heads, deterministic):
    """G = 1, 2, 8 (MQA), 8, 71: dK/dV summed over the G heads of a KV head in one program. H = 6 and 71 also give
    the preprocess partial head blocks (of 8; of 64, a second block of 7), deterministic=False its zeroed dQ rows."""
    case = make_case(GQA, DEV, shrink=True, seed=6, heads=heads, head_dim=64, s_q=24, s_kv=24, batch=1)
    SPEC.check(case, functools.partial(SPEC.fn, deterministic=deterministic))


@pytest.mark.parametrize("head_dim", [16, 32, 80, 96, 256])
def test_head_dims(head_dim):
    """Head dims off the seed rows (80, 96: padded BLOCK_D with masked columns; 256: its own class)."""
    SPEC.check(make_case(GQA, DEV, shrink=True, seed=8, head_dim=head_dim, heads=(4, 2), s_q=21, s_kv=21,
                         batch=1))


@pytest.mark.parametrize(
    "s_q,s_kv,is_causal",
    [(9, 21, True), (1, 30, True), (30, 11, False), (2, 2, True), (21, 21, False), (1, 1, True), (5, 1, False)],
    ids=["causal-sq<skv", "causal-sq1", "non-causal-sq>skv", "two-tokens", "non-causal", "one-token-one-key",
         "non-causal-one-key"],
)
def test_lengths(s_q, s_kv, is_causal):
    """Bottom-right causal with S_q < S_kv (the first S_kv − S_q keys are seen by every row: an unmasked
    block for the dK/dV role), a single query, S_q > S_kv without causal, two tokens. One key (found by the
    fuzzer, seed 502001): P = 1, so dq and dk are exactly 0 in the reference while the kernel's dP − Δ leaves
    fp32 rounding residue (~1e-6); ``compare`` judges an all-zero reference by an absolute bound."""
    SPEC.check(make_case(GQA, DEV, shrink=True, seed=9, s_q=s_q, s_kv=s_kv, is_causal=is_causal, head_dim=64,
                         heads=(4, 2)))


@pytest.mark.parametrize("seed,s_q,s_kv,heads,head_dim", [(502267, 1, 5, (4, 2), 64), (502437, 3, 3, (2, 1), 256)],
                         ids=["sq1-skv5-d64", "s3-d256"])
def test_peaked_softmax_with_rounded_o(seed, s_q, s_kv, heads, head_dim):
    """Few keys and sm_scale = 0.3 (found by the fuzzer): a peaked softmax makes dP − Δ cancel, so the f16
    rounding of the given ``o`` (Δ = rowsum(o·dO)) moves dq / dk by ~4e-3 — 7× torch's low-precision autograd,
    which recomputes the forward and never sees that rounding. ``compare`` then holds the kernel to the exact
    gradients of the inputs it was given (the spec's closed form from o and lse, fp32)."""
    SPEC.check(make_case(GQA, DEV, False, seed, batch=1, s_q=s_q, s_kv=s_kv, heads=heads, head_dim=head_dim,
                         is_causal=True, sm_scale=0.3))


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize(
    "is_causal,s_q,s_kv",
    [(True, 150, 150), (False, 150, 150), (True, 128, 128), (False, 128, 128), (True, 64, 192)],
    ids=["causal-ragged", "non-causal-ragged", "causal-even", "non-causal-even", "causal-even-sq<skv"],
)
def test_every_config_interpreter(head_dim, is_causal, s_q, s_kv):
    """Each tile config with several blocks per role: S = 150 has a masked diagonal, an unmasked middle and
    a ragged tail in both roles; S = 128 (a multiple of every tile: EVEN_M1 / EVEN_N2, the seed rows' path)
    compiles no tail loop. The GPU test repeats this for every class and dtype."""
    case = make_case(GQA, DEV, shrink=True, seed=10, batch=1, s_q=s_q, s_kv=s_kv, heads=(2, 1),
                     head_dim=head_dim, is_causal=is_causal)
    for cfg in bwd.configs_for(head_dim):
        with bwd.forced(cfg):
            try:
                SPEC.check(case)
            except AssertionError as e:
                raise AssertionError(f"config {cfg.name}: {e}") from None


ATOMIC = functools.partial(gqa_bwd, deterministic=False)


@pytest.mark.parametrize("is_causal", [True, False], ids=["causal", "non-causal"])
@pytest.mark.parametrize("heads", [(1, 1), (6, 1)], ids=["mha", "gqa6"])
def test_single_token_every_config(heads, is_causal):
    """S_q = S_kv = 1 (the GPU fuzz's seed 502019): every loop but the masked tail runs zero steps and Triton
    specializes both lengths to the constant 1. On the H200 the causal build read out of bounds (suspect: a
    division by the zero step count that the pipeliner hoists above the loop); the interpreter never showed it,
    so this test matters on the GPU. Every config, both dQ modes."""
    for dtype_row in (GQA, GQA_BF16) if not runtime.interpreting() else (GQA,):
        case = make_case(dtype_row, DEV, seed=502019, batch=1, s_q=1, s_kv=1, heads=heads, head_dim=64,
                         is_causal=is_causal, sm_scale=0.3)
        SPEC.check_each(case, {f"config {cfg.name}, {mode}": functools.partial(_forced_call, cfg, fn)
                               for cfg in bwd.configs_for(64)
                               for mode, fn in (("deterministic", gqa_bwd), ("atomic dQ", ATOMIC))})


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize(
    "is_causal,s_q,s_kv",
    [(True, 150, 150), (False, 150, 150), (True, 128, 128), (True, 64, 192), (False, 200, 70)],
    ids=["causal-ragged", "non-causal-ragged", "causal-even", "causal-even-sq<skv", "non-causal-sq>skv"],
)
def test_atomic_dq_every_config_interpreter(head_dim, is_causal, s_q, s_kv):
    """``deterministic=False``: the dK/dV programs add dQ with atomics, every config, several key blocks
    adding into each dQ row (masked diagonal, unmasked middle, ragged tails); GQA 2:1 and 3:1."""
    for heads in ((2, 1), (6, 2)):
        case = make_case(GQA, DEV, shrink=True, seed=15, batch=1, s_q=s_q, s_kv=s_kv, heads=heads,
                         head_dim=head_dim, is_causal=is_causal)
        fns = {}
        for cfg in bwd.configs_for(head_dim):
            fns[f"config {cfg.name}, heads {heads}"] = functools.partial(_forced_call, cfg, ATOMIC)
        SPEC.check_each(case, fns)


def _forced_call(cfg, fn, **inputs):
    with bwd.forced(cfg):
        return fn(**inputs)


@pytest.mark.parametrize("seed", [7039])
def test_atomic_dq_fuzz_regressions(seed):
    """Found by fuzzing ``deterministic=False`` (S_kv = 1, D = 256, sm_scale 0.3, non-causal): key rows past
    S_kv have K = 0, hence P = 2^-lse ≠ 0; their dS overflowed f16 and dS·K = inf·0 put NaN into dQ. Those
    rows now get P = 0 when S_kv is not a multiple of the key block."""
    case = SPEC.fuzz(seed, DEV)
    SPEC.check(case, ATOMIC)


def test_atomic_dq_autograd_and_tolerance():
    """The training pair with ``deterministic=False`` end to end, and two calls: dK/dV bitwise equal (never
    atomic), dQ within the op's tolerance of each other (the order of the fp32 adds may differ)."""
    case = make_case(MHA, DEV, shrink=True, seed=16, batch=2, s_q=45, s_kv=45, heads=(4, 2), head_dim=64)
    a = case.inputs
    q, k, v = (a[n].clone().requires_grad_() for n in ("q", "k", "v"))
    gqa_attention(q, k, v, is_causal=True, deterministic=False).backward(a["do"])
    ref = gqa_bwd_ref(**a)
    low = gqa_bwd_ref(**a, compute_dtype=a["q"].dtype)
    for name, got, want, lp in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref, low):
        testing.assert_close_dual(name, got, want, lp)
    first = SPEC.check(case, ATOMIC)
    again = case.fresh().run(ATOMIC)
    testing.assert_bitwise("dk", first["dk"], again["dk"])
    testing.assert_bitwise("dv", first["dv"], again["dv"])
    testing.assert_close_dual("dq", again["dq"], ref[0], low[0])


@pytest.mark.parametrize(
    "is_causal,s_q,s_kv",
    [(True, 150, 150), (False, 150, 150), (True, 64, 192), (False, 200, 70)],
    ids=["causal-ragged", "non-causal-ragged", "causal-sq<skv", "non-causal-sq>skv"],
)
def test_head_splits_interpreter(is_causal, s_q, s_kv):
    """dK/dV programs over subgroups of the G heads (``head_splits``), their fp32 partial sums added by
    ``gqa_bwd_head_sum_kernel`` or by each key block's last subgroup (``fused_sum``): 2 and G subgroups of an 8:1
    and a 4:2 group (two KV heads, two batch elements), the first and the short config, both dQ modes; a split count
    that does not divide G is refused."""
    for heads, splits in (((8, 1), 2), ((8, 1), 8), ((8, 2), 2)):
        case = make_case(GQA, DEV, shrink=True, seed=21, batch=2, s_q=s_q, s_kv=s_kv, heads=heads, head_dim=64,
                         is_causal=is_causal)
        fns = {f"config {cfg.name}, {splits} splits, {mode}, fused sum {fused}":
               functools.partial(_split_call, cfg, splits, fn, fused)
               for cfg in (bwd.configs_for(64)[0], bwd.configs_for(64)[-1])
               for mode, fn in (("deterministic", gqa_bwd), ("atomic dQ", ATOMIC)) for fused in (False, True)}
        SPEC.check_each(case, fns)
    with pytest.raises(ValueError, match="splits must divide the group size 4, got 3"):
        _split_call(bwd.configs_for(64)[0], 3, gqa_bwd, **case.inputs)


def _split_call(cfg, splits, fn, fused_sum=False, **inputs):
    with bwd.forced(cfg, splits=splits, fused_sum=fused_sum):
        return fn(**inputs)


@pytest.mark.parametrize("seed", range(200, 216))
def test_head_splits_fuzz(seed):
    """Fuzzed shapes (``SPEC.fuzz``: batch, lengths, GQA ratio, head dim, causal, scale) with a subgroup count drawn
    from the divisors of G, either way of adding the partials, either dQ mode and a program-order chunk of 1 to all
    (batch, KV head) pairs."""
    case = SPEC.fuzz(seed, DEV)
    g = case.inputs["q"].shape[2] // case.inputs["k"].shape[2]
    pairs = case.inputs["k"].shape[0] * case.inputs["k"].shape[2]
    pick = random.Random(seed)
    splits = pick.choice([d for d in range(1, g + 1) if g % d == 0])
    fn = pick.choice([gqa_bwd, ATOMIC])
    with bwd.forced(splits=splits, fused_sum=pick.random() < 0.5, group=pick.randint(1, pairs)):
        SPEC.check(case, fn)


@pytest.mark.parametrize("is_causal,s_q,s_kv", [(True, 150, 150), (False, 70, 130)],
                         ids=["causal-ragged", "non-causal"])
def test_program_order_interpreter(is_causal, s_q, s_kv):
    """The kernel's program order in chunks of ``group`` (batch, KV head) pairs (``ORDER_GROUP``): 6 pairs (2 batch
    elements x 3 KV heads, G = 2) in chunks of 1, 4 (4 + 2: a short last chunk), 5 and 6 (one chunk, as the default
    ``ORDER_GROUP`` gives for so few pairs),
    both dQ modes, 2 head subgroups with the fused sum; the reference check, and the deterministic outputs bitwise
    those of the default order (each output element is one program's, whatever the order)."""
    case = make_case(GQA, DEV, shrink=True, seed=31, batch=2, s_q=s_q, s_kv=s_kv, heads=(6, 3), head_dim=64,
                     is_causal=is_causal)
    cfg = bwd.configs_for(64)[-1]
    default = case.fresh().run(functools.partial(_split_call, cfg, 2, gqa_bwd, True))
    fns = {f"group {group}, {mode}": functools.partial(_order_call, cfg, group, fn)
           for group in (1, 4, 5, 6) for mode, fn in (("deterministic", gqa_bwd), ("atomic dQ", ATOMIC))}
    SPEC.check_each(case, fns)
    for group in (1, 4):
        got = case.fresh().run(functools.partial(_order_call, cfg, group, gqa_bwd))
        for name in ("dq", "dk", "dv"):
            testing.assert_bitwise(name, default[name], got[name])
    with pytest.raises(ValueError, match="group .* must be >= 1, got 0"):
        _order_call(cfg, 0, gqa_bwd, **case.inputs)


def _order_call(cfg, group, fn, **inputs):
    with bwd.forced(cfg, splits=2, fused_sum=True, group=group):
        return fn(**inputs)


def test_head_split_rule():
    """``head_splits`` on 132 SMs: llama-70b-short and llama-70b-long (128 programs each: SMs left idle) split their 8
    heads into 2; every other seed row keeps one subgroup (llama-8b-short's 256 programs included; MHA rows
    always)."""
    for w in SPEC.workloads:
        B, S, H, D = w.shape("q")
        H_kv = w.shape("k")[2]
        cfg = bwd.choose(D, B, S, S, H, H_kv, True, 132)
        got = bwd.head_splits(cfg.block_n1, B, S, H, H_kv, 132)
        assert got == (2 if w.name in ("llama-70b-short", "llama-70b-long") else 1), (w.id, got)
    # one KV head, 8 key blocks: 32 subgroups (256 programs), the fewest that give each of 132 SMs a program
    assert bwd.head_splits(bwd.SHORT_CONFIGS[128].block_n1, 1, 512, 64, 1, 132) == 32
    # 2 x 8 programs, G = 3: no divisor fills 132 SMs, so every head is its own subgroup
    assert bwd.head_splits(bwd.SHORT_CONFIGS[128].block_n1, 1, 512, 6, 2, 132) == 3


def test_ws_default_rule(monkeypatch):
    """Runs everywhere (the kernels' own refusal stubbed to accept): the 2048-key seed rows take the Gluon kernels
    (llama-70b-long with 2 head subgroups: ``head_splits`` of its 128 programs on 132 SMs; the MHA rows' 1024
    one-head programs the persistent dK / dV kernel with early scores), the 512-key MHA rows too (512 programs:
    persistent, without early scores), the 512-key GQA rows and any call the kernels refuse keep the Triton
    kernel."""
    monkeypatch.setattr(bwd.ws_launch, "refusal", lambda p: None)
    for w in SPEC.workloads:
        B, S, H, D = w.shape("q")
        H_kv = w.shape("k")[2]
        q, k = torch.empty(B, S, H, D), torch.empty(B, S, H_kv, D)
        p = bwd.Problem(q, k, k, q, q, torch.empty(B, H, S), q, k, k, True, 1.0)
        mha = H == H_kv
        persistent = bwd.WS_PERSISTENT_LONG if S > 512 else bwd.WS_PERSISTENT
        assert bwd.ws_default(p, 132) == (persistent if mha else bwd.WS_DEFAULT if S > 512 else None), w.id
        # deterministic=False permits atomics: the same kernels (their dQ stays deterministic)
        assert bwd.ws_default(dataclasses.replace(p, deterministic=False), 132) == bwd.ws_default(p, 132), w.id
        if S > 512:
            splits = bwd.head_splits(bwd.ws_launch.BLOCK_KEYS, B, S, H, H_kv, 132)
            assert splits == (2 if w.name == "llama-70b-long" else 1), w.id
    monkeypatch.setattr(bwd.ws_launch, "refusal", lambda p: "refused")
    q, k = torch.empty(2, 2048, 32, 128), torch.empty(2, 2048, 8, 128)
    assert bwd.ws_default(bwd.Problem(q, k, k, q, q, torch.empty(2, 32, 2048), q, k, k, True, 1.0), 132) is None


@pytest.mark.gpu
@pytest.mark.parametrize("fused_sum", [False, True], ids=["head-sum-launch", "fused-sum"])
@pytest.mark.parametrize("splits", [1, 2, 4, 8])
def test_head_splits_full_size_gpu(splits, fused_sum):
    """llama-70b-short at full size (the row the split rule is for) with every subgroup count and both ways of
    adding the partials, bf16; twice in a row (the fused sum's counters must be back at 0) and bitwise equal."""
    case = make_case(ROWS["llama-70b-short/bf16"], DEV, shrink=False, seed=23)
    fn = functools.partial(_split_call, bwd.SHORT_CONFIGS[128], splits, gqa_bwd, fused_sum)
    first = SPEC.check(case, fn)
    again = case.fresh().run(fn)
    for name in ("dq", "dk", "dv"):
        testing.assert_bitwise(name, first[name], again[name])


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
def test_dependent_launch_gpu(monkeypatch, deterministic):
    """The Triton kernel as the preprocess's programmatic dependent (``DEPENDENT_LAUNCH``) waits for Δ (and, with
    atomic dQ, the zeroed accumulator) before it reads them: on llama-8b-short-mha at full size the outputs pass the
    reference check and are those of the plain launch on three calls in a row: dK, dV (and dQ, deterministic)
    bitwise, the atomic dQ within a few rounding steps of its own (a program that read Δ or added into the
    accumulator early would differ by far more, or be NaN); deterministic, also captured in a CUDA graph and
    replayed."""
    case = make_case(MHA, DEV, shrink=False, seed=29)
    fn = functools.partial(SPEC.fn, deterministic=deterministic)
    monkeypatch.setattr(bwd, "DEPENDENT_LAUNCH", False)
    plain = case.fresh().run(fn)
    monkeypatch.setattr(bwd, "DEPENDENT_LAUNCH", True)
    SPEC.check(case, fn)
    for _ in range(3):
        got = case.fresh().run(fn)
        for name in ("dq", "dk", "dv") if deterministic else ("dk", "dv"):
            testing.assert_bitwise(name, plain[name], got[name])
        if not deterministic:  # the atomics' order varies: compare within a few f16 steps of the largest value
            scale = plain["dq"].abs().max().item()
            torch.testing.assert_close(got["dq"], plain["dq"], rtol=0, atol=4e-3 * scale)
    if deterministic:  # captured in a CUDA graph (the dependency becomes a programmatic edge) and replayed
        static = case.fresh()
        static.run(fn)
        captured = testing.replayed_in_graph(lambda: static.run(fn))
        for name in ("dq", "dk", "dv"):
            testing.assert_bitwise(name, plain[name], captured[name])


@pytest.mark.gpu
@pytest.mark.parametrize("group", [8, 32, 48], ids=lambda g: f"group{g}")
def test_program_order_gpu(group):
    """llama-8b-short-mha at full size (128 pairs) on the Triton kernel (its default is the Gluon kernels: forcing
    a group forces the Triton kernel) with the program order in chunks of 8, 32 and 48 pairs (48: a short last
    chunk), bf16: the reference check, and dQ, dK, dV bitwise those of one chunk."""
    case = make_case(ROWS["llama-8b-short-mha/bf16"], DEV, shrink=False, seed=37)
    with bwd.forced(group=128):
        one_chunk = case.fresh().run(gqa_bwd)
    with bwd.forced(group=group):
        got = SPEC.check(case, gqa_bwd)
    for name in ("dq", "dk", "dv"):
        testing.assert_bitwise(name, one_chunk[name], got[name])


def test_config_choice():
    """``choose`` is a function of the shapes: sequences of at most ``SHORT_KEYS`` keys take the class's short
    config (the 4-warp D = 128 tile); longer ones the first config of the class whose dK/dV grid covers 3/4 of the
    SMs, else the smallest key block. On 132 SMs every 2048-token seed row takes the first config."""
    first = bwd.configs_for(128)[0]
    short = bwd.SHORT_CONFIGS[128]
    assert short in bwd.configs_for(128) and short.num_warps == 4  # (run by the every-config GPU test)
    for w in SPEC.workloads:
        B, S, H, D = w.shape("q")
        H_kv = w.shape("k")[2]
        got = bwd.choose(D, B, S, S, H, H_kv, True, 132)
        assert got == (short if S <= bwd.SHORT_KEYS else first), (w.id, got.name)
    assert bwd.choose(128, 1, 40, 40, 16, 2, True, 1) == short
    assert bwd.choose(128, 1, 513, 513, 16, 2, True, 1) == first  # the interpreter (1 "SM") keeps the first
    small = next(c for c in bwd.configs_for(128) if c.block_n1 < first.block_n1)  # the first smaller key block
    assert bwd.choose(128, 1, 1024, 1024, 64, 8, True, 132) == small  # 8 x 8 programs of 128 keys: too few
    assert bwd.choose(256, 2, 512, 512, 64, 8, True, 132).block_n1 == 64  # no short config at D = 256: 128 programs
    assert bwd.choose(256, 1, 512, 512, 64, 4, True, 132).block_n1 == 32  # 32 or 64 programs: the most


def test_strided_views_and_determinism():
    """q/k/v/o/dO as head-sliced views of fused tensors and lse as a slice of a wider tensor (only the last
    dim contiguous); two calls give bitwise equal gradients (no atomics)."""
    case = make_case(GQA, DEV, shrink=True, seed=11, batch=2, s_q=13, s_kv=19, head_dim=64, heads=(4, 2))
    a = case.inputs
    B, S_q, S_kv = 2, 13, 19
    gen = testing.generator(3)
    qkv = testing.randn((B, S_kv, 9, 64), torch.float16, DEV, gen)
    a["k"], a["v"] = qkv[:, :, 0:2], qkv[:, :, 5:7]
    fused = testing.randn((B, S_q, 13, 64), torch.float16, DEV, gen)
    a["q"], a["do"] = fused[:, :, 1:5], fused[:, :, 8:12]
    o, lse = attention_ref(a["q"], a["k"], a["v"], is_causal=True)
    wide = torch.zeros((B, 6, S_q + 3), dtype=torch.float32, device=DEV)
    wide[:, 1:5, 2:2 + S_q] = lse
    a["lse"] = wide[:, 1:5, 2:2 + S_q]
    o_wide = torch.zeros((B, S_q, 5, 64), dtype=torch.float16, device=DEV)
    o_wide[:, :, 1:] = o.to(torch.float16)
    a["o"] = o_wide[:, :, 1:]
    first = SPEC.check(case)
    again = case.fresh().run(SPEC.fn)
    for name in case.outputs:
        testing.assert_bitwise(name, first[name], again[name])


def test_custom_ops_schema_and_fake():
    """attnops::gqa_bwd and attnops::gqa_attention_fwd as the public functions call them: no argument declared or
    found written, and fake impls whose outputs match the kernels' in shape, dtype and strides."""
    from attnops.attn_core.gqa_bwd import autograd, op

    a = make_case(GQA, DEV, shrink=True, seed=23, s_q=17, s_kv=29, head_dim=64).inputs
    testing.opcheck_as_called(op, "_bwd", lambda: gqa_bwd(**a))
    testing.opcheck_as_called(autograd, "_fwd_lse", lambda: gqa_attention_fwd(a["q"], a["k"], a["v"]))


def test_empty_shapes():
    """No batch, no query, no key: every gradient is 0 (nothing launched)."""
    for kw in ({"batch": 0}, {"s_q": 0, "s_kv": 5}, {"s_q": 4, "s_kv": 0, "is_causal": False}):
        case = make_case(GQA, DEV, shrink=True, seed=12, head_dim=64, heads=(4, 2), **kw)
        out = case.run(SPEC.fn)
        for name, t in out.items():
            assert not bool(t.any()), name
        SPEC.check(case)


def test_kernels_compile_for_sm90():
    """The GQABwd variants (deterministic, atomic dQ: wgmma, cp.async, vectorized fp32 atomics; head-split partial
    sums added by the head-sum kernel or by the last subgroup; the program order in chunks of pairs) through Triton's
    sm_90 pipeline and ptxas offline, every D = 128 config: no compile error, shared memory fits."""
    for extra in ((), ("--atomic-dq",), ("--partial",), ("--partial", "--fused-sum"), ("--chunked",)):
        listing = run_offline_compile(__file__, "sm90_compile_gqa_bwd", "--dims", "128", *extra)
        assert "COMPILE ERROR" not in listing and "OVER SMEM" not in listing, listing
        assert "head sum D128" in listing, listing
        if extra == ("--atomic-dq",):
            assert "atom.global" in listing, listing


# --- GPU-only ---------------------------------------------------------------------------------------

# One case per (dtype, head dim, config): a case of every config at once ran for minutes on one worker at the end of
# the GPU run (the last to end, or cut by the deadline, on an H100, 2026-12-06).
GPU_SWEEP = [pytest.param(dt, d, cfg, id=f"{dt}-{d}-{cfg.name}")
             for dt in ("f16", "bf16") for d in (64, 128, 256) for cfg in bwd.configs_for(d)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim,cfg", GPU_SWEEP)
def test_every_config_gpu(dtype, head_dim, cfg):
    """Every config of the table on the GPU (compiled paths the interpreter never sees: wgmma, pipelining,
    register pressure): causal and non-causal, ragged and even (EVEN_M1/EVEN_N2) lengths, S_q < S_kv;
    GQA 16:4."""
    w = GQA if dtype == "f16" else GQA_BF16
    shapes = ((1000, 1000, True), (1024, 1024, True), (300, 1000, True), (256, 1024, True), (700, 900, False),
              (512, 512, False))
    for s_q, s_kv, causal in shapes:
        case = make_case(w, DEV, seed=13, batch=2, s_q=s_q, s_kv=s_kv, heads=(16, 4), head_dim=head_dim,
                         is_causal=causal)
        with bwd.forced(cfg):
            try:
                SPEC.check(case)
            except AssertionError as e:
                raise AssertionError(f"S_q {s_q}, S_kv {s_kv}, causal {causal}: {e}") from None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim,cfg", GPU_SWEEP)
def test_atomic_dq_every_config_gpu(dtype, head_dim, cfg):
    """``deterministic=False`` on the GPU: every config, the shapes of ``test_every_config_gpu``."""
    w = GQA if dtype == "f16" else GQA_BF16
    for s_q, s_kv, causal in ((1000, 1000, True), (1024, 1024, True), (256, 1024, True), (700, 900, False)):
        case = make_case(w, DEV, seed=17, batch=2, s_q=s_q, s_kv=s_kv, heads=(16, 4), head_dim=head_dim,
                         is_causal=causal)
        shape = f"S_q {s_q}, S_kv {s_kv}, causal {causal}"
        SPEC.check_each(case, {shape: functools.partial(_forced_call, cfg, ATOMIC)})


@pytest.mark.gpu
@pytest.mark.parametrize("row", [GQA_BF16, ROWS["llama-70b-long-mha/f16"]], ids=lambda w: w.id)
def test_autograd_end_to_end_full_size_gpu(row):
    """gqa_attention at a seed row's full size, forward (flash kernel + lse) and backward."""
    case = make_case(row, DEV, seed=14)
    a = case.inputs
    q, k, v = (a[n].clone().requires_grad_() for n in ("q", "k", "v"))
    o = gqa_attention(q, k, v, is_causal=True)
    ref_o, _ = attention_ref(a["q"], a["k"], a["v"], is_causal=True)
    low_o, _ = attention_ref(a["q"], a["k"], a["v"], is_causal=True, compute_dtype=a["q"].dtype)
    testing.assert_close_dual("o", o, ref_o, low_o.to(a["q"].dtype))
    o.backward(a["do"])
    ref = gqa_bwd_ref(**a)
    low = gqa_bwd_ref(**a, compute_dtype=a["q"].dtype)
    for name, got, want, lp in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref, low):
        testing.assert_close_dual(name, got, want, lp)


# --- bad input --------------------------------------------------------------------------------------


def _bad(**changes):
    case = make_case(GQA, DEV, shrink=True, batch=2, s_q=8, s_kv=8, heads=(4, 2), head_dim=64)
    case.inputs.update(changes)
    return case.inputs


def _t(shape, dtype=torch.float16):
    return torch.randn(shape, device=DEV).to(dtype)


BAD_INPUTS = {
    "q f32": (lambda: _bad(q=_t((2, 8, 4, 64), torch.float32)), TypeError, "q: expected dtype"),
    "q 3 dims": (lambda: _bad(q=_t((8, 4, 64))), ValueError, "q: expected 4 dims"),
    "k dtype differs": (lambda: _bad(k=_t((2, 8, 2, 64), torch.bfloat16)), TypeError, "k: expected dtype float16"),
    "k batch": (lambda: _bad(k=_t((1, 8, 2, 64))), ValueError, "k: expected shape"),
    "v shape": (lambda: _bad(v=_t((2, 7, 2, 64))), ValueError, "v: expected shape"),
    "H_kv does not divide H": (lambda: _bad(k=_t((2, 8, 3, 64)), v=_t((2, 8, 3, 64))), ValueError,
                               "k: H_kv=3 must divide"),
    "head dim 8": (lambda: _bad(q=_t((2, 8, 4, 8)), k=_t((2, 8, 2, 8)), v=_t((2, 8, 2, 8)), o=_t((2, 8, 4, 8)),
                                do=_t((2, 8, 4, 8))), ValueError, "q: head dim must lie in"),
    "head dim 512": (lambda: _bad(q=_t((2, 8, 4, 512)), k=_t((2, 8, 2, 512)), v=_t((2, 8, 2, 512))), ValueError,
                     r"q: head dim must lie in \[16, 256\]"),
    "q last dim strided": (lambda: _bad(q=_t((2, 8, 64, 4)).transpose(2, 3)), ValueError,
                           "q: the last 1 dims must be contiguous"),
    "o shape": (lambda: _bad(o=_t((2, 8, 4, 32))), ValueError, "o: expected shape"),
    "o dtype": (lambda: _bad(o=_t((2, 8, 4, 64), torch.bfloat16)), TypeError, "o: expected dtype float16"),
    "do shape": (lambda: _bad(do=_t((2, 9, 4, 64))), ValueError, "do: expected shape"),
    "do missing": (lambda: _bad(do=None), TypeError, "do: expected a torch.Tensor"),
    "lse f16": (lambda: _bad(lse=_t((2, 4, 8))), TypeError, "lse: expected dtype float32"),
    "lse [B, S, H]": (lambda: _bad(lse=_t((2, 8, 4), torch.float32)), ValueError, "lse: expected shape"),
    "lse strided": (lambda: _bad(lse=_t((2, 8, 4), torch.float32).transpose(1, 2)), ValueError,
                    "lse: the last 1 dims must be contiguous"),
    "causal S_q > S_kv": (lambda: _bad(q=_t((2, 9, 4, 64)), o=_t((2, 9, 4, 64)), do=_t((2, 9, 4, 64)),
                                       lse=_t((2, 4, 9), torch.float32)), ValueError, "q: S_q=9 > S_kv=8"),
    "is_causal int": (lambda: _bad(is_causal=1), TypeError, "is_causal: expected a bool"),
    "sm_scale 0": (lambda: _bad(sm_scale=0.0), ValueError, "sm_scale: must be > 0"),
    "deterministic str": (lambda: _bad(deterministic="no"), TypeError, "deterministic: expected a bool"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        gqa_bwd(**make_inputs())


def test_bad_input_training_pair():
    """The forward and the autograd entry point run the same checks before any launch."""
    a = _bad()
    with pytest.raises(ValueError, match="k: H_kv=3 must divide"):
        gqa_attention_fwd(a["q"], _t((2, 8, 3, 64)), _t((2, 8, 3, 64)))
    with pytest.raises(ValueError, match=r"q: head dim must lie in \[16, 256\]"):
        gqa_attention(_t((1, 4, 2, 512)), _t((1, 4, 2, 512)), _t((1, 4, 2, 512)))
    with pytest.raises(ValueError, match="q: S_q=9 > S_kv=8"):
        gqa_attention(_t((2, 9, 4, 64)), a["k"], a["v"], is_causal=True)
