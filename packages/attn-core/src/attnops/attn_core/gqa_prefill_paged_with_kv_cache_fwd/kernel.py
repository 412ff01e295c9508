"""GQAPrefillPagedWithKVCacheFwd kernels: the append of the new tokens' K/V into the flat pool (RoPE on
keys, saturating scaled e4m3 stores for fp8 pools). The attention itself is the paged attention kernel of
GQAPagedFwd with a second key source (the new rows, rotated as they are read)."""

import triton
import triton.language as tl

from attnops.attn_core.gqa_paged_fwd.kernel import paged_attention_combine_kernel, paged_attention_kernel
from attnops.kernel_utils.attention_fns import rope_tile
from attnops.kernel_utils.triton_fns import to_e4m3

__all__ = ["paged_append_kernel", "paged_attention_combine_kernel", "paged_attention_kernel"]


@triton.jit
def paged_append_kernel(
    kn_ptr, vn_ptr, kp_ptr, vp_ptr, table_ptr, cache_len_ptr, cu_q_ptr, items_ptr, k_scale_ptr, v_scale_ptr,
    cos_ptr, sin_ptr, num_pages, table_width, rope_rows, num_kv_heads, page_size,
    stride_knt, stride_knh, stride_vnt, stride_vnh, stride_kpt, stride_kph, stride_vpt, stride_vph,
    stride_tb, stride_cos,
    ROPE: tl.constexpr, ROTARY_DIM: tl.constexpr, QUANT: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid: (n_items · H_kv,). items[i] = (b, first token): tokens [t0, t0 + BLOCK_T) of request b, one KV
    head. New token i of request b sits at position p = cache_len[b] + i and lands in flat pool row
    ``table[b, p // page_size] · page_size + p % page_size`` (tokens past the table's width or on pages outside
    the pool are skipped: unchecked bad input never writes outside the tensors)."""
    pid = tl.program_id(0)
    item = pid // num_kv_heads
    h = pid % num_kv_heads
    b = tl.load(items_ptr + item * 2)
    t0 = tl.load(items_ptr + item * 2 + 1)
    q_start = tl.load(cu_q_ptr + b)
    q_len = tl.load(cu_q_ptr + b + 1) - q_start
    c = tl.load(cache_len_ptr + b)
    i = t0 + tl.arange(0, BLOCK_T)
    ok = i < q_len
    pos = c + i
    ok = ok & (pos // page_size < table_width)
    page = tl.load(table_ptr + b.to(tl.int64) * stride_tb + pos // page_size, mask=ok, other=-1)
    ok = ok & (page >= 0) & (page < num_pages)
    row = page.to(tl.int64) * page_size + (pos % page_size).to(tl.int64)
    src = (q_start + i).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    k = tl.load(kn_ptr + src[:, None] * stride_knt + h * stride_knh + offs_d[None, :], mask=ok[:, None])
    if ROPE:
        k = rope_tile(k, kn_ptr + src * stride_knt + h * stride_knh, ok[:, None], cos_ptr, sin_ptr, pos,
                      ok & (pos < rope_rows), stride_cos, ROTARY_DIM, False).to(kn_ptr.dtype.element_ty)
    v = tl.load(vn_ptr + src[:, None] * stride_vnt + h * stride_vnh + offs_d[None, :], mask=ok[:, None])
    if QUANT:
        k = to_e4m3(tl.math.div_rn(k.to(tl.float32), tl.load(k_scale_ptr)))
        v = to_e4m3(tl.math.div_rn(v.to(tl.float32), tl.load(v_scale_ptr)))
    tl.store(kp_ptr + row[:, None] * stride_kpt + h * stride_kph + offs_d[None, :], k, mask=ok[:, None])
    tl.store(vp_ptr + row[:, None] * stride_vpt + h * stride_vph + offs_d[None, :], v, mask=ok[:, None])
