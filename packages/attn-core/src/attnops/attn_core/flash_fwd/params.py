"""Argument checks shared by GQADenseFwd and GQAVarlenFwd (everything except the layout of q/k/v and the
lengths): dtypes / out_dtype, FP8 scales, RoPE tables, sinks, softcap, windows, sm_scale."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnops.kernel_utils import checks
from attnops.kernel_utils.fp8 import E4M3

SIXTEEN_BIT = (torch.float16, torch.bfloat16)
INPUT_DTYPES = (torch.float16, torch.bfloat16, E4M3)
MAX_HEAD_DIM = 512


@dataclass
class Params:
    out_dtype: torch.dtype
    sm_scale: float
    softcap: float
    rotary_dim: int  # 0 = no RoPE
    interleaved: bool
    window_left: int
    window_right: int


def check_heads(q_heads: int, kv_heads: int, head_dim: int):
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"k: H_kv={kv_heads} must divide the query heads H={q_heads}")
    if not 16 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"q: head dim must lie in [16, {MAX_HEAD_DIM}], got {head_dim}")


def check_params(
    q: torch.Tensor,
    dev: torch.device,
    *,
    batch: int,
    kv_heads: int,
    q_scale,
    k_scale,
    v_scale,
    rope_cos,
    rope_sin,
    sinks,
    is_causal,
    window_size_left,
    window_size_right,
    sm_scale,
    softcap,
    pos_encoding_mode,
    rotary_dim,
    rope_layout,
    out_dtype,
) -> Params:
    head_dim = q.shape[-1]
    q_heads = q.shape[-2]
    fp8 = q.dtype == E4M3
    # out_dtype
    if fp8:
        if out_dtype not in SIXTEEN_BIT:
            raise TypeError(f"out_dtype: fp8 inputs need out_dtype float16 or bfloat16, got {out_dtype}")
    elif out_dtype is not None and out_dtype != q.dtype:
        raise TypeError(f"out_dtype: must be None or q's dtype {q.dtype} for 16-bit inputs, got {out_dtype}")
    out = out_dtype if fp8 else q.dtype
    # fp8 scales
    scales = {"q_scale": q_scale, "k_scale": k_scale, "v_scale": v_scale}
    if fp8:
        for name, s in scales.items():
            if s is None:
                raise ValueError(f"{name}: required (f32 [B, H_kv]) when q/k/v are float8_e4m3fn")
            checks.check_tensor(name, s, dtype=torch.float32, shape=(batch, kv_heads), device=dev, inner_contiguous=2)
    else:
        for name, s in scales.items():
            if s is not None:
                raise ValueError(f"{name}: only for float8_e4m3fn inputs, got q of {q.dtype}")
    # RoPE
    if pos_encoding_mode not in ("none", "rope"):
        raise ValueError(f"pos_encoding_mode: expected 'none' or 'rope', got {pos_encoding_mode!r}")
    rdim = 0
    interleaved = False
    if pos_encoding_mode == "rope":
        rdim = head_dim if rotary_dim is None else int(rotary_dim)
        if rdim <= 0 or rdim > head_dim or rdim % 2:
            raise ValueError(f"rotary_dim: must be even and in (0, {head_dim}], got {rotary_dim}")
        if rope_layout not in ("neox", "interleaved"):
            raise ValueError(f"rope_layout: expected 'neox' or 'interleaved', got {rope_layout!r}")
        interleaved = rope_layout == "interleaved"
        if rope_cos is None or rope_sin is None:
            raise ValueError("rope_cos, rope_sin: required when pos_encoding_mode='rope'")
        checks.check_tensor("rope_cos", rope_cos, dtype=out, shape=(None, rdim // 2), device=dev, inner_contiguous=1)
        checks.check_tensor("rope_sin", rope_sin, dtype=out, shape=tuple(rope_cos.shape), device=dev)
        if rope_sin.stride() != rope_cos.stride():
            raise ValueError(f"rope_sin: strides {rope_sin.stride()} must equal rope_cos's {rope_cos.stride()}")
    elif rope_cos is not None or rope_sin is not None or rotary_dim is not None:
        raise ValueError("rope_cos, rope_sin, rotary_dim: only with pos_encoding_mode='rope'")
    # sinks
    if sinks is not None:
        checks.check_tensor("sinks", sinks, dtype=torch.float32, shape=(q_heads,), device=dev, inner_contiguous=1)
    # scalars
    if softcap is not None and softcap < 0:
        raise ValueError(f"softcap: must be None or >= 0, got {softcap}")
    for name, w in (("window_size_left", window_size_left), ("window_size_right", window_size_right)):
        if w is None or int(w) != w or w < -1:
            raise ValueError(f"{name}: must be an int >= -1 (-1 = unbounded), got {w}")
    if sm_scale is not None and not sm_scale > 0:
        raise ValueError(f"sm_scale: must be > 0, got {sm_scale}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal: expected a bool, got {type(is_causal).__name__}")
    return Params(
        out_dtype=out,
        sm_scale=float(sm_scale) if sm_scale is not None else head_dim**-0.5,
        softcap=float(softcap or 0.0),
        rotary_dim=rdim,
        interleaved=interleaved,
        window_left=int(window_size_left),
        window_right=int(window_size_right),
    )


def check_rope_rows(rope_cos, needed: int):
    """The tables must cover every key position used (the largest kv length)."""
    if rope_cos is not None and rope_cos.shape[0] < needed:
        raise ValueError(f"rope_cos: {rope_cos.shape[0]} rows cannot cover key positions up to {needed - 1}")
