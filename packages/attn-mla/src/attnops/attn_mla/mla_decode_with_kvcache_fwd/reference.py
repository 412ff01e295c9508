"""Plain-torch reference of MLADecodeWithKVCacheFwd (spec: attn-mla.md), fp32, one request and KV head
at a time; values are the latent keys."""

import math

import torch


def mla_decode_with_kvcache_fwd_ref(q, q_pe, k, k_pe) -> torch.Tensor:
    b_, h_, d = q.shape
    n_kv, h_kv, pe = k.shape[1], k.shape[2], q_pe.shape[2]
    group = h_ // h_kv
    scale = 1.0 / math.sqrt(d + pe)
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    if n_kv == 0:
        return out.to(q.dtype)  # no visible key: zeros
    for b in range(b_):
        for g in range(h_kv):
            heads = slice(g * group, (g + 1) * group)
            query = torch.cat([q[b, heads], q_pe[b, heads]], dim=-1).float()  # [G, D + PE]
            keys = torch.cat([k[b, :, g], k_pe[b, :, g]], dim=-1).float()  # [N_kv, D + PE]
            p = torch.softmax(query @ keys.T * scale, dim=-1)
            out[b, heads] = p @ k[b, :, g].float()
    return out.to(q.dtype)
