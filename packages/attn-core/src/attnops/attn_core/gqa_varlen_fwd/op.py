"""GQAVarlenFwd: checks, launch (shared flash forward kernel), torch custom-op registration."""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd.params import INPUT_DTYPES, check_heads, check_params, check_rope_rows
from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.attention_fns import window_bounds


@torch.library.custom_op("attnops::gqa_varlen_fwd", mutates_args=())
def _varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    q_scale: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    rope_cos: torch.Tensor | None,
    rope_sin: torch.Tensor | None,
    sinks: torch.Tensor | None,
    max_q: int,
    max_kv: int,
    wl: int,
    wr: int,
    sm_scale: float,
    softcap: float,
    rotary_dim: int,
    interleaved: bool,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    T_q, H, D = q.shape
    out = testing.kernel_buffer((T_q, H, D), out_dtype, q.device)
    fwd.launch(fwd.Problem(
        q, k, v, out, varlen=True, batch=cu_seqlens_q.shape[0] - 1, max_q=max_q, max_kv=max_kv,
        cu_q=cu_seqlens_q, cu_kv=cu_seqlens_kv, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
        rope_cos=rope_cos, rope_sin=rope_sin, rotary_dim=rotary_dim, interleaved=interleaved, sinks=sinks,
        wl=wl, wr=wr, sm_scale=sm_scale, softcap=softcap,
    ))
    return out


@_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_kv, q_scale, k_scale, v_scale, rope_cos, rope_sin, sinks, max_q, max_kv,
      wl, wr, sm_scale, softcap, rotary_dim, interleaved, out_dtype):
    return q.new_empty(q.shape, dtype=out_dtype)


def gqa_varlen_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    q_scale: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    rope_cos: torch.Tensor | None = None,
    rope_sin: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
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
    validate_inputs: bool = False,
    max_seqlen_q: int | None = None,
    max_seqlen_kv: int | None = None,
) -> torch.Tensor:
    """Packed (THD) GQA attention forward for a batch of requests of different lengths (FA3
    ``flash_attn_varlen_func`` semantics; spec attn-core.md GQAVarlenFwd).

    Args:
        q: ``[T_q, H, D]`` f16 / bf16 / float8_e4m3fn; request b owns rows ``[cu_q[b], cu_q[b+1])``.
            Last dim contiguous (token and head strides free). ``16 <= D <= 512``.
        k, v: ``[T_kv, H_kv, D]`` of q's dtype, ``H % H_kv == 0``; query head h reads KV head ``h // (H/H_kv)``.
        cu_seqlens_q, cu_seqlens_kv: ``[B+1]`` int32 prefix sums from 0. Zero-length requests and
            ``q_len > kv_len`` are legal (rows with no visible key output zeros).
        q_scale, k_scale, v_scale: ``[B, H_kv]`` f32 dequant multipliers, required iff q is fp8.
        rope_cos, rope_sin: ``[P, R/2]`` in the output dtype, iff ``pos_encoding_mode='rope'``; P >= the
            largest kv length. Key j rotates at position j, query i at ``kv_len − q_len + i``.
        sinks: optional ``[H]`` f32 attention-sink logits (natural-log units of the scaled scores).
        is_causal: bottom-right aligned causal mask. window_size_left / window_size_right: FA3 sliding
            window (keys ``P_i − wl .. P_i + wr``), -1 = unbounded. sm_scale: default ``1/sqrt(D)``.
        softcap: ``softcap·tanh(s/softcap)`` on the scaled scores; None or 0 disables.
        pos_encoding_mode: ``'none'`` or ``'rope'``; rotary_dim: R (even, default D); rope_layout:
            ``'neox'`` (pair m, m+R/2) or ``'interleaved'`` (pair 2m, 2m+1).
        out_dtype: required (f16/bf16) for fp8 inputs, else None or q's dtype.
        validate_inputs: check cu_seqlens on the host (a device sync); always done for CPU tensors or
            with ``ATTNOPS_VALIDATE=1``.
        max_seqlen_q, max_seqlen_kv: optional host bounds of the lengths; when both are given the call does
            not read cu_seqlens on the host (no sync, CUDA-graph safe). They size the grid, so they must not
            be smaller than the true maxima.

    Returns:
        ``o [T_q, H, D]`` in the output dtype, contiguous.

    Example::

        o = gqa_varlen_fwd(q, k, v, cu_q, cu_kv, is_causal=True, window_size_left=255)
    """
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=INPUT_DTYPES, ndim=3, device=dev, inner_contiguous=1)
    T_q, H, D = q.shape
    checks.check_tensor("k", k, dtype=q.dtype, ndim=3, device=dev, inner_contiguous=1)
    T_kv, H_kv = k.shape[0], k.shape[1]
    checks.check_tensor("k", k, shape=(T_kv, H_kv, D))
    checks.check_tensor("v", v, dtype=q.dtype, shape=(T_kv, H_kv, D), device=dev, inner_contiguous=1)
    check_heads(H, H_kv, D)
    checks.check_tensor("cu_seqlens_q", cu_seqlens_q, dtype=torch.int32, ndim=1, device=dev, inner_contiguous=1)
    B = cu_seqlens_q.shape[0] - 1
    if B < 0:
        raise ValueError("cu_seqlens_q: expected shape (B+1,) with B >= 0, got an empty tensor")
    checks.check_tensor("cu_seqlens_kv", cu_seqlens_kv, dtype=torch.int32, shape=(B + 1,), device=dev,
                        inner_contiguous=1)
    p = check_params(
        q, dev, batch=B, kv_heads=H_kv, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
        rope_cos=rope_cos, rope_sin=rope_sin, sinks=sinks, is_causal=is_causal,
        window_size_left=window_size_left, window_size_right=window_size_right, sm_scale=sm_scale,
        softcap=softcap, pos_encoding_mode=pos_encoding_mode, rotary_dim=rotary_dim, rope_layout=rope_layout,
        out_dtype=out_dtype,
    )
    validate = validate_inputs or checks.validate_values(cu_seqlens_q, cu_seqlens_kv)
    if validate or max_seqlen_q is None or max_seqlen_kv is None:
        cu_q_host, cu_kv_host = cu_seqlens_q.cpu(), cu_seqlens_kv.cpu()  # one sync
        if validate:
            checks.check_cu_seqlens("cu_seqlens_q", cu_q_host, T_q)
            checks.check_cu_seqlens("cu_seqlens_kv", cu_kv_host, T_kv)
        lens_q = cu_q_host[1:] - cu_q_host[:-1]
        lens_kv = cu_kv_host[1:] - cu_kv_host[:-1]
        true_q = int(lens_q.max()) if B else 0
        true_kv = int(lens_kv.max()) if B else 0
        if max_seqlen_q is not None and max_seqlen_q < true_q:
            raise ValueError(f"max_seqlen_q: {max_seqlen_q} is below the longest query length {true_q}")
        if max_seqlen_kv is not None and max_seqlen_kv < true_kv:
            raise ValueError(f"max_seqlen_kv: {max_seqlen_kv} is below the longest key length {true_kv}")
        max_seqlen_q = true_q if max_seqlen_q is None else max_seqlen_q
        max_seqlen_kv = true_kv if max_seqlen_kv is None else max_seqlen_kv
        check_rope_rows(rope_cos, true_kv)
    wl, wr = window_bounds(is_causal, p.window_left, p.window_right)
    return _varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_kv, q_scale, k_scale, v_scale, rope_cos, rope_sin, sinks,
        int(max_seqlen_q), int(max_seqlen_kv), wl, wr, p.sm_scale, p.softcap, p.rotary_dim, p.interleaved,
        p.out_dtype,
    )
