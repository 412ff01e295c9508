"""Plain-torch reference of GQADenseFwd (spec attn-core.md): fp32 math, one batch element at a time."""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd.reference import attend_request


def gqa_dense_fwd_ref(
    q, k, v, q_scale=None, k_scale=None, v_scale=None, rope_cos=None, rope_sin=None, *, is_causal=True,
    window_size_left=-1, window_size_right=-1, sm_scale=None, softcap=None, pos_encoding_mode="none",
    rotary_dim=None, rope_layout="neox", out_dtype=None, compute_dtype=torch.float32,
) -> torch.Tensor:
    """Returns ``o [B, S_q, H, D]`` in fp32 (with a 16-bit ``compute_dtype``: the low-precision
    baseline, in the output dtype); rows with no visible key are zeros."""
    out_dt = out_dtype or q.dtype
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    rope = pos_encoding_mode == "rope"
    for b in range(q.shape[0]):
        o[b] = attend_request(
            q[b], k[b], v[b],
            q_scale=q_scale[b] if q_scale is not None else None,
            k_scale=k_scale[b] if k_scale is not None else None,
            v_scale=v_scale[b] if v_scale is not None else None,
            rope_cos=rope_cos if rope else None, rope_sin=rope_sin if rope else None,
            rotary_dim=(rotary_dim or q.shape[-1]) if rope else 0, interleaved=rope_layout == "interleaved",
            is_causal=is_causal, window_size_left=window_size_left, window_size_right=window_size_right,
            sm_scale=sm_scale, softcap=softcap, compute_dtype=compute_dtype,
        )
    # fp32 ground truth; the low-precision baseline is rounded once more to the output dtype
    return o if compute_dtype == torch.float32 else o.to(out_dt)
