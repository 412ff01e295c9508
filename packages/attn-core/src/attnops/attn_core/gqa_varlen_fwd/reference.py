"""Plain-torch reference of GQAVarlenFwd (spec attn-core.md): fp32 math, one request at a time."""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd.reference import attend_request


def gqa_varlen_fwd_ref(
    q, k, v, cu_seqlens_q, cu_seqlens_kv, q_scale=None, k_scale=None, v_scale=None, rope_cos=None, rope_sin=None,
    sinks=None, *, is_causal=True, window_size_left=-1, window_size_right=-1, sm_scale=None, softcap=None,
    pos_encoding_mode="none", rotary_dim=None, rope_layout="neox", out_dtype=None, validate_inputs=False,
    max_seqlen_q=None, max_seqlen_kv=None, compute_dtype=torch.float32,
) -> torch.Tensor:
    """Returns ``o [T_q, H, D]`` in fp32 (with a 16-bit ``compute_dtype``: the low-precision baseline,
    in the output dtype). Requests with ``q_len = 0`` contribute nothing; rows with no visible key are zeros."""
    out_dt = out_dtype or q.dtype
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    cu_q, cu_kv = cu_seqlens_q.tolist(), cu_seqlens_kv.tolist()
    rope = pos_encoding_mode == "rope"
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_kv[b], cu_kv[b + 1]
        if q1 == q0:
            continue
        o[q0:q1] = attend_request(
            q[q0:q1], k[k0:k1], v[k0:k1],
            q_scale=q_scale[b] if q_scale is not None else None,
            k_scale=k_scale[b] if k_scale is not None else None,
            v_scale=v_scale[b] if v_scale is not None else None,
            rope_cos=rope_cos if rope else None, rope_sin=rope_sin if rope else None,
            rotary_dim=(rotary_dim or q.shape[-1]) if rope else 0, interleaved=rope_layout == "interleaved",
            sinks=sinks, is_causal=is_causal, window_size_left=window_size_left,
            window_size_right=window_size_right, sm_scale=sm_scale, softcap=softcap, compute_dtype=compute_dtype,
        )
    # fp32 ground truth; the low-precision baseline is rounded once more to the output dtype
    return o if compute_dtype == torch.float32 else o.to(out_dt)
