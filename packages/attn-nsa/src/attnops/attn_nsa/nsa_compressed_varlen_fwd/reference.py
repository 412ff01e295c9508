"""Plain-torch reference of NSACompressedVarlenFwd (spec attn-nsa.md), one sequence at a time.

``rnd`` = identity is the fp32 reference; rounding the scores, the probabilities and the output to the
activation dtype (what a 16-bit torch composition with fp32 accumulation does) gives the low-precision
baseline that the dual-reference acceptance rule measures our error against.
"""

from __future__ import annotations

import torch


def _compressed(q, k_cmp, v_cmp, offsets, chunk_offsets, scale, bs, rnd):
    num_tokens, h, _ = q.shape
    h_kv, dv = v_cmp.shape[1], v_cmp.shape[2]
    g = h // h_kv
    o = torch.zeros((num_tokens, h, dv), dtype=torch.float32, device=q.device)
    lse = torch.zeros((num_tokens, h), dtype=torch.float32, device=q.device)
    offs, coffs = offsets.tolist(), chunk_offsets.tolist()
    for n in range(len(offs) - 1):
        a, b = offs[n], offs[n + 1]
        if a == b:
            continue  # zero-length sequence: no rows
        qn = q[a:b].float()  # [L, H, DK]
        kn = k_cmp[coffs[n] : coffs[n + 1]].float().repeat_interleave(g, dim=1)  # [Cn, H, DK]
        vn = v_cmp[coffs[n] : coffs[n + 1]].float().repeat_interleave(g, dim=1)
        s = rnd(torch.einsum("thd,chd->thc", qn, kn)) * scale  # [L, H, Cn]
        t = torch.arange(b - a, device=q.device)
        c = torch.arange(kn.shape[0], device=q.device)
        closed = (c[None, :] + 1) * bs - 1 <= t[:, None]  # chunk c closed at position t
        s = s.masked_fill(~closed[:, None, :], float("-inf"))
        has_key = closed.any(dim=1)[:, None]  # [L, 1]: nc(t) > 0
        m = torch.where(has_key, s.amax(dim=-1), torch.zeros((), device=q.device))  # [L, H]
        e = torch.exp(s - m[..., None])  # masked -> exactly 0
        z = e.sum(dim=-1)
        p = torch.where(has_key[..., None], e / torch.where(has_key, z, 1.0)[..., None], 0.0)
        o[a:b] = rnd(torch.einsum("thc,chd->thd", rnd(p), vn))
        lse[a:b] = torch.where(has_key, m + torch.log(torch.where(has_key, z, 1.0)), 0.0)
    return o.to(q.dtype), lse.to(q.dtype)


def nsa_compressed_varlen_fwd_ref(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs=32):
    """fp32 reference; ``token_indices`` is implied by ``offsets`` (checked by the op, unused here)."""
    return _compressed(q, k_cmp, v_cmp, offsets, chunk_offsets, scale, bs, lambda x: x)


def nsa_compressed_varlen_fwd_lowp(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs=32):
    """The same math as a 16-bit torch composition rounds it: each product (fp32 accumulate) and the
    probabilities rounded to q's dtype (the dual-reference baseline)."""
    return _compressed(q, k_cmp, v_cmp, offsets, chunk_offsets, scale, bs, lambda x: x.to(q.dtype).float())
