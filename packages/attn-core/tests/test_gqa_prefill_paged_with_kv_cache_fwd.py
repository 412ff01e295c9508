"""GQAPrefillPagedWithKVCacheFwd against its reference (output and both pools): every seed row (shrunk on CPU;
bf16 rows also in f16), split-KV, chunked prefill with one plan, fused RoPE (also over fp8 pools), fp8
saturation, empty requests, strided inputs, every tile config (GPU), bad input."""

import dataclasses

import pytest
import torch

from attnops.attn_core import gqa_prefill_paged_plan, gqa_prefill_paged_with_kv_cache_fwd
from attnops.attn_core.gqa_paged_fwd.op import FALLBACKS
from attnops.attn_core.gqa_paged_fwd.plan import CONFIGS
from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.spec import SPEC, build_case, make_case
from attnops.kernel_utils import reliability, runtime, testing
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

DEV = runtime.device()
F16 = torch.float16


def _plan(case, **plan_kw):
    a = case.inputs
    return gqa_prefill_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], a["q"].shape[1], a["k_new"].shape[1],
                                  a["q"].shape[2], is_causal=a.get("is_causal", True), **plan_kw)


def _check_with(case, plan):
    """Run ours with ``plan`` and compare with the reference."""
    ours = case.fresh()
    ours.inputs["plan"] = plan
    SPEC.compare(ours.run(SPEC.fn), case.fresh().run(SPEC.reference), case)
    return plan


def _with_plan(case, **plan_kw):
    return _check_with(case, _plan(case, **plan_kw))


@pytest.mark.parametrize(
    "w", seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Every seed row at interpreter size (D 64/128/256, G up to 48, RoPE R=64 and full, softcap, fp8 pools)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.parametrize("w", [w for w in SPEC.workloads if "bf16" in w.dtype], ids=lambda w: w.id)
def test_bf16_row_features_in_f16(w):
    """falcon (G = 71, not a power of two) and gemma (MQA, D = 256) in f16, which the interpreter computes right."""
    SPEC.check(make_case(dataclasses.replace(w, dtype="f16"), DEV, shrink=True, seed=3))


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


@pytest.mark.parametrize("pool_dtype", [F16, E4M3], ids=["f16", "fp8"])
@pytest.mark.parametrize("splits", [2, 4])
def test_forced_kv_splits(splits, pool_dtype):
    """Splits cut the cached range; the last split also visits the new rows; one decode-like request."""
    case = build_case([20, 1, 9], [150, 77, 0], 8, 2, 64, 16, F16, pool_dtype, DEV, seed=splits, fuse_rope=True,
                      rotary_dim=32, softcap=5.0)
    plan = _with_plan(case, num_splits=splits)
    assert any(int(ln.items[:, 3].max()) > 1 for ln in plan.attn.launches), plan.describe()


def test_chunked_prefill_reuses_one_plan():
    """Two chunks of the same requests with the first call's plan (same query lengths; cached lengths are read
    at run time): the second call attends over the rows the first one appended."""
    q_lens, c0 = [18, 5], [30, 0]
    c1 = [a + b for a, b in zip(c0, q_lens)]
    # the table and pools of the second call; the first call appends (overwrites) rows [c0, c1)
    second = build_case(q_lens, c1, 4, 2, 64, 16, F16, F16, DEV, seed=20, fuse_rope=True, max_position=120)
    fresh = build_case(q_lens, c1, 4, 2, 64, 16, F16, F16, DEV, seed=21)
    first = second.fresh()
    first.inputs.update({k: fresh.inputs[k] for k in ("q", "k_new", "v_new")})
    first.inputs["cache_seqlens"] = torch.tensor(c0, dtype=torch.int32, device=DEV)
    plan = gqa_prefill_paged_plan(first.inputs["cu_seqlens_q"], first.inputs["cache_seqlens"], 4, 2, 64)
    ours, ref = first.fresh(), first.fresh()
    ours.inputs["plan"] = plan
    SPEC.compare(ours.run(SPEC.fn), ref.run(SPEC.reference), first)
    for c in (ours, ref):  # continue from each side's own pools
        c.inputs.update({k: second.inputs[k].clone() for k in ("q", "k_new", "v_new", "out", "cache_seqlens")})
    expected_case = dataclasses.replace(ref, inputs=dict(ref.inputs))
    SPEC.compare(ours.fresh().run(SPEC.fn), ref.fresh().run(SPEC.reference), expected_case)


@pytest.mark.parametrize("rotary_dim", [None, 32])
def test_fused_rope_over_fp8_pool(rotary_dim):
    """TileOPs refuses RoPE with an fp8 pool; here the new keys are rotated, attended exactly and stored
    quantized."""
    case = build_case([12, 3], [40, 21], 8, 2, 64, 16, F16, E4M3, DEV, seed=22, fuse_rope=True,
                      rotary_dim=rotary_dim)
    SPEC.check(case)


@pytest.mark.parametrize("layout", ["rope-split", "softcap-empty", "page12-noncausal"])
def test_fp8_staging(layout):
    """fp8 pools copied to 16-bit staging pools (the warp-specialized route on the GPU; forced here so the
    interpreter runs the staging and staged-append kernels under the Triton attention): cached rows dequantized
    as the reference rounds them, new rows exact, empty requests, tails of unaligned pages, the fp8 append
    unchanged (bit-exact pools)."""
    kw = {"rope-split": dict(q_lens=[20, 1, 9], lens=[150, 77, 0], page=16, fuse_rope=True, rotary_dim=32),
          "softcap-empty": dict(q_lens=[0, 9, 17, 0], lens=[25, 0, 40, 0], page=16, softcap=5.0),
          "page12-noncausal": dict(q_lens=[7, 30], lens=[13, 50], page=12, is_causal=False)}[layout]
    q_lens, lens, page = kw.pop("q_lens"), kw.pop("lens"), kw.pop("page")
    case = build_case(q_lens, lens, 8, 2, 64, page, F16, E4M3, DEV, seed=31, **kw)
    plan = _with_plan(case, stage_fp8=True, num_splits=3 if layout == "rope-split" else None)
    assert plan.stage_fp8


@pytest.mark.parametrize("pool_dtype", [F16, E4M3], ids=["f16", "fp8"])
def test_decode_requests_merged_into_the_prefill_launch(pool_dtype):
    """``merge_small``: one-token requests run in the prefill tile's launch (second key source included)."""
    case = build_case([25, 1, 0, 2], [40, 90, 7, 0], 8, 2, 64, 16, F16, pool_dtype, DEV, seed=34, fuse_rope=True)
    plan = _with_plan(case, merge_small=True)
    assert [ln.kind for ln in plan.attn.launches] == ["large"]


def test_fp8_staging_sized_by_the_longest_request():
    """The op's own per-call plan stages the longest request's pages per request, not the table's capacity (here
    a table twice as wide as needed): the kernels index the staging pools by that width."""
    case = build_case([9, 3, 0], [40, 70, 5], 8, 2, 64, 16, F16, E4M3, DEV, seed=32, width=16, fuse_rope=True)
    plan = _plan(case, stage_fp8=True)
    plan.stage_tokens = 73  # what the op's own plan records: max(c + q) over requests with new tokens
    _check_with(case, plan)


def test_fp8_staging_rule(monkeypatch):
    """By default an fp8 call stages when a warp-specialized launch would then apply and the staging pools fit in
    the pools' 16-bit size; a reusable plan (no stage_tokens) sizes them by the table's capacity."""
    from attnops.attn_core.flash_fwd import ws_launch
    from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.op import _stage_width

    monkeypatch.setattr(ws_launch, "paged_applies", lambda *a, **k: True)
    case = build_case([130, 3], [40, 70], 8, 2, 64, 16, F16, E4M3, DEV, seed=33, width=12, num_pages=24)
    a = case.inputs
    plan = _plan(case, ws=ws_launch.PAGED_DEFAULTS[64])
    assert any(ln.ws is not None for ln in plan.attn.launches), plan.describe()
    args = (a["q"], a["k_pages"], a["v_pages"], a["block_table"], a["out"], 16)
    assert _stage_width(plan, *args) == 12  # 2 x 12 pages of 16 rows = the pool's 384 rows
    plan.stage_tokens = 170
    assert _stage_width(plan, *args) == 11
    wide = build_case([130, 3], [40, 70], 8, 2, 64, 16, F16, E4M3, DEV, seed=33, width=13, num_pages=24).inputs
    plan.stage_tokens = None
    assert _stage_width(plan, a["q"], wide["k_pages"], wide["v_pages"], wide["block_table"], a["out"], 16) == 0
    plan.stage_fp8 = False
    assert _stage_width(plan, *args) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("w", [w for w in SPEC.workloads if "fp8" in w.dtype], ids=lambda w: w.id)
def test_fp8_rows_stage_for_the_warp_specialized_kernel(w):
    """On Hopper the fp8 seed rows take the staged, warp-specialized route by default."""
    from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.op import _stage_width

    case = make_case(w, DEV, shrink=False, seed=5)
    a = case.inputs
    plan = _plan(case)
    assert _stage_width(plan, a["q"], a["k_pages"], a["v_pages"], a["block_table"], a["out"], a["page_size"]), \
        plan.describe()


def test_fp8_store_saturates():
    """New values past ±448·scale store as ±448 (saturating), the attention uses the exact 16-bit values."""
    case = build_case([10, 4], [20, 33], 4, 1, 64, 16, F16, E4M3, DEV, seed=23, new_scale=150.0)
    out = SPEC.check(case)
    stored = out["k_pages"].float()
    assert bool((stored.abs() == 448).any())


@pytest.mark.parametrize("causal", [True, False])
def test_empty_requests_and_fresh_prefill(causal):
    """q = 0 requests append nothing and read nothing; c = 0 requests attend over their new rows only."""
    case = build_case([0, 9, 17, 0], [25, 0, 40, 0], 8, 2, 64, 16, F16, F16, DEV, seed=24, is_causal=causal)
    SPEC.check(case)


def test_custom_op_schema_and_fake_impl():
    """torch.library registration, on the arguments the public function passes: the pools and ``out`` are declared
    mutated; the fake impl runs on meta."""
    from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd import op

    case = build_case([3, 2], [10, 0], 4, 2, 64, 16, F16, F16, DEV, seed=29)
    testing.opcheck_as_called(op, "_prefill", lambda: case.run(gqa_prefill_paged_with_kv_cache_fwd))


def test_empty_batch_is_a_no_op():
    case = build_case([0, 0], [5, 0], 4, 2, 64, 16, F16, F16, DEV, seed=25)
    SPEC.check(case)


def test_head_dim_128_group_of_8():
    case = build_case([19, 2], [31, 64], 8, 1, 128, 32, F16, F16, DEV, seed=26, softcap=2.0)
    SPEC.check(case)


def test_strided_inputs():
    """q/k_new/v_new as slices of one fused qkv tensor; pools as halves of a [PT, 2, H_kv, D] cache."""
    case = build_case([7, 3], [20, 11], 4, 2, 64, 16, F16, F16, DEV, seed=27, fuse_rope=True)
    ours, ref = case.fresh(), case.fresh()
    a = ours.inputs  # strided views are made after fresh(), which would copy them densely
    qkv = torch.cat([a["q"], a["k_new"], a["v_new"]], dim=1)
    fused = torch.stack([a["k_pages"], a["v_pages"]], dim=1)
    a["q"], a["k_new"], a["v_new"] = qkv[:, :4], qkv[:, 4:6], qkv[:, 6:]
    a["k_pages"], a["v_pages"] = fused[:, 0], fused[:, 1]
    assert not a["k_pages"].is_contiguous() and not a["q"].is_contiguous()
    SPEC.compare(ours.run(SPEC.fn), ref.run(SPEC.reference), case)
    testing.assert_bitwise("v_pages", fused[:, 1], ref.inputs["v_pages"])


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


@pytest.mark.gpu
@pytest.mark.parametrize("d", sorted({d for kind, d in CONFIGS if kind == "large"}))
@pytest.mark.parametrize("dtype", [F16, torch.bfloat16], ids=["f16", "bf16"])
def test_every_config(d, dtype):
    """The large-tile configs with the second key source (new rows), RoPE, fp8 pools and splits; the mixed batch
    both merged into one launch (``MERGED_CONFIGS`` where it has the head dim) and in two."""
    for pool_dtype in (dtype, E4M3):
        case = build_case([300, 77, 1], [2000, 500, 900], 8, 2, d, 64, dtype, pool_dtype, DEV, seed=28,
                          fuse_rope=True, rotary_dim=d // 2, softcap=30.0)
        SPEC.check(case)
        _with_plan(case, num_splits=3)
        _with_plan(case, merge_small=False)
        _with_plan(case, merge_small=True)
    assert not FALLBACKS, f"configs that did not fit (OutOfResources) and their replacements: {FALLBACKS}"


# --------------------------------------------------------------------------------------------------
# Bad input: rejected before any launch (pools untouched), with the argument named


def _base(**changes):
    case = build_case([3, 1], [20, 10], 8, 2, 64, 16, F16, F16, DEV, seed=1, width=3)
    case.inputs.update(changes)
    return case.inputs


def _f16(*shape):
    return torch.randn(shape, device=DEV).half()


def _i32(values):
    return torch.tensor(values, dtype=torch.int32, device=DEV)


BAD_INPUTS = {
    "q dtype": (lambda: _base(q=_f16(4, 8, 64).float()), TypeError, "q: expected dtype"),
    "k_new heads": (lambda: _base(k_new=_f16(4, 3, 64), v_new=_f16(4, 3, 64)), ValueError,
                    "not a multiple of the 3 KV heads"),
    "k_new rows": (lambda: _base(k_new=_f16(5, 2, 64)), ValueError, "k_new: expected shape"),
    "pool dtype vs cache_dtype": (lambda: _base(cache_dtype=E4M3), TypeError,
                                  "k_pages: expected dtype float8_e4m3fn"),
    "cache_dtype": (lambda: _base(cache_dtype=torch.bfloat16), ValueError, "cache_dtype: expected None"),
    "pool not whole pages": (lambda: _base(k_pages=_f16(50, 2, 64), v_pages=_f16(50, 2, 64)), ValueError,
                             "k_pages: 50 pool rows is not a whole number of pages of 16"),
    "page_size": (lambda: _base(page_size=0), ValueError, "page_size: must be a positive int"),
    "fp8 without scale": (lambda: _base(k_pages=torch.zeros(64, 2, 64, dtype=E4M3, device=DEV),
                                        v_pages=torch.zeros(64, 2, 64, dtype=E4M3, device=DEV), cache_dtype=E4M3,
                                        k_scale=None), ValueError, "k_scale: required"),
    "scale shape": (lambda: _base(v_scale=torch.ones(2, device=DEV)), ValueError, "v_scale: expected shape"),
    "cu_seqlens total": (lambda: _base(cu_seqlens_q=_i32([0, 3, 5])), ValueError,
                         "cu_seqlens_q: last entry must equal the packed length 4"),
    "cu_seqlens start": (lambda: _base(cu_seqlens_q=_i32([1, 3, 4])), ValueError, "cu_seqlens_q: must start at 0"),
    "max_seqlen_q too small": (lambda: _base(max_seqlen_q=2), ValueError,
                               r"max_seqlen_q: 2 is below the longest request \(3 tokens"),
    "table too narrow": (lambda: _base(cache_seqlens=_i32([20, 48])), ValueError,
                         r"block_table: too narrow: request 1 has 49 cached \+ new tokens = 4 pages of 16"),
    "page id out of range": (lambda: _base(block_table=_i32([[0, 1000, -7], [2, -7, -7]])), ValueError,
                             r"block_table: entry of request 0 names page 1000"),
    "negative cache length": (lambda: _base(cache_seqlens=_i32([20, -1])), ValueError,
                              "cache_seqlens: lengths must be >= 0"),
    "rope without max_position": (lambda: _base(fuse_rope=True), ValueError, "max_position: required"),
    "rope table too short": (lambda: _base(fuse_rope=True, max_position=22), ValueError,
                             "max_position: 22 positions, cache_seqlens \\+ q_len reaches 23"),
    "rotary_dim without rope": (lambda: _base(rotary_dim=32), ValueError, "rotary_dim: only with fuse_rope"),
    "odd rotary_dim": (lambda: _base(fuse_rope=True, max_position=64, rotary_dim=5), ValueError,
                       "rotary_dim: must be even"),
    "negative softcap": (lambda: _base(softcap=-2.0), ValueError, "softcap: must be None"),
    "out shape": (lambda: _base(out=_f16(4, 8, 32)), ValueError, "out: expected shape"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    inputs = make_inputs()
    before = inputs["k_pages"].clone()
    with pytest.raises(error, match=message):
        gqa_prefill_paged_with_kv_cache_fwd(**inputs)
    testing.assert_bitwise("k_pages", inputs["k_pages"], before)
