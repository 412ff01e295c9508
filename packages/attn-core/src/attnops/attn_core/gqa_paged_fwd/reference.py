"""Plain-torch references of the paged attention ops (spec: attn-core.md, README §4-§6).

fp32 math, explicit loops over requests, masks built from positions, empty rows written as zeros, sinks
as an extra denominator term. ``attend`` is the attention core shared by the three paged ops' references;
with ``lowp`` it rounds at the points a low-precision torch composition would (scores, probabilities and
output in that dtype), which is the baseline of ``testing.assert_close_dual``.
"""

from __future__ import annotations

import math

import torch

from attnops.kernel_utils.fp8 import E4M3


def _round(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return x if dtype is None else x.to(dtype).float()


def rope_rotate(x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
                layout: str = "neox") -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of ``x [n, heads, D]`` (f32) at positions ``pos [n]``.

    ``cos/sin [P, R/2]``: row = position, column m = pair index. NeoX pairs channel m with m + R/2,
    interleaved pairs 2m with 2m + 1; ``y0 = x0·c − x1·s``, ``y1 = x1·c + x0·s``.
    """
    half = rotary_dim // 2
    c = cos.float()[pos.long()][:, None, :]
    s = sin.float()[pos.long()][:, None, :]
    out = x.clone()
    if layout == "neox":
        x0, x1 = x[..., :half], x[..., half:rotary_dim]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:rotary_dim] = x1 * c + x0 * s
    elif layout == "interleaved":
        x0, x1 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = x0 * c - x1 * s
        out[..., 1:rotary_dim:2] = x1 * c + x0 * s
    else:
        raise ValueError(f"rope_layout: expected 'neox' or 'interleaved', got {layout!r}")
    return out


def attend(q, k, v, q_pos, *, causal=True, window_left=-1, window_right=-1, sm_scale, softcap=None,
           sinks=None, lowp=None, head_chunk=8):
    """README §4 for one request: ``q [n, H, D]`` at positions ``q_pos [n]`` over keys ``k, v [L, H_kv, D]``
    (key j at position j). Returns ``[n, H, D]`` f32; rows with no visible key are exact zeros."""
    n, num_heads, _ = q.shape
    num_kv = k.shape[1]
    group = num_heads // num_kv
    out = torch.zeros(q.shape[0], num_heads, v.shape[-1], dtype=torch.float32, device=q.device)
    if n == 0 or k.shape[0] == 0:
        return out
    j = torch.arange(k.shape[0], device=q.device)
    p = q_pos.to(q.device).long()[:, None]
    visible = torch.ones(n, k.shape[0], dtype=torch.bool, device=q.device)
    if causal:
        visible &= j[None, :] <= p
    if window_left >= 0:
        visible &= j[None, :] >= p - window_left
    if window_right >= 0:
        visible &= j[None, :] <= p + window_right
    any_visible = visible.any(dim=1)
    for h0 in range(0, num_heads, head_chunk):  # bounded memory at full size
        heads = torch.arange(h0, min(num_heads, h0 + head_chunk), device=q.device)
        kh = k[:, heads // group].permute(1, 0, 2)  # [h, L, D]
        vh = v[:, heads // group].permute(1, 0, 2)
        qh = q[:, heads].permute(1, 0, 2)  # [h, n, D]
        s = _round(torch.matmul(qh, kh.transpose(1, 2)) * sm_scale, lowp)
        if softcap:
            s = _round(softcap * torch.tanh(s / softcap), lowp)
        s = s.masked_fill(~visible[None], -math.inf)
        m = s.amax(dim=-1, keepdim=True)
        if sinks is not None:
            m = torch.maximum(m, sinks.float()[heads].to(q.device)[:, None, None])
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        z = e.sum(dim=-1, keepdim=True)
        if sinks is not None:
            z = z + torch.exp(sinks.float()[heads].to(q.device)[:, None, None] - m)
        pr = _round(e / torch.where(z > 0, z, torch.ones_like(z)), lowp)
        o = _round(torch.matmul(pr, vh), lowp)  # [h, n, Dv]
        out[:, heads] = o.permute(1, 0, 2)
    out[~any_visible] = 0.0
    return out


def paged_rows(table_row: torch.Tensor, start: int, stop: int, page_size: int) -> torch.Tensor:
    """Flat pool rows of logical tokens ``[start, stop)`` of one request (README §2)."""
    pos = torch.arange(start, stop, device=table_row.device)
    return table_row[pos // page_size].long() * page_size + pos % page_size


def dequant(x: torch.Tensor, scale) -> torch.Tensor:
    """float(x) · scale for fp8, float(x) otherwise."""
    return x.float() * scale if x.dtype == E4M3 else x.float()


def gqa_paged_fwd_ref(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, *, q_scale=None, k_scale=None,
                      v_scale=None, rope_cos=None, rope_sin=None, sinks=None, is_causal=True, window_size_left=-1,
                      window_size_right=-1, sm_scale=None, softcap=None, pos_encoding_mode="none", rotary_dim=None,
                      rope_layout="neox", out_dtype=None, validate_inputs=False, plan=None, lowp=None):
    """Reference of ``gqa_paged_fwd`` (same signature; ``plan`` is ignored). ``lowp`` rounds as a
    low-precision composition would (the dual-reference baseline)."""
    del validate_inputs, plan
    num_heads, d = q.shape[1], q.shape[2]
    num_kv = k_pages.shape[2]
    group = num_heads // num_kv
    page_size = k_pages.shape[1]
    out_dtype = out_dtype or q.dtype
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    k_flat = k_pages.reshape(-1, num_kv, d)
    v_flat = v_pages.reshape(-1, num_kv, v_pages.shape[-1])
    cu = cu_seqlens_q.tolist()
    lens = cache_seqlens.tolist()
    o = torch.zeros(q.shape[0], num_heads, v_pages.shape[-1], dtype=out_dtype, device=q.device)
    rope = pos_encoding_mode == "rope"
    r = rotary_dim or d

    def per_kv(scale_t, b):  # [1] or [B, H_kv] -> [H_kv, 1] multiplier
        return scale_t.float().reshape(-1)[:1].expand(num_kv)[:, None] if scale_t.numel() == 1 else \
            scale_t.float()[b][:, None]

    for b in range(len(lens)):
        q_len, c = cu[b + 1] - cu[b], lens[b]
        if q_len == 0:
            continue
        qb = q[cu[b]:cu[b + 1]].float()
        if q.dtype == E4M3:
            qb = qb * per_kv(q_scale, b).repeat_interleave(group, 0)
        rows = paged_rows(page_table[b], 0, c, page_size)
        kb, vb = k_flat[rows].float(), v_flat[rows].float()
        if k_pages.dtype == E4M3:
            kb, vb = kb * per_kv(k_scale, b), vb * per_kv(v_scale, b)
        q_pos = torch.arange(c - q_len, c, device=q.device)
        if rope:
            qb = rope_rotate(qb, q_pos, rope_cos, rope_sin, r, rope_layout)
            kb = rope_rotate(kb, torch.arange(c, device=q.device), rope_cos, rope_sin, r, rope_layout)
        if lowp is not None:
            qb, kb, vb = _round(qb, lowp), _round(kb, lowp), _round(vb, lowp)
        ob = attend(qb, kb, vb, q_pos, causal=is_causal, window_left=window_size_left, window_right=window_size_right,
                    sm_scale=scale, softcap=softcap, sinks=sinks, lowp=lowp)
        o[cu[b]:cu[b + 1]] = ob.to(out_dtype)
    return o
