"""Plain-torch reference of FP8LightningIndexerFwd (spec: attn-mla.md): f32 math from the dequantized
inputs, one (request, query row, key group) at a time, −inf outside each row's window."""

import torch


def fp8_lightning_indexer_fwd_ref(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale=None,
                                  clean_logits=True) -> torch.Tensor:
    b_, s_, h_, _ = index_q.shape
    s_kv, g_ = index_k.shape[1], index_k.shape[2]
    heads = h_ // g_
    out = torch.full((b_, s_, s_kv, g_), float("-inf"), dtype=torch.float32, device=index_q.device)
    ks_all = cu_seqlen_ks.clamp(min=0).tolist()
    ke_all = cu_seqlen_ke.clamp(max=s_kv).tolist()
    q32, k32, w32 = index_q.float(), index_k.float(), weights.float()
    for b in range(b_):
        for s in range(s_):
            lo, hi = ks_all[s], ke_all[s]
            if hi <= lo:
                continue  # empty window: the whole row stays −inf
            for g in range(g_):
                q = q32[b, s, g * heads : (g + 1) * heads]  # [heads, D]
                k = k32[b, lo:hi, g]  # [n, D]
                dots = q @ k.T  # [heads, n]
                if index_k_scale is not None:
                    dots = dots * index_k_scale[b, lo:hi, g].float()[None, :]
                w = w32[s, g * heads : (g + 1) * heads]
                out[b, s, lo:hi, g] = (w[:, None] * torch.relu(dots)).sum(0)
    return out
