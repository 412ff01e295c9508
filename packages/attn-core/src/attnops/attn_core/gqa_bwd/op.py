"""GQABwd: checks, launch, torch custom-op registration (``attnops::gqa_bwd``)."""

from __future__ import annotations

import torch

from attnops.kernel_utils import checks, runtime, testing

from . import launch as bwd

ACTIVATIONS = (torch.float16, torch.bfloat16)
MIN_HEAD_DIM = 16


def check_qkv(q, k, v, is_causal, sm_scale) -> tuple[torch.device, float]:
    """Checks shared by the backward and the training forward; returns the device and the scale."""
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=ACTIVATIONS, ndim=4, device=dev, inner_contiguous=1)
    B, S_q, H, D = q.shape
    checks.check_tensor("k", k, dtype=q.dtype, ndim=4, device=dev, inner_contiguous=1)
    S_kv, H_kv = k.shape[1], k.shape[2]
    checks.check_tensor("k", k, shape=(B, S_kv, H_kv, D))
    checks.check_tensor("v", v, dtype=q.dtype, shape=(B, S_kv, H_kv, D), device=dev, inner_contiguous=1)
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"k: H_kv={H_kv} must divide the query heads H={H}")
    if not MIN_HEAD_DIM <= D <= bwd.MAX_HEAD_DIM:
        raise ValueError(f"q: head dim must lie in [{MIN_HEAD_DIM}, {bwd.MAX_HEAD_DIM}], got {D}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal: expected a bool, got {type(is_causal).__name__}")
    if is_causal and S_q > S_kv:
        raise ValueError(f"q: S_q={S_q} > S_kv={S_kv} is only allowed without is_causal")
    if sm_scale is not None and not sm_scale > 0:
        raise ValueError(f"sm_scale: must be > 0, got {sm_scale}")
    return dev, float(sm_scale) if sm_scale is not None else D**-0.5


@torch.library.custom_op("attnops::gqa_bwd", mutates_args=())
def _bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    sm_scale: float,
    deterministic: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, S_q, H, D = q.shape
    S_kv, H_kv = k.shape[1], k.shape[2]
    if B == 0 or S_q == 0 or S_kv == 0:  # no (query, key) pair: every gradient is 0
        return q.new_zeros(q.shape), k.new_zeros(k.shape), v.new_zeros(v.shape)
    dq = testing.kernel_buffer((B, S_q, H, D), q.dtype, q.device)
    dk = testing.kernel_buffer((B, S_kv, H_kv, D), k.dtype, k.device)
    dv = testing.kernel_buffer((B, S_kv, H_kv, D), v.dtype, v.device)
    bwd.launch(bwd.Problem(q, k, v, o, do, lse, dq, dk, dv, is_causal=is_causal, sm_scale=sm_scale,
                           deterministic=deterministic))
    return dq, dk, dv


@_bwd.register_fake
def _(q, k, v, o, do, lse, is_causal, sm_scale, deterministic=True):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def gqa_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    *,
    is_causal: bool = True,
    sm_scale: float | None = None,
    deterministic: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of dense GQA / MHA attention (spec attn-core.md GQABwd): ``(dq, dk, dv)``.

    Args:
        q: ``[B, S_q, H, D]`` f16 / bf16, last dim contiguous (other strides free); ``16 <= D <= 256``.
        k, v: ``[B, S_kv, H_kv, D]`` of q's dtype, ``H % H_kv == 0``; query head h uses KV head
            ``h // (H/H_kv)``. ``H_kv = H`` is MHA.
        o: ``[B, S_q, H, D]`` of q's dtype: the forward's output.
        do: ``[B, S_q, H, D]`` of q's dtype: the gradient of the loss with respect to ``o``.
        lse: ``[B, H, S_q]`` f32, last dim contiguous: the forward's log-sum-exp **in base 2**,
            ``log2 Σ_j exp(s_ij)`` over the scaled, masked scores (a natural-log lse times ``log2(e)``),
            e.g. from :func:`gqa_attention_fwd`. ``o`` and ``lse`` must come from the same forward.
        is_causal: bottom-right aligned causal mask (query i sees keys ``<= S_kv − S_q + i``); needs
            ``S_q <= S_kv``. The spec's rows have ``S_q = S_kv``.
        sm_scale: default ``1/sqrt(D)`` (the spec fixes this value; another must match the forward's).
        deterministic: True (default): no atomics, dK/dV and dQ are each written once and two calls give
            the same bits. False permits atomics: where the Triton kernel runs (at most 512 keys, head dims
            other than 64 / 128, no Hopper GPU) dQ is accumulated in fp32 with atomics by the dK/dV programs
            (5 matmuls per tile pair instead of 7, plus a B·S_q·H·D fp32 buffer) and its bits may differ
            between calls; the Hopper kernels for longer rows stay deterministic, being faster so.

    Returns:
        ``dq [B, S_q, H, D]``, ``dk, dv [B, S_kv, H_kv, D]`` in q's dtype, contiguous; dk/dv are summed over
        the G query heads of each KV head and always deterministic.

    Example::

        o, lse = gqa_attention_fwd(q, k, v, is_causal=True)
        dq, dk, dv = gqa_bwd(q, k, v, o, do, lse, is_causal=True)
    """
    dev, scale = check_qkv(q, k, v, is_causal, sm_scale)
    B, S_q, H, D = q.shape
    checks.check_tensor("o", o, dtype=q.dtype, shape=(B, S_q, H, D), device=dev, inner_contiguous=1)
    checks.check_tensor("do", do, dtype=q.dtype, shape=(B, S_q, H, D), device=dev, inner_contiguous=1)
    checks.check_tensor("lse", lse, dtype=torch.float32, shape=(B, H, S_q), device=dev, inner_contiguous=1)
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic: expected a bool, got {type(deterministic).__name__}")
    return _bwd(q, k, v, o, do, lse, is_causal, scale, deterministic)
