"""Plain-torch reference of NSAVarlenFwd (spec attn-nsa.md), one sequence (and up to ``TOKENS_PER_GATHER`` of its
tokens) at a time: each (token, KV head) gathers the keys of its used slots (a repeated id is gathered twice, as the
spec says), masks positions outside ``[0, end)`` and takes a softmax with explicit empty-row handling."""

from __future__ import annotations

import torch

# Tokens per gather: the fp32 K and V gathers are [tokens, H_kv, SEL·bs, D] each (134 MB at 512 tokens, H_kv 2,
# SEL·bs 256, D 128); whole 4000-token sequences took 1 GB a gather, and GPU test workers side by side ran out of
# memory (H100, 2026-12-06).
TOKENS_PER_GATHER = 512


def _selected(q, k, v, block_indices, block_counts, offsets, is_causal, scale, block_size, rnd):
    num_tokens, h, d = q.shape
    h_kv, sel = k.shape[1], block_indices.shape[2]
    g = h // h_kv
    bs = block_size
    o = torch.zeros((num_tokens, h, d), dtype=torch.float32, device=q.device)
    offs = offsets.tolist()
    heads = torch.arange(h_kv, device=q.device)[None, :, None]
    for n in range(len(offs) - 1):
        a, b = offs[n], offs[n + 1]
        length = b - a
        if length == 0 or sel == 0:
            continue
        k_seq, v_seq = k[a:b].float(), v[a:b].float()
        for t0 in range(a, b, TOKENS_PER_GATHER):
            t1 = min(t0 + TOKENS_PER_GATHER, b)
            pos = torch.arange(t0 - a, t1 - a, device=q.device)  # positions inside the sequence
            end = pos + 1 if is_causal else torch.full_like(pos, length)
            ids = block_indices[t0:t1].long()  # [T, H_kv, SEL]
            used = torch.arange(sel, device=q.device) < block_counts[t0:t1, :, None].long()  # [T, H_kv, SEL]
            r = ids[..., None] * bs + torch.arange(bs, device=q.device)  # [T, H_kv, SEL, bs] key positions
            ok = used[..., None] & (ids[..., None] >= 0) & (r < end[:, None, None, None])
            ok = ok.reshape(t1 - t0, h_kv, sel * bs)
            r = r.reshape(t1 - t0, h_kv, sel * bs).clamp(0, length - 1)
            kg = k_seq[r, heads]  # [T, H_kv, SEL*bs, D]
            vg = v_seq[r, heads].masked_fill(~ok[..., None], 0.0)  # unselected values add nothing, even inf
            qn = q[t0:t1].float().reshape(t1 - t0, h_kv, g, d)
            s = rnd(torch.einsum("tkgd,tknd->tkgn", qn, kg)) * scale  # [T, H_kv, G, SEL*bs]
            s = s.masked_fill(~ok[:, :, None, :], float("-inf"))
            has_key = ok.any(dim=-1)[:, :, None, None]  # [T, H_kv, 1, 1]
            m = torch.where(has_key, s.amax(dim=-1, keepdim=True), torch.zeros((), device=q.device))
            e = torch.exp(s - m)
            z = e.sum(dim=-1, keepdim=True)
            p = torch.where(has_key, e / torch.where(has_key, z, 1.0), 0.0)
            o[t0:t1] = rnd(torch.einsum("tkgn,tknd->tkgd", rnd(p), vg)).reshape(t1 - t0, h, d)
    return o.to(q.dtype)


def nsa_varlen_fwd_ref(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale,
                       block_size=32):
    """fp32 reference; ``token_indices`` is implied by ``offsets`` (checked by the op, unused here)."""
    return _selected(q, k, v, block_indices, block_counts, offsets, is_causal, scale, block_size, lambda x: x)


def nsa_varlen_fwd_lowp(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale,
                        block_size=32):
    """The same math as a 16-bit torch composition rounds it: each product (fp32 accumulate) and the
    probabilities rounded to q's dtype (the dual-reference baseline)."""
    rnd = lambda x: x.to(q.dtype).float()  # noqa: E731
    return _selected(q, k, v, block_indices, block_counts, offsets, is_causal, scale, block_size, rnd)
