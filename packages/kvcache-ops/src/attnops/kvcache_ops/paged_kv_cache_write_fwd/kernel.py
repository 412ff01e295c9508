"""Scatter new K/V rows into a paged pool: program (i, j) moves column chunk j of BLOCK_T tokens of
k and of v (both loaded before either is stored, so the two loads overlap)."""

import triton
import triton.language as tl

from attnops.kernel_utils.triton_fns import COPY_QUANT_E4M3, load_row_chunk, store_row_chunk


@triton.jit
def paged_kv_cache_write_kernel(
    k_ptr, v_ptr, k_pages_ptr, v_pages_ptr, slot_mapping_ptr, k_scale_ptr, v_scale_ptr,
    num_tokens, num_slots, page_size,
    stride_k_token, stride_v_token,
    stride_kp_page, stride_kp_slot, stride_vp_page, stride_vp_slot,
    ROW: tl.constexpr,  # H_kv * D: one token's contiguous row
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    MODE: tl.constexpr,  # COPY_PLAIN, or COPY_QUANT_E4M3 for an fp8 pool
):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    col0 = tl.program_id(1) * BLOCK_E
    in_range = tokens < num_tokens
    slot = tl.load(slot_mapping_ptr + tokens, mask=in_range, other=-1)
    # Padding tokens (slot < 0) write nothing; so do out-of-range slots, which op.py rejects when it
    # validates values: the kernel never writes outside the pool either way.
    write = in_range & (slot >= 0) & (slot < num_slots)
    page = slot // page_size
    offset = slot % page_size
    src = tokens.to(tl.int64)
    k = load_row_chunk(k_ptr, src * stride_k_token, write, col0, ROW, BLOCK_E)
    v = load_row_chunk(v_ptr, src * stride_v_token, write, col0, ROW, BLOCK_E)
    k_scale = 1.0
    v_scale = 1.0
    if MODE == COPY_QUANT_E4M3:
        k_scale = tl.load(k_scale_ptr)
        v_scale = tl.load(v_scale_ptr)
    store_row_chunk(k_pages_ptr, page * stride_kp_page + offset * stride_kp_slot, write, col0, k, k_scale,
                    ROW, BLOCK_E, MODE)
    store_row_chunk(v_pages_ptr, page * stride_vp_page + offset * stride_vp_slot, write, col0, v, v_scale,
                    ROW, BLOCK_E, MODE)
