"""GQADenseFwd: checks, launch (shared flash forward kernel), torch custom-op registration."""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd.params import INPUT_DTYPES, check_heads, check_params, check_rope_rows
from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.attention_fns import window_bounds


@torch.library.custom_op("attnops::gqa_dense_fwd", mutates_args=())
def _dense(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    rope_cos: torch.Tensor | None,
    rope_sin: torch.Tensor | None,
    wl: int,
    wr: int,
    sm_scale: float,
    softcap: float,
    rotary_dim: int,
    interleaved: bool,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    B, S_q, H, D = q.shape
    out = testing.kernel_buffer((B, S_q, H, D), out_dtype, q.device)
    fwd.launch(fwd.Problem(
        q, k, v, out, varlen=False, batch=B, max_q=S_q, max_kv=k.shape[1],
        q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, rope_cos=rope_cos, rope_sin=rope_sin,
        rotary_dim=rotary_dim, interleaved=interleaved, wl=wl, wr=wr, sm_scale=sm_scale, softcap=softcap,
    ))
    return out


@_dense.register_fake
def _(q, k, v, q_scale, k_scale, v_scale, rope_cos, rope_sin, wl, wr, sm_scale, softcap, rotary_dim, interleaved,
      out_dtype):
    return q.new_empty(q.shape, dtype=out_dtype)


def gqa_dense_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    rope_cos: torch.Tensor | None = None,
    rope_sin: torch.Tensor | None = None,
    *,
    is_causal: bool = True,
    window_size_left: int = -1,
    window_size_right: int = -1,
    sm_scale: float | None = None,
    softcap: float | None = None,
    pos_encoding_mode: str = "none",
    rotary_dim: int | None = None,
    rope_layout: str = "neox",
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Dense (BSHD) GQA attention forward, prefill or decode (spec attn-core.md GQADenseFwd).

    Args:
        q: ``[B, S_q, H, D]`` f16 / bf16 / float8_e4m3fn, last dim contiguous (other strides free);
            ``16 <= D <= 512``.
        k, v: ``[B, S_kv, H_kv, D]`` of q's dtype, ``H % H_kv == 0``; query head h reads KV head
            ``h // (H/H_kv)``.
        q_scale, k_scale, v_scale: ``[B, H_kv]`` f32 dequant multipliers, required iff q is fp8.
        rope_cos, rope_sin: ``[P, R/2]`` (``P >= S_kv``) in the output dtype, iff
            ``pos_encoding_mode='rope'``: key j rotates at position j, query i at ``S_kv − S_q + i``.
        is_causal: bottom-right aligned causal mask (query i sees keys ``<= S_kv − S_q + i``).
        window_size_left / window_size_right: FA3 sliding window, -1 = unbounded.
        sm_scale: default ``1/sqrt(D)``. softcap: ``softcap·tanh(s/softcap)``; None or 0 disables.
        pos_encoding_mode: ``'none'`` or ``'rope'``; rotary_dim: R (even, default D); rope_layout:
            ``'neox'`` or ``'interleaved'``.
        out_dtype: required (f16/bf16) for fp8 inputs, else None or q's dtype.

    ``is_causal`` or RoPE require ``S_q <= S_kv``. Decode (``S_q = 1``) with few ``B·H_kv`` splits the
    keys across programs and merges the partials in a second kernel.

    Returns:
        ``o [B, S_q, H, D]`` in the output dtype, contiguous.

    Example::

        o = gqa_dense_fwd(q, k_cache, v_cache)              # decode: q [B, 1, H, D]
    """
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=INPUT_DTYPES, ndim=4, device=dev, inner_contiguous=1)
    B, S_q, H, D = q.shape
    checks.check_tensor("k", k, dtype=q.dtype, ndim=4, device=dev, inner_contiguous=1)
    S_kv, H_kv = k.shape[1], k.shape[2]
    checks.check_tensor("k", k, shape=(B, S_kv, H_kv, D))
    checks.check_tensor("v", v, dtype=q.dtype, shape=(B, S_kv, H_kv, D), device=dev, inner_contiguous=1)
    check_heads(H, H_kv, D)
    p = check_params(
        q, dev, batch=B, kv_heads=H_kv, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
        rope_cos=rope_cos, rope_sin=rope_sin, sinks=None, is_causal=is_causal,
        window_size_left=window_size_left, window_size_right=window_size_right, sm_scale=sm_scale,
        softcap=softcap, pos_encoding_mode=pos_encoding_mode, rotary_dim=rotary_dim, rope_layout=rope_layout,
        out_dtype=out_dtype,
    )
    if (is_causal or p.rotary_dim) and S_q > S_kv:
        raise ValueError(f"q: S_q={S_q} > S_kv={S_kv} is only allowed without is_causal and RoPE")
    check_rope_rows(rope_cos, S_kv)
    wl, wr = window_bounds(is_causal, p.window_left, p.window_right)
    return _dense(q, k, v, q_scale, k_scale, v_scale, rope_cos, rope_sin, wl, wr, p.sm_scale, p.softcap,
                  p.rotary_dim, p.interleaved, p.out_dtype)
