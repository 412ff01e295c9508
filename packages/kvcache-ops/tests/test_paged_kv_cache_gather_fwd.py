"""PagedKVCacheGatherFwd against its reference: every seed row (shrunk on CPU), edge cases, bad input."""

import pytest
import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows
from attnops.kvcache_ops import paged_kv_cache_gather_fwd
from attnops.kvcache_ops.paged_kv_cache_gather_fwd.spec import SPEC, make_case

DEV = runtime.device()
ROWS = {w.name: w for w in SPEC.workloads}


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path per seed row; fp8 -> bf16 dequant rounds in bf16, which only the GPU does right."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


def _with_lengths(w, lens, starts=None, seed=0):
    """Re-pack a shrunk row of ``w`` with other lengths (and starts), tables rebuilt to fit."""
    case = make_case(w, DEV, shrink=True, seed=seed)
    gen = testing.generator(seed + 1)
    cache = case.inputs["cache"]
    page_size = cache.shape[1]
    spans = [n + (s if starts else 0) for n, s in zip(lens, starts or [0] * len(lens))]
    width = max(-(-s // page_size) for s in spans) + 2
    case.inputs["block_table"] = testing.block_table(spans, page_size, cache.shape[0], width, gen, DEV, share=True)
    case.inputs["cu_seq_lens"] = testing.cu_seqlens(lens, DEV)
    case.inputs["dst"] = testing.poisoned((sum(lens), *cache.shape[2:]), case.inputs["dst"].dtype, DEV)
    if starts is not None:
        case.inputs["seq_starts"] = torch.tensor(starts, dtype=torch.int32, device=DEV)
    return case


def test_zero_length_requests_and_shared_pages():
    """Empty ranges between others; requests naming the same pages (read-only op)."""
    SPEC.check(_with_lengths(ROWS["mla-small"], [0, 9, 0, 0, 20, 1, 0], seed=2))


def test_unaligned_starts_dequant():
    SPEC.check(_with_lengths(ROWS["mla-chunk-fp8-fp16"], [5, 1, 30], starts=[63, 1, 64 + 17], seed=3))


def test_strided_cache_view():
    """K half of a fused [NP, 2, PS, H, D] cache: page stride is twice the page size."""
    case = make_case(ROWS["llama-cp-unaligned"], DEV, shrink=True, seed=4)
    cache = case.inputs["cache"]
    fused = testing.randn((cache.shape[0], 2, *cache.shape[1:]), torch.float16, DEV, testing.generator(9))
    case.inputs["cache"] = fused[:, 0]
    case.inputs["dst"] = testing.poisoned(case.inputs["dst"].shape, torch.float16, DEV)
    SPEC.check(case)


def test_empty_dst_is_a_no_op():
    SPEC.check(_with_lengths(ROWS["mla-small"], [0, 0], seed=5))


def _bad(row="mla-small", **changes):
    case = make_case(ROWS[row], DEV, shrink=True)
    case.inputs.update(changes)
    return case.inputs


BAD_INPUTS = {
    "dst dtype": (lambda: _bad(dst=torch.zeros(31, 576, device=DEV)), TypeError, "dst: expected dtype float16"),
    "dst row width": (lambda: _bad(dst=torch.zeros(31, 512, device=DEV).half()), ValueError, "dst: expected shape"),
    "table dtype": (lambda: _bad(block_table=torch.zeros(2, 4, dtype=torch.int64, device=DEV)), TypeError,
                    "block_table: expected dtype int32"),
    "cu length": (lambda: _bad(cu_seq_lens=torch.tensor([0, 31], dtype=torch.int32, device=DEV)), ValueError,
                  r"cu_seq_lens: expected shape \(3,\)"),
    "cu total": (lambda: _bad(cu_seq_lens=torch.tensor([0, 17, 30], dtype=torch.int32, device=DEV)), ValueError,
                 "cu_seq_lens: last entry must equal the packed length 31"),
    "cu decreasing": (lambda: _bad(cu_seq_lens=torch.tensor([0, 40, 31], dtype=torch.int32, device=DEV)),
                      ValueError, "cu_seq_lens: must be non-decreasing"),
    "page id out of range": (lambda: _bad(block_table=torch.full((2, 4), 99, dtype=torch.int32, device=DEV)),
                             ValueError, r"block_table\[0\]: entries must lie in \[0, "),
    "table too narrow": (lambda: _bad("llama-cp-unaligned", block_table=torch.zeros(2, 1, dtype=torch.int32,
                                                                                     device=DEV)),
                         ValueError, "block_table: width 1 is too narrow"),
    "negative start": (lambda: _bad(seq_starts=torch.tensor([-1, 0], dtype=torch.int32, device=DEV)),
                       ValueError, "seq_starts: must be >= 0"),
    "fp8 without scale": (lambda: _bad("mla-chunk-fp8-fp16", scale=None), ValueError, "scale: required"),
    "fp8 into fp8": (lambda: _bad("mla-chunk-fp8-fp16", out_dtype=torch.float8_e4m3fn), TypeError,
                     "out_dtype: an fp8 cache gathers into float16 or bfloat16"),
    "cache too few dims": (lambda: _bad(cache=torch.zeros(8, 64, device=DEV).half()), ValueError,
                           "cache: expected"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    """Value checks (index ranges, prefix sums) read device memory: on a GPU they run when asked for."""
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")
    make_inputs, error, message = BAD_INPUTS[name]
    inputs = make_inputs()
    before = inputs["dst"].clone()
    with pytest.raises(error, match=message):
        paged_kv_cache_gather_fwd(**inputs)
    testing.assert_bitwise("dst", inputs["dst"], before)


def test_custom_op_schema_and_fake():
    """attnops::paged_kv_cache_gather_fwd as the public function calls it: it declares ``dst`` as the one argument
    it writes, and its fake impl agrees (f16: the schema check cannot compare fp8 caches on the CPU)."""
    from attnops.kvcache_ops.paged_kv_cache_gather_fwd import op

    case = make_case(ROWS["mla-small"], DEV, shrink=True, seed=22)
    testing.opcheck_as_called(op, "_gather", lambda: case.run(paged_kv_cache_gather_fwd))
