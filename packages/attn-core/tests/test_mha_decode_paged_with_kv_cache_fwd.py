"""MHADecodePagedWithKVCacheFwd against its reference: every seed row (shrunk on CPU), causal speculative
chunks longer than the cache, split-KV, plan reuse, shared pages, bad input."""

import pytest
import torch

from attnops.attn_core import mha_decode_paged_plan, mha_decode_paged_with_kv_cache_fwd
from attnops.attn_core.mha_decode_paged_with_kv_cache_fwd.spec import SPEC, build_case, make_case
from attnops.kernel_utils import reliability, runtime, testing
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

DEV = runtime.device()
F16 = torch.float16


def _check_with_plan(case, **plan_kw):
    a = case.inputs
    q = a["q"]
    plan = mha_decode_paged_plan(a["real_seqlen_kv"], q.shape[1], q.shape[2], q.shape[3],
                                 is_causal=a["is_causal"], **plan_kw)
    ours = case.fresh()
    ours.inputs["plan"] = plan
    SPEC.compare(ours.run(SPEC.fn), case.fresh().run(SPEC.reference), case)
    return plan


@pytest.mark.parametrize(
    "w", seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Every seed row at interpreter size (page 128/256, D 64/128, S_q 1 and 4 causal, lengths off pages)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_cost_reproduces_the_published_sol(w):
    """FLOPs/bytes at full size (meta tensors, host lengths and table) give the page's SOL and bound at the
    page's TileOPs time."""
    cost = SPEC.cost(make_case(w, torch.device("meta")))
    t = w.published.tileops_ms * 1e-3
    assert abs(cost.sol(t) - w.published.sol) <= 0.006, (cost.sol(t), w.published.sol)
    assert cost.bound(t) == w.published.bound


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_bf16(w):
    """The same rows in bf16 (the op accepts both)."""
    case = make_case(w, DEV, shrink=False, seed=8)
    for name in ("q", "k", "v"):
        case.inputs[name] = case.inputs[name].to(torch.bfloat16)
    SPEC.check(case)


@pytest.mark.parametrize("causal", [True, False])
def test_lengths_shorter_than_the_chunk(causal):
    """len < S_q (causal: the first rows see no key -> zeros), len = 0 (all zeros), lengths off the page."""
    case = build_case([2, 0, 37, 16], 4, 4, 64, 16, F16, DEV, seed=3, is_causal=causal)
    SPEC.check(case)


@pytest.mark.parametrize("fused", [True, False], ids=["merged-in-kernel", "combine-launch"])
@pytest.mark.parametrize("splits", [2, 3])
def test_forced_kv_splits(splits, fused):
    """Both ways of merging splits: in the attention kernel (the op's default) and by the combine launch."""
    case = build_case([300, 45, 0], 4, 2, 128, 64, F16, DEV, seed=splits, is_causal=True)
    plan = _check_with_plan(case, num_splits=splits, fused_combine=fused)
    split = [ln for ln in plan.launches if ln.part_o.numel()]
    assert split and all((ln.counters is not None) == fused and bool(ln.n_combine) != fused for ln in split)


def test_plans_merge_splits_in_the_kernel_by_default():
    plan = mha_decode_paged_plan([300, 45, 0], 4, 2, 128, is_causal=True, num_splits=2)
    assert any(ln.counters is not None for ln in plan.launches)


def test_plan_reuse_and_mismatch():
    case = build_case([100, 61], 1, 4, 64, 16, F16, DEV, seed=4, width=10)
    plan = mha_decode_paged_plan([100, 61], 1, 4, 64, num_splits=2)
    grown = build_case([101, 62], 1, 4, 64, 16, F16, DEV, seed=5, width=10)
    for c in (case, grown):
        ours = c.fresh()
        ours.inputs["plan"] = plan
        SPEC.compare(ours.run(SPEC.fn), c.fresh().run(SPEC.reference), c)
    with pytest.raises(ValueError, match="plan: built for another mask"):
        mha_decode_paged_with_kv_cache_fwd(**{**case.inputs, "is_causal": True}, plan=plan)
    with pytest.raises(ValueError, match="plan: built for H=8, H_kv=8, D=64, got H=4"):
        mha_decode_paged_with_kv_cache_fwd(**case.inputs, plan=mha_decode_paged_plan([100, 61], 1, 8, 64))


def test_custom_op_schema_and_fake_impl():
    """torch.library registration, on the arguments the public function passes: declared schema (no mutation) and
    the fake (meta) implementation."""
    from attnops.attn_core.mha_decode_paged_with_kv_cache_fwd import op

    case = build_case([20, 7], 1, 2, 64, 16, F16, DEV, seed=10)
    testing.opcheck_as_called(op, "_mha_decode", lambda: case.run(mha_decode_paged_with_kv_cache_fwd))


def test_shared_pages():
    case = build_case([40, 33, 47], 1, 2, 64, 16, F16, DEV, seed=6, share_pages=True)
    SPEC.check(case)


def test_long_chunk_uses_the_large_tile():
    """S_q = 20 (> 16 rows): the prefill-class tile."""
    case = build_case([60, 25], 20, 2, 64, 16, F16, DEV, seed=9, is_causal=True)
    SPEC.check(case)


FUZZ_SEEDS = reliability.fuzz_seeds(SPEC, reliability.fuzz_cases(6))


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_case_matches_reference(seed):
    """Seeded random valid calls (``spec.fuzz``): a few in CI, ATTNOPS_FUZZ_CASES=n for more."""
    reliability.run_fuzz_case(SPEC, seed)


def test_repeated_calls_are_bitwise_identical():
    """No atomics: split-KV partials are merged in a fixed order."""
    assert SPEC.deterministic
    for seed in FUZZ_SEEDS[:2]:
        reliability.assert_deterministic(SPEC, SPEC.fuzz(seed, DEV))


def _base(**changes):
    case = build_case([40, 20], 1, 4, 64, 16, F16, DEV, seed=1, width=3)
    case.inputs.update(changes)
    return case.inputs


def _f16(*shape):
    return torch.randn(shape, device=DEV).half()


def _i32(values):
    return torch.tensor(values, dtype=torch.int32, device=DEV)


BAD_INPUTS = {
    "q 3-D": (lambda: _base(q=_f16(2, 4, 64)), ValueError, "q: expected 4 dims"),
    "q dtype": (lambda: _base(q=_f16(2, 1, 4, 64).float()), TypeError, "q: expected dtype"),
    "k heads": (lambda: _base(k=_f16(80, 2, 64)), ValueError, "k: expected shape"),
    "v dtype": (lambda: _base(v=_f16(80, 4, 64).to(torch.bfloat16)), TypeError, "v: expected dtype float16"),
    "pool not whole pages": (lambda: _base(k=_f16(70, 4, 64), v=_f16(70, 4, 64)), ValueError,
                             "k: 70 pool rows is not a whole number of pages of page_size 16"),
    "page_size": (lambda: _base(page_size=-16), ValueError, "page_size: must be a positive int"),
    "seqlen shape": (lambda: _base(real_seqlen_kv=_i32([40])), ValueError, "real_seqlen_kv: expected shape"),
    "table rows": (lambda: _base(block_table=_i32([[0, 1, 2]])), ValueError, "block_table: expected shape"),
    "table too narrow": (lambda: _base(real_seqlen_kv=_i32([40, 49])), ValueError,
                         "block_table: too narrow: request 1 has 49 keys = 4 pages of 16, the table has 3"),
    "page id out of range": (lambda: _base(block_table=_i32([[0, 1, 2], [9, -1, -1]])), ValueError,
                             r"block_table: entry of request 1 names page 9, the pool has pages \[0, "),
    "negative length": (lambda: _base(real_seqlen_kv=_i32([40, -2])), ValueError,
                        "real_seqlen_kv: lengths must be >= 0"),
    "head dim": (lambda: _base(q=_f16(2, 1, 4, 80), k=_f16(80, 4, 80), v=_f16(80, 4, 80)), ValueError,
                 "q: head dim must be a power of two"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        mha_decode_paged_with_kv_cache_fwd(**make_inputs())
