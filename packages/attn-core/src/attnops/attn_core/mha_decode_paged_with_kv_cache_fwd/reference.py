"""Plain-torch reference of MHADecodePagedWithKVCacheFwd (spec: attn-core.md), one request at a time."""

import math

import torch

from attnops.attn_core.gqa_paged_fwd.reference import attend, paged_rows


def mha_decode_paged_with_kv_cache_fwd_ref(q, k, v, real_seqlen_kv, block_table, page_size, is_causal=False,
                                           plan=None, lowp=None):
    """fp32 attention of ``q [B, S_q, H, D]`` over each request's first ``real_seqlen_kv[b]`` keys of the
    flat pool (through ``block_table``); query i at position ``len − S_q + i``; ``len = 0`` -> zeros."""
    del plan
    batch, s_q, _, d = q.shape
    o = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    for b, n in enumerate(real_seqlen_kv.tolist()):
        rows = paged_rows(block_table[b], 0, n, page_size)
        kb, vb, qb = k[rows].float(), v[rows].float(), q[b].float()
        if lowp is not None:
            kb, vb, qb = kb.to(lowp).float(), vb.to(lowp).float(), qb.to(lowp).float()
        pos = torch.arange(n - s_q, n, device=q.device)
        o[b] = attend(qb, kb, vb, pos, causal=is_causal, sm_scale=1.0 / math.sqrt(d), lowp=lowp).to(q.dtype)
    return o
