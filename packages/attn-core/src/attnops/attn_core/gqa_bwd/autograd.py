"""The training pair: the shared flash forward with its base-2 lse output (``gqa_attention_fwd``) and the
GQABwd kernels, tied by a ``torch.autograd.Function`` (``gqa_attention``)."""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.kernel_utils import testing
from attnops.kernel_utils.attention_fns import window_bounds

from .op import _bwd, check_qkv


@torch.library.custom_op("attnops::gqa_attention_fwd", mutates_args=())
def _fwd_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, wl: int, wr: int, sm_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    B, S_q, H, D = q.shape
    o = testing.kernel_buffer((B, S_q, H, D), q.dtype, q.device)
    lse = testing.kernel_buffer((B, H, S_q), torch.float32, q.device)
    if k.shape[1] == 0:  # no key: empty rows (o = 0, lse = -inf), nothing to launch
        o.zero_()
        lse.fill_(float("-inf"))
        return o, lse
    fwd.launch(fwd.Problem(q, k, v, o, varlen=False, batch=B, max_q=S_q, max_kv=k.shape[1], wl=wl, wr=wr,
                           sm_scale=sm_scale, lse=lse))
    return o, lse


@_fwd_lse.register_fake
def _(q, k, v, wl, wr, sm_scale):
    B, S_q, H, _ = q.shape
    return torch.empty_like(q), q.new_empty((B, H, S_q), dtype=torch.float32)


def gqa_attention_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = True, sm_scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense GQA forward that also returns the log-sum-exp :func:`gqa_bwd` consumes: ``(o, lse)``.

    Args:
        q: ``[B, S_q, H, D]`` f16 / bf16 (last dim contiguous), ``16 <= D <= 256``; k, v:
            ``[B, S_kv, H_kv, D]`` of q's dtype, ``H % H_kv == 0``.
        is_causal: bottom-right causal (``S_q <= S_kv``); sm_scale: default ``1/sqrt(D)``.

    Returns:
        ``o [B, S_q, H, D]`` in q's dtype and ``lse [B, H, S_q]`` f32 in **base 2**
        (``log2 Σ_j exp(s_ij)``; ``-inf`` for a row with no key). Same kernel as :func:`gqa_dense_fwd`,
        run without KV splits.
    """
    _, scale = check_qkv(q, k, v, is_causal, sm_scale)
    wl, wr = window_bounds(is_causal, -1, -1)
    return _fwd_lse(q, k, v, wl, wr, scale)


class GQAAttention(torch.autograd.Function):
    """``o = attention(q, k, v)`` with the flash forward and the GQABwd backward."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal: bool, sm_scale: float | None, deterministic: bool):
        _, scale = check_qkv(q, k, v, is_causal, sm_scale)
        wl, wr = window_bounds(is_causal, -1, -1)
        o, lse = _fwd_lse(q, k, v, wl, wr, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.is_causal = is_causal
        ctx.scale = scale
        ctx.deterministic = deterministic
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if do.stride(-1) != 1:  # e.g. an expanded gradient of o.sum()
            do = do.contiguous()
        dq, dk, dv = _bwd(q, k, v, o, do.to(q.dtype), lse, ctx.is_causal, ctx.scale, ctx.deterministic)
        return dq, dk, dv, None, None, None


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = True, sm_scale: float | None = None,
    deterministic: bool = True,
) -> torch.Tensor:
    """Differentiable dense GQA / MHA attention: ``o [B, S_q, H, D]`` (layouts as :func:`gqa_bwd`).

    Forward: the flash kernel of :func:`gqa_dense_fwd` with the base-2 lse saved; backward:
    :func:`gqa_bwd` (dk/dv summed over each KV head's G query heads; ``deterministic`` as there). Saves
    q, k, v, o and the lse.

    Example::

        o = gqa_attention(q, k, v, is_causal=True)   # q [B, S, 32, 128], k/v [B, S, 8, 128]
        o.backward(do)                               # q.grad, k.grad, v.grad
    """
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic: expected a bool, got {type(deterministic).__name__}")
    return GQAAttention.apply(q, k, v, is_causal, sm_scale, deterministic)
