"""Pack ragged logical token ranges out of a paged cache: program (i, j) copies column chunk j of
BLOCK_T dst rows."""

import triton
import triton.language as tl

from attnops.kernel_utils.triton_fns import COPY_DEQUANT, load_row_chunk, paged_row, segment_of, store_row_chunk


@triton.jit
def paged_kv_cache_gather_kernel(
    dst_ptr, cache_ptr, block_table_ptr, cu_seq_lens_ptr, seq_starts_ptr, scale_ptr,
    num_rows, num_requests, num_pages, page_size, table_width,
    stride_dst_row, stride_cache_page, stride_cache_slot, stride_table_row,
    ROW: tl.constexpr,  # prod(*E): one token's contiguous row
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    SEGMENT_BLOCK: tl.constexpr,
    HAS_STARTS: tl.constexpr,
    MODE: tl.constexpr,  # COPY_PLAIN, or COPY_DEQUANT for an fp8 cache
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    col0 = tl.program_id(1) * BLOCK_E
    in_range = rows < num_rows
    request = segment_of(cu_seq_lens_ptr, rows, num_requests, SEGMENT_BLOCK)
    pos = rows - tl.load(cu_seq_lens_ptr + request)
    if HAS_STARTS:
        pos += tl.load(seq_starts_ptr + request, mask=in_range, other=0)
    table_row = block_table_ptr + request.to(tl.int64) * stride_table_row
    # Bad metadata that op.py did not validate (a range past the table, a page id outside the pool) is
    # never dereferenced: such rows are left unwritten.
    in_table = in_range & (pos >= 0) & (pos // page_size < table_width)
    src, page = paged_row(table_row, pos, page_size, stride_cache_page, stride_cache_slot, in_table)
    read = in_table & (page >= 0) & (page < num_pages)
    x = load_row_chunk(cache_ptr, src, read, col0, ROW, BLOCK_E)
    scale = 1.0
    if MODE == COPY_DEQUANT:
        scale = tl.load(scale_ptr)
    store_row_chunk(dst_ptr, rows.to(tl.int64) * stride_dst_row, read, col0, x, scale, ROW, BLOCK_E, MODE)
