"""Plain-torch reference of DSADecodeWithKVCacheFwd (spec: attn-mla.md), fp32, one (request, query row,
KV head) at a time over the set of valid selected rows."""

import torch


def dsa_decode_with_kvcache_fwd_ref(q, kv, indices, *, q_start_index_s, stride_kv=1, dim_tail=None, sm_scale=None,
                                    is_causal=True) -> torch.Tensor:
    b_, s_, h_, width = q.shape
    s_kv, h_kv = kv.shape[1], kv.shape[2]
    dim_tail = (width - 512 if width > 512 else 0) if dim_tail is None else dim_tail
    d = width - dim_tail
    scale = width**-0.5 if sm_scale is None else sm_scale
    group = h_ // h_kv
    out = torch.zeros((b_, s_, h_, d), dtype=torch.float32, device=q.device)
    for b in range(b_):
        for s in range(s_):
            q_pos = q_start_index_s + s
            for g in range(h_kv):
                sel = indices[b, s, g].long()
                valid = (sel >= 0) & (sel < s_kv)
                if is_causal:
                    valid &= (sel + 1) * stride_kv - 1 <= q_pos
                sel = torch.unique(sel[valid])  # a set: repeated slots count once
                if sel.numel() == 0:
                    continue  # no valid slot: zeros
                heads = slice(g * group, (g + 1) * group)
                keys = kv[b, sel, g].float()  # [n, D + tail]
                p = torch.softmax(q[b, s, heads].float() @ keys.T * scale, dim=-1)
                out[b, s, heads] = p @ keys[:, :d]
    return out.to(q.dtype)
