"""Plain-torch reference of NSATopKVarlenFwd (spec attn-nsa.md): importances in float64, one sequence at a
time, then an explicit stable ranking (descending importance, ties to the smaller chunk id)."""

from __future__ import annotations

import torch


def nsa_topk_importance(q, k_cmp, offsets, chunk_offsets, scale, bs) -> torch.Tensor:
    """``[T_q, H_kv, Cmax]`` float64: ``imp_c`` for ``c <= cur(t)``, ``-inf`` beyond (and past the sequence's
    chunks); ``Cmax`` = the most chunks of any sequence (at least 1)."""
    num_tokens, h, _ = q.shape
    h_kv = k_cmp.shape[1]
    g = h // h_kv
    offs, coffs = offsets.tolist(), chunk_offsets.tolist()
    c_max = max([b - a for a, b in zip(coffs[:-1], coffs[1:])] + [1])
    imp = torch.full((num_tokens, h_kv, c_max), float("-inf"), dtype=torch.float64, device=q.device)
    for n in range(len(offs) - 1):
        a, b = offs[n], offs[n + 1]
        if a == b:
            continue
        qs = (q[a:b].float() * scale).to(q.dtype).double()  # q' = round_T(q * scale), as FLA
        kn = k_cmp[coffs[n] : coffs[n + 1]].double().repeat_interleave(g, dim=1)  # [Cn, H, D]
        cn = kn.shape[0]
        s = torch.einsum("thd,chd->thc", qs, kn)  # [L, H, Cn]
        t = torch.arange(b - a, device=q.device)[:, None]
        c = torch.arange(cn, device=q.device)[None, :]
        closed = (c + 1) * bs - 1 <= t
        cur = t // bs
        lse = torch.logsumexp(s.masked_fill(~closed[:, None, :], float("-inf")), dim=-1)  # [L, H]
        lse = torch.where(closed.any(1, keepdim=True), lse, torch.zeros((), dtype=lse.dtype, device=q.device))
        p = torch.where((c < cur)[:, None, :], torch.exp(s - lse[..., None]), 0.0)
        score = p.reshape(b - a, h_kv, g, cn).sum(dim=2)  # [L, H_kv, Cn]
        forced = (c == 0) | (c == cur - 1) | (c == cur)
        score = torch.where(forced[:, None, :], float(g), score)
        score = torch.where((c <= cur)[:, None, :], score, float("-inf"))
        imp[a:b, :, :cn] = score
    return imp


def nsa_topk_varlen_fwd_ref(q, k_cmp, offsets, chunk_offsets, token_indices, scale, selected_block_num=16, bs=32):
    """``block_indices [T_q, H_kv, S]`` int32: best ids first (stable: ties to the smaller id), then −1."""
    imp = nsa_topk_importance(q, k_cmp, offsets, chunk_offsets, scale, bs)
    s = selected_block_num
    order = torch.sort(imp, dim=-1, descending=True, stable=True)
    width = min(s, imp.shape[-1])
    ids = torch.where(torch.isfinite(order.values[..., :width]), order.indices[..., :width], -1)
    out = torch.full((*imp.shape[:2], s), -1, dtype=torch.int32, device=q.device)
    out[..., :width] = ids.to(torch.int32)
    return out
