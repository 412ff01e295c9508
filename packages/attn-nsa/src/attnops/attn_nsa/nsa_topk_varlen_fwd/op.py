"""NSATopKVarlenFwd: checks, launch configs, torch custom-op registration."""

from __future__ import annotations

import torch
import triton

from attnops.attn_nsa._tuning import TunedKernel
from attnops.attn_nsa._varlen import (
    ACTIVATIONS,
    check_heads,
    check_int_param,
    check_packing,
    check_scale_param,
    check_tile_strides,
)
from attnops.kernel_utils import checks, runtime, testing

from .kernel import nsa_topk_kernel

MAX_SELECTED = 64

CONFIGS = (
    triton.Config({"BM": 64, "BC": 32}, num_warps=4, num_stages=2),
    triton.Config({"BM": 64, "BC": 64}, num_warps=4, num_stages=2),
    triton.Config({"BM": 128, "BC": 64}, num_warps=8, num_stages=2),
    triton.Config({"BM": 32, "BC": 32}, num_warps=2, num_stages=2),
)


def _valid(c: triton.Config, a: dict) -> bool:
    bm, bc = c.kwargs["BM"], c.kwargs["BC"]
    return bm >= a["GP"] and bc >= a["SP"] and (bm <= 64 or a["BD"] <= 128)


def _default(valid: list[triton.Config], a: dict) -> triton.Config:
    if runtime.interpreting():  # fewest programs and sort stages: the interpreter pays per operation
        return min(valid, key=lambda c: (-c.kwargs["BM"], c.kwargs["BC"]))
    # H200 sweep (2026-12-01, every config forced, one process): the narrowest chunk tile on every seed row
    # (BC 32: long-context 446 us against 476 at BC 64), BM 64 / 4 warps at D 128 (8x1k 58.4 us against 74.9 at
    # BM 32) and BM 32 / 2 warps at D 64 (wide-gqa, G 32: 130 us against 185 at BM 64).
    want_bm = 32 if a["BD"] <= 64 else 64
    ranked = sorted(valid, key=lambda c: (c.kwargs["BC"], c.kwargs["BM"] != want_bm))
    return ranked[0]


_TUNED = TunedKernel(nsa_topk_kernel, CONFIGS, valid=_valid, default=_default)


def _run(q, k_cmp, offsets, chunk_offsets, token_indices, scale, selected_block_num, bs, config=None):
    """Allocate and launch (no argument checks). ``config`` forces one launch config (tests)."""
    num_tokens, h, d = q.shape
    num_chunks, h_kv, _ = k_cmp.shape
    s = selected_block_num
    block_indices = testing.kernel_buffer((num_tokens, h_kv, s), torch.int32, q.device)
    if num_tokens == 0 or s == 0:
        return block_indices
    g = h // h_kv
    num_seqs = offsets.numel() - 1
    args = dict(
        q_ptr=q, k_ptr=k_cmp, bi_ptr=block_indices, offsets_ptr=offsets, chunk_offsets_ptr=chunk_offsets,
        tok_ptr=token_indices, num_tokens=num_tokens, num_seqs=num_seqs, scale=scale,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kc=k_cmp.stride(0), stride_kh=k_cmp.stride(1),
        stride_bt=block_indices.stride(0), stride_bh=block_indices.stride(1),
        G=g, GP=triton.next_power_of_2(g), D=d, BD=max(16, triton.next_power_of_2(d)), BS=bs,
        S=s, SP=triton.next_power_of_2(s),
    )
    gp = args["GP"]
    grid = lambda meta: (triton.cdiv(num_tokens, meta["BM"] // gp), h_kv)  # noqa: E731
    _TUNED.launch(grid, args, config)
    return block_indices


@torch.library.custom_op("attnops::nsa_topk_varlen_fwd", mutates_args=())
def _nsa_topk(
    q: torch.Tensor,
    k_cmp: torch.Tensor,
    offsets: torch.Tensor,
    chunk_offsets: torch.Tensor,
    token_indices: torch.Tensor,
    scale: float,
    selected_block_num: int,
    bs: int,
) -> torch.Tensor:
    return _run(q, k_cmp, offsets, chunk_offsets, token_indices, scale, selected_block_num, bs)


@_nsa_topk.register_fake
def _(q, k_cmp, offsets, chunk_offsets, token_indices, scale, selected_block_num, bs):
    return q.new_empty((q.shape[0], k_cmp.shape[1], selected_block_num), dtype=torch.int32)


def check_args(q, k_cmp, offsets, chunk_offsets, token_indices, scale, selected_block_num, bs):
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=ACTIVATIONS, ndim=3, device=dev, inner_contiguous=1)
    t, h, d = q.shape
    checks.check_tensor("k_cmp", k_cmp, dtype=q.dtype, shape=(None, None, d), device=dev, inner_contiguous=1)
    c, h_kv, _ = k_cmp.shape
    g = check_heads(h, h_kv, "k_cmp")
    check_tile_strides("q", q)
    if not 1 <= d <= 256:
        raise ValueError(f"q: head dim must lie in [1, 256], got {d}")
    if g > 128:
        raise ValueError(f"k_cmp: at most 128 query heads per KV head are supported, got G = {g}")
    scale = check_scale_param(scale)
    s = check_int_param("selected_block_num", selected_block_num, 1, MAX_SELECTED)
    bs = check_int_param("bs", bs, 1, 1 << 16)
    check_packing(offsets, token_indices, t, dev, chunk_offsets=chunk_offsets, bs=bs, num_chunks=c)
    return scale, s, bs


def nsa_topk_varlen_fwd(
    q: torch.Tensor,
    k_cmp: torch.Tensor,
    offsets: torch.Tensor,
    chunk_offsets: torch.Tensor,
    token_indices: torch.Tensor,
    scale: float,
    selected_block_num: int = 16,
    bs: int = 32,
) -> torch.Tensor:
    """NSA top-k block selection over packed sequences (FLA ``parallel_nsa_topk`` scoring rule).

    For token t (sequence n, current chunk ``cur = t // bs``) and KV group g, with ``q' = round_T(q·scale)``,
    ``p_hc = exp(<q'_h, k_c> − lse_h)`` (lse over the closed chunks ``c < floor((t+1)/bs)``), chunk ``c <= cur``
    scores ``Σ_{h∈g} p_hc`` (``c < cur``) or G for the forced first / previous / current chunk. Returns the
    ``selected_block_num`` best chunk ids (relative to the sequence start), no duplicates; slots beyond the
    ``cur + 1`` candidates are −1. The selected ids come first, then the −1s; their order is unspecified (as in the
    spec): usually descending importance with ties to the smaller id, ascending when a whole tile of tokens has
    at most ``selected_block_num`` candidates each.

    Args:
        q: ``[T_q, H, D]`` f16/bf16, last dim contiguous.
        k_cmp: ``[C, H_kv, D]``, q's dtype, ``C = chunk_offsets[N]``; ``H % H_kv == 0``.
        offsets: ``[N+1]`` int32 token prefix sums.
        chunk_offsets: ``[N+1]`` int32 prefix sums of ``ceil(len_n / bs)``.
        token_indices: ``[T_q, 2]`` int32 contiguous ``(n, t)`` per packed token.
        scale: query scale (> 0), applied to q in its own dtype (FLA).
        selected_block_num: ``S`` in ``[1, 64]``.
        bs: block (chunk) size.

    Returns:
        ``block_indices [T_q, H_kv, S]`` int32.

    Example::

        idx = nsa_topk_varlen_fwd(q, k_cmp, offsets, chunk_offsets, token_indices, 128**-0.5, 16, 32)
    """
    scale, s, bs = check_args(q, k_cmp, offsets, chunk_offsets, token_indices, scale, selected_block_num, bs)
    return _nsa_topk(q, k_cmp, offsets, chunk_offsets, token_indices, scale, s, bs)
