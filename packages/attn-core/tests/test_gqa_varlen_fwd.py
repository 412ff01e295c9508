"""GQAVarlenFwd against its reference: every seed row (shrunk on CPU, full size on the GPU), the cost model
against the page, edge cases (empty requests and rows, q_len > kv_len, windows, sinks, RoPE, fp8,
GQA ratios, D = 512, split-KV, no-sync path, strided views), the split heuristic, bad input."""

import functools

import pytest
import torch

from attnops.attn_core import gqa_varlen_fwd
from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.gqa_varlen_fwd.spec import SPEC, make_case
from attnops.kernel_utils import reliability, runtime, testing
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
UNIFORM = ROWS["llama-8b-uniform/f16"]
SINKS = ROWS["gpt-oss-sink-mixed/f16"]
FP8 = ROWS["llama-8b-fp8-sink/fp8e4m3/bf16"]
ROPE = ROWS["llama-8b-rope-partial/f16"]


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path of each seed row at interpreter size (bf16 and fp8->bf16 rows: GPU only)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_cost_reproduces_the_published_sol(w):
    """FLOPs/bytes at full size (meta tensors) give the page's SOL and bound at the page's TileOPs time."""
    cost = SPEC.cost(make_case(w, torch.device("meta")))
    t = w.published.tileops_ms * 1e-3
    assert abs(cost.sol(t) - w.published.sol) <= 0.006, (cost.sol(t), w.published.sol)
    assert cost.bound(t) == w.published.bound


# --- edge cases -------------------------------------------------------------------------------------


@pytest.mark.parametrize("is_causal", [True, False], ids=["causal", "full"])
def test_zero_lengths_and_more_queries_than_keys(is_causal):
    """q_len = 0, kv_len = 0 (rows -> 0), both 0, and q_len > kv_len (causal: the first rows are empty)."""
    SPEC.check(make_case(UNIFORM, DEV, shrink=True, seed=1, q_lens=[0, 5, 0, 9, 30, 1, 3],
                         kv_lens=[4, 0, 0, 20, 12, 1, 40], head_dim=64, is_causal=is_causal))


def test_all_requests_empty():
    SPEC.check(make_case(UNIFORM, DEV, shrink=True, seed=2, q_lens=[0, 0], kv_lens=[0, 5], head_dim=64))


@pytest.mark.parametrize("num_splits", [1, 4])
def test_sinks_with_empty_rows_and_windows(num_splits):
    """Sinks enlarge the denominator only; rows with no visible key stay 0 (q_len > kv_len, kv_len = 0,
    a window that empties nothing but shortens rows); the combine kernel adds the sink after splitting."""
    with fwd.forced(num_splits=num_splits):
        SPEC.check(make_case(SINKS, DEV, shrink=True, seed=3, q_lens=[20, 1, 0, 6, 4], kv_lens=[20, 45, 0, 2, 0],
                             window_size_left=6))


@pytest.mark.parametrize(
    "params",
    [{"window_size_left": 3, "window_size_right": 5, "is_causal": False},
     {"window_size_left": 0},
     {"window_size_right": 2, "is_causal": False, "softcap": 3.0}],
    ids=["wl3-wr5", "causal-wl0", "wr2-softcap"],
)
def test_windows_ragged(params):
    SPEC.check(make_case(UNIFORM, DEV, shrink=True, seed=4, q_lens=[7, 25, 1], kv_lens=[30, 25, 9], head_dim=64,
                         **params))


@pytest.mark.parametrize("layout,rotary_dim", [("neox", 64), ("interleaved", 32), ("interleaved", None)])
def test_rope_ragged(layout, rotary_dim):
    """RoPE at per-request positions (query i at kv_len − q_len + i), partial rotary dims, both layouts."""
    SPEC.check(make_case(ROPE, DEV, shrink=True, seed=5, rope_layout=layout, rotary_dim=rotary_dim,
                         q_lens=[1, 0, 13, 5], kv_lens=[30, 0, 13, 20], heads=(4, 1)))


@pytest.mark.parametrize("layout,rotary_dim", [("neox", 64), ("interleaved", 32), ("interleaved", None),
                                               ("neox", None)])
def test_rope_keys_rotated_in_a_prepass(layout, rotary_dim):
    """``rope_key_prepass``: the keys rotated once by ``rope_rows_kernel`` (positions 0 .. kv_len − 1 per
    request), q in the kernel; ragged requests, an empty one, q_len > kv_len, a key-less request."""
    with fwd.forced(rope_key_prepass=True):
        SPEC.check(make_case(ROPE, DEV, shrink=True, seed=20, rope_layout=layout, rotary_dim=rotary_dim,
                             q_lens=[1, 0, 13, 5, 7, 3], kv_lens=[30, 0, 13, 20, 3, 0], heads=(4, 1)))


@pytest.mark.parametrize("heads", [(2, 2), (6, 3), (71, 1)], ids=["G1", "G2", "G71"])
def test_gqa_ratios_ragged(heads):
    SPEC.check(make_case(UNIFORM, DEV, shrink=True, seed=6, q_lens=[3, 1, 11], kv_lens=[20, 7, 11], heads=heads,
                         head_dim=64))


def test_head_dim_512_ragged():
    """gemma4's D = 512 (GQA 8:1) with ragged lengths."""
    SPEC.check(make_case(ROWS["gemma4-26b-a4b-ragged/f16"], DEV, shrink=True, seed=7, q_lens=[5, 17],
                         kv_lens=[9, 17], heads=(8, 1)))


@pytest.mark.parametrize("with_sinks", [False, True])
def test_fp8_to_f16(with_sinks):
    """fp8 inputs with per-[B, H_kv] scales (each request its own row), window and sinks, f16 output (the
    seed fp8 rows produce bf16, which only the GPU computes right)."""
    case = make_case(FP8, DEV, shrink=True, seed=8, q_lens=[9, 0, 14], kv_lens=[20, 3, 14], head_dim=64,
                     with_sinks=with_sinks, window_size_left=8 if with_sinks else -1)
    case.inputs["out_dtype"] = torch.float16
    SPEC.check(case)


def test_split_kv_ragged():
    """Forced splits over ragged requests: short requests leave whole splits empty."""
    with fwd.forced(num_splits=5):
        SPEC.check(make_case(UNIFORM, DEV, shrink=True, seed=9, q_lens=[1, 2, 0, 1], kv_lens=[47, 3, 9, 0],
                             head_dim=128))


@pytest.mark.parametrize("num_splits", [2, 5])
def test_split_kv_merged_in_the_kernel(num_splits):
    """``fused_combine``: the last split of each block merges the partials itself (no combine launch), over
    ragged requests with empty splits, an empty request, q_len > kv_len, sinks and a window; twice, so the
    second call runs on the arrival counters the first one left, which must be back at 0."""
    case = make_case(SINKS, DEV, shrink=True, seed=18, q_lens=[1, 2, 0, 1, 9], kv_lens=[47, 3, 9, 0, 30],
                     window_size_left=20)
    with fwd.forced(num_splits=num_splits, fused_combine=True):
        first = SPEC.check(case)
        again = case.fresh().run(SPEC.fn)
    testing.assert_bitwise("o", first["o"], again["o"])
    assert not bool(runtime.arrival_counters(DEV, 1).any()), "arrival counters not reset"


@pytest.mark.parametrize("bounds", [(None, None), (40, 64)], ids=["read-lengths", "loose-bounds"])
def test_host_length_bounds(bounds):
    """Without max_seqlen_q / max_seqlen_kv the call reads cu_seqlens on the host; given bounds (the seed
    cases pass the exact maxima, as serving engines do) may be loose: they only enlarge the grid."""
    case = make_case(UNIFORM, DEV, shrink=True, seed=10, q_lens=[5, 12], kv_lens=[5, 30], head_dim=64)
    case.inputs.update(max_seqlen_q=bounds[0], max_seqlen_kv=bounds[1])
    SPEC.check(case)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_key_gives_nan_rows_in_kernel_and_reference():
    """A NaN in one request's key makes o NaN for that request's rows that see it, on the heads of its KV head, in
    the kernel and in the reference (found by test_attn_core_reliability.py: the reference's ``z > 0`` test turned
    a NaN softmax denominator into p = 0, so it returned zeros there)."""
    case = make_case(UNIFORM, DEV, seed=14, q_lens=[3, 4, 2], kv_lens=[7, 12, 5], heads=(4, 2), head_dim=64,
                     with_sinks=False)
    case.inputs["k"][7, 1, 3] = float("nan")  # request 1, key 0: seen by every row (bottom-right causal)
    for who, fn in (("kernel", SPEC.fn), ("reference", SPEC.reference)):
        o = case.fresh().run(fn)["o"]
        assert bool(o[3:7, 2:].isnan().all()), f"{who}: NaN key did not give NaN rows"
        o[3:7, 2:] = 0
        assert not bool(o.isnan().any()), f"{who}: NaN spread"


def test_config_that_does_not_fit_falls_through(monkeypatch):
    """A config the GPU cannot hold (OutOfResources, raised before anything runs) hands over to the next."""
    import triton

    tried = []
    real = fwd._launch

    def fake(p, cfg):
        tried.append(cfg)
        if len(tried) == 1:
            raise triton.runtime.errors.OutOfResources(300000, 232448, "shared memory")
        real(p, cfg)

    monkeypatch.setattr(fwd, "_launch", fake)
    monkeypatch.setattr(fwd, "_FITS", {})
    case = make_case(UNIFORM, DEV, shrink=True, seed=13, q_lens=[40, 50], kv_lens=[40, 50], head_dim=64)
    SPEC.check(case)
    SPEC.check(case)
    assert tried == [fwd.PREFILL_CONFIGS[64][0], fwd.PREFILL_CONFIGS[64][1], fwd.PREFILL_CONFIGS[64][1]]
    # remembered per (head-dim class, decode, fp8, few programs per SM): the index into that call's candidates
    assert [(key[:3], i) for key, i in fwd._FITS.items()] == [((64, False, False), 1)]


TMA_CASES = {
    "causal-ragged-empty-q>kv": dict(q_lens=[0, 5, 0, 9, 30, 1, 3], kv_lens=[4, 0, 0, 20, 12, 1, 40]),
    "full-ragged": dict(q_lens=[7, 25, 1], kv_lens=[30, 25, 9], is_causal=False),
    "window-sinks": dict(q_lens=[20, 1, 6], kv_lens=[20, 45, 2], window_size_left=6, with_sinks=True),
    "wr2-softcap": dict(q_lens=[7, 25, 1], kv_lens=[30, 25, 9], window_size_right=2, is_causal=False, softcap=3.0),
    "G5": dict(q_lens=[3, 11], kv_lens=[20, 11], heads=(10, 2)),
}


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("name", TMA_CASES)
def test_tma_configs_interpreter(name, head_dim):
    """The ``-tma`` configs (K/V through per-request descriptors) on the interpreter, which runs their
    descriptor loads: ragged and empty requests, q_len > kv_len, windows, sinks, softcap, GQA 5:1."""
    case = make_case(UNIFORM, DEV, shrink=True, seed=15, head_dim=head_dim, **TMA_CASES[name])
    fns = {c.name: functools.partial(_forced_fwd, c) for c in fwd.configs_for(head_dim, 1200) if c.tma}
    assert fns and fwd.tma_applies(_problem_of(case))
    SPEC.check_each(case, fns)


def _forced_fwd(cfg, **inputs):
    with fwd.forced(config=cfg):
        return SPEC.fn(**inputs)


def _problem_of(case):
    a = case.inputs
    return fwd.Problem(a["q"], a["k"], a["v"], a["q"], varlen=True, batch=len(a["cu_seqlens_q"]) - 1,
                       max_q=a["max_seqlen_q"], max_kv=a["max_seqlen_kv"])


@pytest.mark.parametrize("dtype", ["f16"] + (["bf16"] if DEV.type == "cuda" else []))
def test_tma_tail_tile_does_not_read_the_next_request(dtype):
    """A request whose last key tile is partial must not see the next request's rows: with those rows
    NaN, the TMA configs' rows of the first request stay finite and correct (the descriptor of a request
    ends at its own kv_len; rows past it read as zeros)."""
    w = UNIFORM if dtype == "f16" else ROWS["llama-8b-uniform/bf16"]
    case = make_case(w, DEV, shrink=True, seed=16, q_lens=[9, 4], kv_lens=[21, 30], head_dim=64, heads=(4, 2))
    a = case.inputs
    expected = case.fresh().run(SPEC.reference)["o"][:9]
    a["k"][21:], a["v"][21:] = float("nan"), float("nan")
    for cfg in fwd.configs_for(64, 1200):
        if cfg.tma:
            o = _forced_fwd(cfg, **case.fresh().inputs)
            assert bool(o[9:].isnan().all()), cfg.name
            SPEC.compare({"o": o[:9]}, {"o": expected}, case)


def test_strided_views():
    """q/k/v as head-sliced views of a fused qkv tensor (only the last dim contiguous). The views are built
    after ``fresh()``, whose clone would make them dense."""
    case = make_case(UNIFORM, DEV, shrink=True, seed=11, q_lens=[6, 10], kv_lens=[6, 10], heads=(4, 2),
                     head_dim=64)
    ours = case.fresh()
    a = ours.inputs
    qkv = testing.randn((16, 9, 64), torch.float16, DEV, testing.generator(3))
    qkv[:, 0:4], qkv[:, 4:6], qkv[:, 7:9] = a["q"], a["k"], a["v"]
    a.update(q=qkv[:, 0:4], k=qkv[:, 4:6], v=qkv[:, 7:9])
    assert not (a["q"].is_contiguous() or a["k"].is_contiguous() or a["v"].is_contiguous())
    SPEC.compare(ours.run(SPEC.fn), case.fresh().run(SPEC.reference), case)


def test_custom_op_schema_and_fake():
    """torch.library.opcheck of attnops::gqa_varlen_fwd on the arguments the public function passes: schema (no
    mutation) and the fake (meta) impl."""
    from attnops.attn_core.gqa_varlen_fwd import op

    case = make_case(SINKS, DEV, shrink=True, seed=14, q_lens=[3, 0, 5], kv_lens=[9, 2, 5], window_size_left=4)
    testing.opcheck_as_called(op, "_varlen", lambda: case.run(gqa_varlen_fwd))


def test_split_heuristic_on_132_sms():
    """Decode-sized grids get KV splits (>= MIN_SPLIT_KEYS = 128 keys each), full grids none."""
    assert fwd.choose_splits(programs=4, max_kv=262144, sms=132) == 33  # qwen3-30b-256k: B·H_kv = 4, one wave
    assert fwd.choose_splits(programs=4, max_kv=1024, sms=132) == 8
    assert fwd.choose_splits(programs=1, max_kv=8192, sms=132) == 64  # gemma-2b-8k-bs1
    assert fwd.choose_splits(programs=32, max_kv=2048, sms=132) == 4  # falcon: 32 requests, 1 KV head
    assert fwd.choose_splits(programs=128, max_kv=4096, sms=132) == 1  # llama-70b-4k: 16 × 8
    assert fwd.choose_splits(programs=512, max_kv=512, sms=132) == 1
    assert fwd.choose_splits(programs=8, max_kv=300, sms=132) == 2
    assert fwd.choose_splits(programs=8, max_kv=255, sms=132) == 1
    # whole key tiles: no split left without keys (prefill-scaled fp8: 28 tiles of 64, 16 programs)
    assert fwd.choose_splits(programs=16, max_kv=1792, sms=132) == 8
    assert fwd.choose_splits(programs=16, max_kv=1792, sms=132, block_n=64) == 7
    assert fwd.choose_splits(programs=4, max_kv=262144, sms=132, block_n=64) == 33  # 4096 tiles: 33 chunks of 125
    assert fwd.choose_splits(programs=8, max_kv=300, sms=132, block_n=128) == 2  # 3 tiles: chunks of 2 and 1


def test_splits_get_keys():
    """Runs everywhere: every split ``choose_splits`` asks for gets keys under ``split_kv_range``'s chunking, and
    the count keeps the longest split of the unrounded count (no program does more work)."""
    for block_n in (16, 32, 64, 128):
        for programs in (1, 2, 4, 8, 16, 33):
            for max_kv in (1, 100, 255, 1000, 1792, 4097, 32768):
                s = fwd.choose_splits(programs, max_kv, 132, block_n)
                tiles = -(-max_kv // block_n)
                chunk = -(-tiles // s)
                assert (s - 1) * chunk < tiles, (block_n, programs, max_kv, s)
                raw = fwd.choose_splits(programs, max_kv, 132)
                assert chunk == -(-tiles // raw), (block_n, programs, max_kv, s, raw)


GPU_SWEEP = [(dt, d) for dt in ("f16", "fp8") for d in (64, 128, 256, 512)] + [("bf16", 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim", GPU_SWEEP, ids=lambda x: str(x))
def test_every_prefill_config_gpu(dtype, head_dim):
    """Every prefill-class config (wgmma tiles, fp8 MMA and upcast variants) on a ragged causal batch with
    q_len > kv_len, an empty request, a window, softcap and sinks: the compiled paths the interpreter never
    sees. One compile per config (the plain variants run in the full-size seed rows)."""
    w = {"f16": UNIFORM, "bf16": ROWS["llama-8b-uniform/bf16"], "fp8": FP8}[dtype]
    q_lens, kv_lens = [300, 1, 0, 77, 500], [700, 1000, 50, 77, 200]
    for cfg in fwd.configs_for(head_dim, 1200, fp8=dtype == "fp8"):
        with fwd.forced(config=cfg):
            case = make_case(w, DEV, seed=12, q_lens=q_lens, kv_lens=kv_lens, heads=(16, 4), head_dim=head_dim,
                             with_sinks=True, window_size_left=128, softcap=30.0)
            try:
                SPEC.check(case)
            except AssertionError as e:
                raise AssertionError(f"config {cfg.name}: {e}") from None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_tma_configs_gpu(dtype, head_dim):
    """The ``-tma`` configs (per-request TMA descriptors, mbarrier pipeline) on the plain masks the sweep
    above does not cover: causal without a window, non-causal, q_len > kv_len, an empty request; every
    config checked, none trusted from another."""
    w = UNIFORM if dtype == "f16" else ROWS["llama-8b-uniform/bf16"]
    tma = [c for c in fwd.configs_for(head_dim, 1200) if c.tma]
    assert tma
    for is_causal in (True, False):
        case = make_case(w, DEV, seed=17, q_lens=[1024, 300, 1, 0, 77, 700], kv_lens=[1024, 700, 1000, 50, 30, 700],
                         heads=(16, 4), head_dim=head_dim, is_causal=is_causal)
        assert fwd.tma_applies(_problem_of(case))
        SPEC.check_each(case, {f"{c.name} causal={is_causal}": functools.partial(_forced_fwd, c) for c in tma})


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_split_kv_merged_in_the_kernel_gpu(dtype):
    """The fused combine on the GPU, where the arrival counter's ordering matters (partials written by other
    SMs): decode and short-prefill shapes with many splits per block, 20 calls in a row, each checked."""
    w = UNIFORM if dtype == "f16" else ROWS["llama-8b-uniform/bf16"]
    for num_splits in (3, 16, 64):
        case = make_case(w, DEV, seed=19, q_lens=[1, 4, 1, 0, 2], kv_lens=[20000, 9000, 300, 50, 16384],
                         heads=(32, 4), head_dim=128, with_sinks=True)
        expected = case.fresh().run(SPEC.reference)
        with fwd.forced(num_splits=num_splits, fused_combine=True):
            for _ in range(20):
                SPEC.compare(case.fresh().run(SPEC.fn), expected, case)
    assert not bool(runtime.arrival_counters(DEV, 1).any()), "arrival counters not reset"


FUZZ_SEEDS = reliability.fuzz_seeds(SPEC, reliability.fuzz_cases(16))


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_case_matches_reference(seed):
    """Seeded random valid calls (``spec.fuzz``): a few in CI, ATTNOPS_FUZZ_CASES=n for more."""
    reliability.run_fuzz_case(SPEC, seed)


def test_repeated_calls_are_bitwise_identical():
    """No atomics: split partials are merged in a fixed order."""
    assert SPEC.deterministic
    for seed in FUZZ_SEEDS[:3]:
        reliability.assert_deterministic(SPEC, SPEC.fuzz(seed, DEV))
    with fwd.forced(num_splits=3):
        reliability.assert_deterministic(SPEC, SPEC.fuzz(FUZZ_SEEDS[3], DEV))


# --- bad input --------------------------------------------------------------------------------------


def _bad(row=UNIFORM, **changes):
    case = make_case(row, DEV, shrink=True, q_lens=[4, 6], kv_lens=[8, 8], head_dim=64, heads=(4, 2),
                     with_sinks=True)
    case.inputs.update(changes)
    return case.inputs


def _t(shape, dtype=torch.float16):
    return torch.randn(shape, device=DEV).to(dtype)


def _i32(values):
    return torch.tensor(values, dtype=torch.int32, device=DEV)


BAD_INPUTS = {
    "q 4 dims": (lambda: _bad(q=_t((1, 10, 4, 64))), ValueError, "q: expected 3 dims"),
    "k heads": (lambda: _bad(k=_t((16, 3, 64)), v=_t((16, 3, 64))), ValueError, "k: H_kv=3 must divide"),
    "v shape": (lambda: _bad(v=_t((16, 2, 32))), ValueError, "v: expected shape"),
    "cu dtype": (lambda: _bad(cu_seqlens_q=torch.tensor([0, 4, 10], device=DEV)), TypeError,
                 "cu_seqlens_q: expected dtype int32"),
    "cu lengths differ": (lambda: _bad(cu_seqlens_kv=_i32([0, 16])), ValueError,
                          r"cu_seqlens_kv: expected shape \(3,\)"),
    "cu start": (lambda: _bad(cu_seqlens_q=_i32([1, 4, 10])), ValueError, "cu_seqlens_q: must start at 0"),
    "cu decreasing": (lambda: _bad(cu_seqlens_kv=_i32([0, 12, 8])), ValueError,
                      "cu_seqlens_kv: must be non-decreasing"),
    "cu total": (lambda: _bad(cu_seqlens_q=_i32([0, 4, 9])), ValueError,
                 "cu_seqlens_q: last entry must equal the packed length 10"),
    "sinks shape": (lambda: _bad(sinks=torch.zeros(2, device=DEV)), ValueError, "sinks: expected shape"),
    "sinks dtype": (lambda: _bad(sinks=torch.zeros(4, device=DEV).half()), TypeError, "sinks: expected dtype float32"),
    "fp8 scale rows": (lambda: _bad(FP8, q_scale=torch.ones(3, 2, device=DEV)), ValueError, "q_scale: expected shape"),
    "fp8 without out_dtype": (lambda: _bad(FP8, out_dtype=None), TypeError, "out_dtype: fp8 inputs need"),
    "max_seqlen_q too small": (lambda: _bad(max_seqlen_q=3, max_seqlen_kv=8), ValueError,
                               "max_seqlen_q: 3 is below the longest query length 6"),
    "rope table short": (lambda: _bad(pos_encoding_mode="rope", rope_cos=_t((7, 32)), rope_sin=_t((7, 32))),
                         ValueError, "rope_cos: 7 rows cannot cover key positions up to 7"),
    "negative softcap": (lambda: _bad(softcap=-2.0), ValueError, "softcap: must be None or >= 0"),
    "window not int": (lambda: _bad(window_size_right=1.5), ValueError, "window_size_right: must be an int"),
    "is_causal not bool": (lambda: _bad(is_causal=1), TypeError, "is_causal: expected a bool"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        gqa_varlen_fwd(**make_inputs())
