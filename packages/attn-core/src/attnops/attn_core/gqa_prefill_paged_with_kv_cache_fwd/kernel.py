"""GQAPrefillPagedWithKVCacheFwd kernels: the append of the new tokens' K/V into the flat pool (RoPE on
keys, saturating scaled e4m3 stores for fp8 pools) and, for fp8 pools, the 16-bit staging copy the
warp-specialized attention reads. The attention itself is the paged attention kernel of GQAPagedFwd with a
second key source (the new rows, rotated as they are read), or the warp-specialized paged kernel."""

import triton
import triton.language as tl

from attnops.attn_core.gqa_paged_fwd.kernel import paged_attention_combine_kernel, paged_attention_kernel
from attnops.kernel_utils.attention_fns import rope_tile
from attnops.kernel_utils.triton_fns import to_e4m3

__all__ = ["paged_append_kernel", "paged_attention_combine_kernel", "paged_attention_kernel", "paged_stage_kernel"]


@triton.jit
def paged_append_kernel(
    kn_ptr, vn_ptr, kp_ptr, vp_ptr, ks_ptr, vs_ptr, table_ptr, cache_len_ptr, cu_q_ptr, items_ptr, k_scale_ptr,
    v_scale_ptr, cos_ptr, sin_ptr, num_pages, table_width, stage_width, rope_rows, num_kv_heads, page_size,
    stride_knt, stride_knh, stride_vnt, stride_vnh, stride_kpt, stride_kph, stride_vpt, stride_vph,
    stride_st, stride_sh, stride_tb, stride_cos,
    ROPE: tl.constexpr, ROTARY_DIM: tl.constexpr, QUANT: tl.constexpr, STAGE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid: (n_items · H_kv,). items[i] = (b, first token): tokens [t0, t0 + BLOCK_T) of request b, one KV
    head. New token i of request b sits at position p = cache_len[b] + i and lands in flat pool row
    ``table[b, p // page_size] · page_size + p % page_size`` (tokens past the table's width or on pages outside
    the pool are skipped: unchecked bad input never writes outside the tensors). With STAGE, the exact 16-bit
    (rotated) rows also land in the staging pools at row ``b · stage_width · page_size + p`` (see
    ``paged_stage_kernel``; tokens past its width are skipped)."""
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
    if STAGE:
        srow = b.to(tl.int64) * stage_width * page_size + pos.to(tl.int64)
        staged = ok & (pos // page_size < stage_width)
        tl.store(ks_ptr + srow[:, None] * stride_st + h * stride_sh + offs_d[None, :], k, mask=staged[:, None])
        tl.store(vs_ptr + srow[:, None] * stride_st + h * stride_sh + offs_d[None, :], v, mask=staged[:, None])
    if QUANT:
        k = to_e4m3(tl.math.div_rn(k.to(tl.float32), tl.load(k_scale_ptr)))
        v = to_e4m3(tl.math.div_rn(v.to(tl.float32), tl.load(v_scale_ptr)))
    tl.store(kp_ptr + row[:, None] * stride_kpt + h * stride_kph + offs_d[None, :], k, mask=ok[:, None])
    tl.store(vp_ptr + row[:, None] * stride_vpt + h * stride_vph + offs_d[None, :], v, mask=ok[:, None])


@triton.jit
def paged_stage_kernel(
    kp_ptr, vp_ptr, ks_ptr, vs_ptr, table_ptr, cache_len_ptr, cu_q_ptr, k_scale_ptr, v_scale_ptr,
    num_pages, stage_width, page_size, stride_kpt, stride_kph, stride_vpt, stride_vph, stride_st, stride_sh,
    stride_tb,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid: (B · stage_width, H_kv). The 16-bit staging pools of an fp8 call: request b's token p at staging row
    ``b · stage_width · page_size + p`` (an identity block table; its pages are the first stage_width of the
    request's table). Cached tokens (p < cache_len[b]) get the pool
    row dequantized and rounded to the staging dtype (the reference's rounding); the new tokens are the append
    kernel's; rows past a request's end stay unwritten (both attention kernels mask them, the warp-specialized
    one zeroes them in its last V tile). Requests without query tokens are skipped; table entries outside the
    pool stage zeros."""
    pid = tl.program_id(0)
    b = pid // stage_width
    j = pid % stage_width
    h = tl.program_id(1)
    n = tl.load(cu_q_ptr + b + 1) - tl.load(cu_q_ptr + b)
    c = tl.where(n > 0, tl.load(cache_len_ptr + b), 0)
    first = j * page_size
    page = tl.load(table_ptr + b.to(tl.int64) * stride_tb + j, mask=first < c, other=-1)
    page_ok = (page >= 0) & (page < num_pages)
    dk = tl.load(k_scale_ptr)
    dv = tl.load(v_scale_ptr)
    offs_d = tl.arange(0, BLOCK_D)
    for r0 in range(0, tl.minimum(page_size, c - first), BLOCK_T):
        r = r0 + tl.arange(0, BLOCK_T)
        cached = (r < page_size) & (first + r < c)
        read = cached & page_ok
        src = page.to(tl.int64) * page_size + r.to(tl.int64)
        k = tl.load(kp_ptr + src[:, None] * stride_kpt + h * stride_kph + offs_d[None, :], mask=read[:, None],
                    other=0.0)
        v = tl.load(vp_ptr + src[:, None] * stride_vpt + h * stride_vph + offs_d[None, :], mask=read[:, None],
                    other=0.0)
        dst = b.to(tl.int64) * stage_width * page_size + (first + r).to(tl.int64)
        tl.store(ks_ptr + dst[:, None] * stride_st + h * stride_sh + offs_d[None, :],
                 (k.to(tl.float32) * dk).to(ks_ptr.dtype.element_ty), mask=cached[:, None])
        tl.store(vs_ptr + dst[:, None] * stride_st + h * stride_sh + offs_d[None, :],
                 (v.to(tl.float32) * dv).to(vs_ptr.dtype.element_ty), mask=cached[:, None])
