"""Plain-torch reference of GQABwd (spec attn-core.md): torch autograd of the attention of README §4, one
batch element at a time, explicit masks. Like the spec's reference it ignores ``o`` and ``lse`` (the
kernel uses them, so a case must pass a consistent forward: :func:`attention_ref` builds one).

``compute_dtype=float32`` (or float64) is the reference; a 16-bit ``compute_dtype`` is the low-precision
baseline of ``testing.assert_close_dual``: inputs rounded to it, the four products (Q·Kᵀ, P·V and, in the
backward, dO·Vᵀ / Pᵀ·dO / dS·K / dSᵀ·Q) in it, softmax and its backward in fp32 between them.
"""

from __future__ import annotations

import math

import torch

LOG2E = math.log2(math.e)


def visible_mask(S_q: int, S_kv: int, is_causal: bool, device) -> torch.Tensor:
    """``[S_q, S_kv]`` bool: key j visible from query i (bottom-right: i sits at ``i + S_kv − S_q``)."""
    i = torch.arange(S_q, device=device)[:, None] + (S_kv - S_q)
    j = torch.arange(S_kv, device=device)[None, :]
    vis = torch.ones(S_q, S_kv, dtype=torch.bool, device=device)
    if is_causal:
        vis &= j <= i
    return vis


def attend(q, k, v, *, is_causal=True, sm_scale=None, compute_dtype=torch.float32):
    """Differentiable attention of one batch element: ``q [S_q, H, D]``, ``k / v [S_kv, H_kv, D]`` (already
    in ``compute_dtype``). Returns ``(o [S_q, H, D], lse [H, S_q])``, lse natural-log; rows with no visible
    key give o = 0 and lse = −inf (and zero gradients)."""
    S_q, H, D = q.shape
    S_kv, H_kv = k.shape[0], k.shape[1]
    G = H // H_kv
    scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    acc = torch.float64 if compute_dtype == torch.float64 else torch.float32
    ke = k.repeat_interleave(G, dim=1)  # query head h reads KV head h // G (autograd sums the copies)
    ve = v.repeat_interleave(G, dim=1)
    s = torch.matmul(q.transpose(0, 1), ke.permute(1, 2, 0)).to(acc) * scale  # [H, S_q, S_kv]
    vis = visible_mask(S_q, S_kv, is_causal, q.device)
    s = s.masked_fill(~vis[None], -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # -inf on empty rows
    finite = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - finite[..., None])  # exp(-inf) = 0 on masked entries and on empty rows
    o = torch.matmul(p.to(compute_dtype), ve.transpose(0, 1))  # [H, S_q, D]
    return o.transpose(0, 1), lse


def attention_ref(q, k, v, *, is_causal=True, sm_scale=None, compute_dtype=torch.float32):
    """Forward of the whole batch in ``compute_dtype`` math: ``(o [B, S_q, H, D], lse2 [B, H, S_q])`` with
    the lse in base 2 (what GQABwd consumes). Differentiable (fp64 gradcheck runs through it)."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        o, lse = attend(q[b].to(compute_dtype), k[b].to(compute_dtype), v[b].to(compute_dtype), is_causal=is_causal,
                        sm_scale=sm_scale, compute_dtype=compute_dtype)
        outs.append(o)
        lses.append(lse * LOG2E)
    B, S_q, H, D = q.shape
    if not outs:
        return q.new_zeros(q.shape, dtype=compute_dtype), q.new_zeros((B, H, S_q), dtype=torch.float32)
    return torch.stack(outs), torch.stack(lses)


def gqa_bwd_ref(q, k, v, o, do, lse, *, is_causal=True, sm_scale=None, compute_dtype=torch.float32):
    """``(dq, dk, dv)`` by autograd of :func:`attend`: fp32 (or fp64) for the reference; with a 16-bit
    ``compute_dtype`` the low-precision baseline, rounded to q's dtype. ``o`` and ``lse`` are not read."""
    del o, lse  # the reference recomputes the forward
    wide = compute_dtype in (torch.float32, torch.float64)
    out_dt = compute_dtype if wide else q.dtype
    dq = torch.zeros(q.shape, dtype=out_dt, device=q.device)
    dk = torch.zeros(k.shape, dtype=out_dt, device=q.device)
    dv = torch.zeros(v.shape, dtype=out_dt, device=q.device)
    for b in range(q.shape[0]):
        if q.shape[1] == 0 or k.shape[1] == 0:
            continue
        with torch.enable_grad():
            qb, kb, vb = (x[b].detach().to(compute_dtype).requires_grad_() for x in (q, k, v))
            ob, _ = attend(qb, kb, vb, is_causal=is_causal, sm_scale=sm_scale, compute_dtype=compute_dtype)
            gq, gk, gv = torch.autograd.grad(ob, (qb, kb, vb), do[b].to(compute_dtype))
        dq[b], dk[b], dv[b] = gq.to(out_dt), gk.to(out_dt), gv.to(out_dt)
    return dq, dk, dv


def gqa_bwd_closed_form(q, k, v, o, do, lse, *, is_causal=True, sm_scale=None, compute_dtype=torch.float32):
    """The spec's closed form from the given forward, as the kernel computes it (fp32 or fp64 throughout):
    ``P = 2^(s·log2 e − lse2)``, ``Δ = rowsum(o·dO)``, ``dS = P(dP − Δ)``, dK / dV summed over the G heads. Unlike
    :func:`gqa_bwd_ref` it reads ``o`` and ``lse``: with a 16-bit ``o`` it gives the exact gradients of the inputs the
    kernel was handed (``compare`` falls back to it when the rounding of ``o`` dominates)."""
    B, S_q, H, D = q.shape
    S_kv, H_kv = k.shape[1], k.shape[2]
    G = H // H_kv
    scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    q, k, v, o, do, lse = (x.to(compute_dtype) for x in (q, k, v, o, do, lse))
    vis = visible_mask(S_q, S_kv, is_causal, q.device)
    ke, ve = k.repeat_interleave(G, 2), v.repeat_interleave(G, 2)
    s = torch.einsum("bihd,bjhd->bhij", q, ke) * scale
    p = torch.where(vis, torch.exp2(s * LOG2E - lse[..., None]), 0.0)
    delta = (o * do).sum(-1).transpose(1, 2)  # [B, H, S_q]
    ds = p * (torch.einsum("bihd,bjhd->bhij", do, ve) - delta[..., None])
    dq = scale * torch.einsum("bhij,bjhd->bihd", ds, ke)
    dk = scale * torch.einsum("bhij,bihd->bjhd", ds, q).unflatten(2, (H_kv, G)).sum(3)
    dv = torch.einsum("bhij,bihd->bjhd", p, do).unflatten(2, (H_kv, G)).sum(3)
    return dq, dk, dv
