"""NSACompressedVarlenFwd: checks, launch configs, torch custom-op registration."""

from __future__ import annotations

import math

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

from .kernel import nsa_compressed_fwd_kernel

LOG2E = math.log2(math.e)

# BC 16 (offline sm_90, main launch, G 16, D 128): 114 registers at BM 64 / 4 warps, i.e. 4 CTAs (256 query rows)
# per SM against 3 for BC 32 (148) and 2 for BC 64 (173): more q / o bytes in flight on the streaming rows.
CONFIGS = (
    triton.Config({"BM": 64, "BC": 16}, num_warps=4, num_stages=2),
    triton.Config({"BM": 64, "BC": 16}, num_warps=4, num_stages=3),
    triton.Config({"BM": 64, "BC": 32}, num_warps=4, num_stages=2),
    triton.Config({"BM": 128, "BC": 32}, num_warps=8, num_stages=2),
    triton.Config({"BM": 64, "BC": 64}, num_warps=4, num_stages=2),
    triton.Config({"BM": 128, "BC": 64}, num_warps=8, num_stages=2),
)


def _valid(c: triton.Config, a: dict) -> bool:
    bm = c.kwargs["BM"]
    # BC = 64 with a 16-wide value tile (DV <= 16) compiles (Triton 3.6, sm_90) to a row-sum reduction that
    # reads shared memory out of range: compute-sanitizer on the H200 flagged fuzz seeds 2176028 / 2176050 /
    # 2176057 (DV 8, 1, 8); the BC = 32 configs ran all 100 fuzz seeds clean.
    return bm >= a["GP"] and (bm <= 64 or max(a["BDK"], a["BDV"]) <= 128) and (c.kwargs["BC"] <= 32 or a["BDV"] > 16)


def _default(valid: list[triton.Config], a: dict) -> triton.Config:
    if runtime.interpreting():  # fewest programs: the interpreter pays per operation, not per element
        return min(valid, key=lambda c: (-c.kwargs["BM"], -c.kwargs["BC"]))
    # H200 sweep (2026-12-01, every config forced, one process): BC 16 / BM 64 / 4 warps fastest on all three
    # seed rows (8x1k 52.1 us against 58.4-98.3, 4x1k 28.9 against 32.4-50.0, ragged 9.0 against 11.6-13.5);
    # 2 and 3 stages within 0.4 %. Else the first valid config in CONFIGS order.
    return valid[0]


_TUNED = TunedKernel(nsa_compressed_fwd_kernel, CONFIGS, valid=_valid, default=_default)


def _run(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs, config=None):
    """Allocate and launch (no argument checks). ``config`` forces one launch config (tests)."""
    num_tokens, h, dk = q.shape
    num_chunks, h_kv, dv = v_cmp.shape
    o = testing.kernel_buffer((num_tokens, h, dv), q.dtype, q.device)
    lse = testing.kernel_buffer((num_tokens, h), q.dtype, q.device)
    if num_tokens == 0:
        return o, lse
    g = h // h_kv
    num_seqs = offsets.numel() - 1
    args = dict(
        q_ptr=q, k_ptr=k_cmp, v_ptr=v_cmp, o_ptr=o, lse_ptr=lse, offsets_ptr=offsets,
        chunk_offsets_ptr=chunk_offsets, tok_ptr=token_indices,
        num_tokens=num_tokens, num_seqs=num_seqs, qk_scale=scale * LOG2E,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kc=k_cmp.stride(0), stride_kh=k_cmp.stride(1),
        stride_vc=v_cmp.stride(0), stride_vh=v_cmp.stride(1), stride_ot=o.stride(0), stride_oh=o.stride(1),
        stride_lt=lse.stride(0),
        G=g, GP=triton.next_power_of_2(g), DK=dk, DV=dv,
        BDK=max(16, triton.next_power_of_2(dk)), BDV=max(16, triton.next_power_of_2(dv)), BS=bs,
    )
    gp = args["GP"]
    # one program per tile, plus one per internal sequence start (most exit at once: see the kernel)
    grid = lambda meta: (triton.cdiv(num_tokens, meta["BM"] // gp) + num_seqs - 1, h_kv)  # noqa: E731
    _TUNED.launch(grid, args, config)
    return o, lse


@torch.library.custom_op("attnops::nsa_compressed_varlen_fwd", mutates_args=())
def _nsa_compressed(
    q: torch.Tensor,
    k_cmp: torch.Tensor,
    v_cmp: torch.Tensor,
    offsets: torch.Tensor,
    chunk_offsets: torch.Tensor,
    token_indices: torch.Tensor,
    scale: float,
    bs: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _run(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs)


@_nsa_compressed.register_fake
def _(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs):
    t, h, _ = q.shape
    return q.new_empty((t, h, v_cmp.shape[2])), q.new_empty((t, h))


def check_args(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs):
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=ACTIVATIONS, ndim=3, device=dev, inner_contiguous=1)
    t, h, dk = q.shape
    checks.check_tensor("k_cmp", k_cmp, dtype=q.dtype, shape=(None, None, dk), device=dev, inner_contiguous=1)
    c, h_kv, _ = k_cmp.shape
    checks.check_tensor("v_cmp", v_cmp, dtype=q.dtype, shape=(c, h_kv, None), device=dev, inner_contiguous=1)
    check_heads(h, h_kv, "k_cmp")
    check_tile_strides("q", q)
    for name, d in (("q", dk), ("v_cmp", v_cmp.shape[2])):
        if not 1 <= d <= 256:
            raise ValueError(f"{name}: head dim must lie in [1, 256], got {d}")
    scale = check_scale_param(scale)
    bs = check_int_param("bs", bs, 1, 1 << 16)
    check_packing(offsets, token_indices, t, dev, chunk_offsets=chunk_offsets, bs=bs, num_chunks=c)
    return scale, bs


def nsa_compressed_varlen_fwd(
    q: torch.Tensor,
    k_cmp: torch.Tensor,
    v_cmp: torch.Tensor,
    offsets: torch.Tensor,
    chunk_offsets: torch.Tensor,
    token_indices: torch.Tensor,
    scale: float,
    bs: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """NSA compressed attention over packed sequences (FLA ``parallel_nsa_compression``, varlen).

    Token t of sequence n attends, for query head h, to the ``nc(t) = floor((t+1)/bs)`` closed compressed
    chunks of its sequence (k_cmp/v_cmp rows ``chunk_offsets[n] + c``, KV head ``h // G``):
    ``o = softmax(scale·<q, k_c>)·v_c`` and ``lse = ln Σ_c exp(scale·<q, k_c>)``. Tokens with no closed chunk
    (the first ``bs − 1`` of each sequence) output ``o = 0, lse = 0``.

    Args:
        q: ``[T_q, H, DK]`` f16/bf16, last dim contiguous.
        k_cmp: ``[C, H_kv, DK]``, q's dtype, ``C = chunk_offsets[N]``; ``H % H_kv == 0``.
        v_cmp: ``[C, H_kv, DV]``, q's dtype.
        offsets: ``[N+1]`` int32 token prefix sums (zero-length sequences allowed).
        chunk_offsets: ``[N+1]`` int32 prefix sums of ``ceil(len_n / bs)``.
        token_indices: ``[T_q, 2]`` int32 contiguous, ``(n, t)`` per packed token.
        scale: softmax scale (> 0), e.g. ``DK ** -0.5``.
        bs: compression block size (32 or 64 on the benchmark page).

    Returns:
        ``(o [T_q, H, DV], lse [T_q, H])``, both in q's dtype; lse is a natural log.

    Example::

        o, lse = nsa_compressed_varlen_fwd(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, 128**-0.5, 32)
    """
    scale, bs = check_args(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs)
    return _nsa_compressed(q, k_cmp, v_cmp, offsets, chunk_offsets, token_indices, scale, bs)
