"""Plain-torch attention of one request, straight from spec README §4–§6 (shared by the GQADenseFwd and
GQAVarlenFwd references). ``compute_dtype=float32`` is the reference; a 16-bit ``compute_dtype`` gives
the low-precision baseline of ``testing.assert_close_dual`` (inputs, Q·Kᵀ, P and P·V rounded to it)."""

from __future__ import annotations

import math

import torch

from attnops.kernel_utils.fp8 import E4M3


def rope_ref(x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
             interleaved: bool) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of ``x [n, heads, D]`` (fp32) at positions ``pos [n]``.
    Rows at negative positions (causal rows of a q_len > kv_len request) are left as they are."""
    y = x.clone()
    ok = pos >= 0
    c = cos.float()[pos.clamp(min=0)][:, None, :]
    s = sin.float()[pos.clamp(min=0)][:, None, :]
    if interleaved:
        i0, i1 = slice(0, rotary_dim, 2), slice(1, rotary_dim, 2)
    else:
        i0, i1 = slice(0, rotary_dim // 2), slice(rotary_dim // 2, rotary_dim)
    x0, x1 = x[..., i0], x[..., i1]
    y[..., i0] = torch.where(ok[:, None, None], x0 * c - x1 * s, x0)
    y[..., i1] = torch.where(ok[:, None, None], x1 * c + x0 * s, x1)
    return y


def attend_request(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    q_scale: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    rope_cos: torch.Tensor | None = None,
    rope_sin: torch.Tensor | None = None,
    rotary_dim: int = 0,
    interleaved: bool = False,
    sinks: torch.Tensor | None = None,
    is_causal: bool = True,
    window_size_left: int = -1,
    window_size_right: int = -1,
    sm_scale: float | None = None,
    softcap: float | None = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """One request: ``q [q_len, H, D]``, ``k / v [kv_len, H_kv, D]``; fp8 scales ``[H_kv]`` (this
    request's row); returns ``[q_len, H, D]`` fp32."""
    q_len, H, D = q.shape
    kv_len, H_kv = k.shape[0], k.shape[1]
    G = H // H_kv
    dev = q.device
    scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    qf, kf, vf = q.float(), k.float(), v.float()
    if q.dtype == E4M3:  # dequantize = multiply (query head h uses KV head h // G)
        qf = qf * q_scale.float().repeat_interleave(G)[None, :, None]
        kf = kf * k_scale.float()[None, :, None]
        vf = vf * v_scale.float()[None, :, None]
    if rope_cos is not None:
        q_pos = torch.arange(q_len, device=dev) + (kv_len - q_len)
        qf = rope_ref(qf, q_pos, rope_cos, rope_sin, rotary_dim, interleaved)
        kf = rope_ref(kf, torch.arange(kv_len, device=dev), rope_cos, rope_sin, rotary_dim, interleaved)
    qc, kc, vc = qf.to(compute_dtype), kf.to(compute_dtype), vf.to(compute_dtype)

    i = torch.arange(q_len, device=dev)[:, None] + (kv_len - q_len)  # bottom-right positions P_i
    j = torch.arange(kv_len, device=dev)[None, :]
    vis = torch.ones(q_len, kv_len, dtype=torch.bool, device=dev)
    if is_causal:
        vis &= j <= i
    if window_size_left >= 0:
        vis &= j >= i - window_size_left
    if window_size_right >= 0:
        vis &= j <= i + window_size_right

    out = torch.zeros(q_len, H, D, dtype=torch.float32, device=dev)
    if kv_len == 0:
        return out  # no keys: every row is empty
    for g in range(H_kv):
        heads = slice(g * G, (g + 1) * G)
        qh = qc[:, heads].transpose(0, 1)  # [G, q_len, D]
        s = torch.matmul(qh, kc[:, g].T[None]).float() * scale  # [G, q_len, kv_len]
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~vis[None], -math.inf)
        m = s.amax(-1, keepdim=True)  # -inf on empty rows
        if sinks is not None:
            sink = sinks[heads].float()[:, None, None]
            m = torch.maximum(m, sink)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        if sinks is not None:
            z = z + torch.exp(sink - m)
        empty = ~vis.any(-1)  # [q_len]
        # z = 0 only where every e is 0 (p = 0 then); a NaN z (a NaN score) must stay NaN, not become p = 0
        p = e / torch.where(z > 0, z, torch.ones_like(z))
        o = torch.matmul(p.to(compute_dtype), vc[:, g][None]).float()  # [G, q_len, D]
        o[:, empty] = 0.0
        out[:, heads] = o.transpose(0, 1)
    return out
