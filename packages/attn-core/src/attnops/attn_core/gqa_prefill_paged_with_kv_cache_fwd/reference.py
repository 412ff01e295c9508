"""Plain-torch reference of GQAPrefillPagedWithKVCacheFwd (spec: attn-core.md), one request at a time."""

from __future__ import annotations

import math

import torch

from attnops.attn_core.gqa_paged_fwd.reference import attend, paged_rows, rope_rotate
from attnops.kernel_utils.fp8 import E4M3, quantize_e4m3


def rope_table(max_position: int, rotary_dim: int, base: float, dtype, device):
    """``cos/sin [max_position, R/2]``: ``angle(pos, m) = pos · base^(−2m/R)`` in float64, rounded to dtype."""
    inv = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)
    ang = torch.arange(max_position, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def gqa_prefill_paged_with_kv_cache_fwd_ref(q, k_new, v_new, k_pages, v_pages, k_scale=None, v_scale=None,
                                            cu_seqlens_q=None, cache_seqlens=None, block_table=None, *, page_size,
                                            max_seqlen_q, is_causal=True, cache_dtype=None, sm_scale=None,
                                            softcap=None, fuse_rope=False, rope_base=10000.0, max_position=None,
                                            rotary_dim=None, out=None, plan=None, lowp=None):
    """Attention of each request's new tokens over its cached rows + its new rows, then the append of the
    (rotated) new K/V into the pool (in place). Returns ``o`` (also written to ``out`` when given)."""
    del max_seqlen_q, cache_dtype, plan
    t_q, num_heads, d = q.shape
    dtype = q.dtype
    fp8 = k_pages.dtype == E4M3
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    r = rotary_dim or d
    cos = sin = None
    if fuse_rope:
        cos, sin = rope_table(max_position, r, rope_base, dtype, q.device)
    cu = cu_seqlens_q.tolist()
    o = torch.zeros(q.shape, dtype=dtype, device=q.device)
    writes = []
    for b, c in enumerate(cache_seqlens.tolist()):
        n = cu[b + 1] - cu[b]
        if n == 0:
            continue
        rows = paged_rows(block_table[b], 0, c, page_size)
        kc, vc = k_pages[rows].float(), v_pages[rows].float()
        if fp8:  # dequantize, rounded to the compute dtype (as TileOPs)
            kc, vc = (kc * k_scale.float()).to(dtype).float(), (vc * v_scale.float()).to(dtype).float()
        qb, kb, vb = q[cu[b]:cu[b + 1]].float(), k_new[cu[b]:cu[b + 1]].float(), v_new[cu[b]:cu[b + 1]].float()
        pos = torch.arange(c, c + n, device=q.device)
        if fuse_rope:
            qb = rope_rotate(qb, pos, cos, sin, r, "neox")
            kb = rope_rotate(kb, pos, cos, sin, r, "neox").to(dtype).float()  # the exact stored T values
        keys, values = torch.cat([kc, kb]), torch.cat([vc, vb])
        if lowp is not None:
            qb, keys, values = qb.to(lowp).float(), keys.to(lowp).float(), values.to(lowp).float()
        o[cu[b]:cu[b + 1]] = attend(qb, keys, values, pos, causal=is_causal, sm_scale=scale, softcap=softcap,
                                    lowp=lowp).to(dtype)
        writes.append((paged_rows(block_table[b], c, c + n, page_size), kb.to(dtype), vb.to(dtype)))
    for rows, kb, vb in writes:  # the attention above saw the pre-call pool
        if fp8:  # index_put has no fp8 kernel: move the bytes
            k_pages.view(torch.uint8)[rows] = quantize_e4m3(kb, k_scale).view(torch.uint8)
            v_pages.view(torch.uint8)[rows] = quantize_e4m3(vb, v_scale).view(torch.uint8)
        else:
            k_pages[rows], v_pages[rows] = kb, vb
    if out is not None:
        out.copy_(o)
        return out
    return o
