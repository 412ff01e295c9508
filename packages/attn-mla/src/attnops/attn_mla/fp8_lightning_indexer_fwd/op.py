"""FP8LightningIndexerFwd: checks, launch configuration, torch custom-op registration."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.fp8 import E4M3

from .kernel import lightning_indexer_kernel

_INPUTS = (torch.bfloat16, E4M3)


@dataclass(frozen=True)
class IndexerConfig:
    block_m: int  # query rows per tile
    block_n: int  # keys per tile
    num_warps: int
    num_stages: int


# Every config the op can pick; tests run each (GPU: full-size rows; CPU: shrunk rows).
CONFIGS = {
    # 64 rows × 256 keys, one warpgroup per 128 keys (177 regs: one program per SM). Per tile the query
    # traffic is 64·H·D bytes against 256·D of keys: ~480 FLOP per byte read from L2 at H = 64.
    "h200-wide": IndexerConfig(block_m=64, block_n=256, num_warps=8, num_stages=3),
    # 64 × 128 (104 regs: two programs per SM, so one program's relu·w epilogue can overlap the other's
    # dot), at twice the L2 traffic per FLOP.
    "h200-narrow": IndexerConfig(block_m=64, block_n=128, num_warps=8, num_stages=3),
    "interpreter": IndexerConfig(block_m=16, block_n=32, num_warps=4, num_stages=1),
}


# Multiply-adds (B·S·S_kv·H·D) up to which the narrow tile wins. H200 sweep of all 18 seed rows (2026-12-02,
# 20261202-1311-tune-indexer.json): narrow faster on 15 — by 20-32 % on the 4096-key and decode rows (twice the
# programs per SM hide a short row's fixed per-program cost), 5-9 % on chunk-prefill (2^39), 1-2 % up to 2^40;
# wide faster on the three rows of 2^41 and more (1-4 %: there the narrow tile's double L2 traffic per FLOP shows).
NARROW_MAX_WORK = 1 << 40


def pick_config(work: int = 1 << 62) -> IndexerConfig:
    """The launch config for ``work`` = B·S·S_kv·H·D multiply-adds."""
    if runtime.interpreting():
        return CONFIGS["interpreter"]
    return CONFIGS["h200-narrow" if work <= NARROW_MAX_WORK else "h200-wide"]


def launch(index_q, index_k, weights, ks, ke, index_k_scale, clean_logits: bool, out, config: IndexerConfig):
    """Fill ``out`` ([B, S, S_kv, G] f32) with ``config``; inputs already checked."""
    b, s, h, d = index_q.shape
    s_kv, g = index_k.shape[1], index_k.shape[2]
    if out.numel() == 0:
        return out
    has_scale = index_k_scale is not None
    scale = index_k_scale if has_scale else weights
    scale_strides = index_k_scale.stride() if has_scale else (0, 0, 0)
    grid = (triton.cdiv(s_kv, config.block_n), triton.cdiv(s, config.block_m), b * g)
    lightning_indexer_kernel[grid](
        index_q, index_k, weights, ks, ke, scale, out,
        s, s_kv, g, h // g,
        index_q.stride(0), index_q.stride(1),
        index_k.stride(0), index_k.stride(1), index_k.stride(2),
        *weights.stride(),
        *scale_strides,
        *out.stride(),
        D=d, BLOCK_M=config.block_m, BLOCK_N=config.block_n, NUM_STAGES=config.num_stages,
        HAS_SCALE=has_scale, CLEAN=clean_logits, UPCAST=runtime.interpreting(),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


@torch.library.custom_op("attnops::fp8_lightning_indexer_fwd", mutates_args=())
def _indexer(
    index_q: torch.Tensor,
    index_k: torch.Tensor,
    weights: torch.Tensor,
    cu_seqlen_ks: torch.Tensor,
    cu_seqlen_ke: torch.Tensor,
    index_k_scale: torch.Tensor | None,
    clean_logits: bool,
) -> torch.Tensor:
    b, s = index_q.shape[:2]
    s_kv, g = index_k.shape[1:3]
    out = testing.kernel_buffer((b, s, s_kv, g), torch.float32, index_q.device)
    return launch(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale, clean_logits, out,
                  pick_config(b * s * s_kv * index_q.shape[2] * index_q.shape[3]))


@_indexer.register_fake
def _(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale, clean_logits):
    b, s = index_q.shape[:2]
    s_kv, g = index_k.shape[1:3]
    return index_q.new_empty((b, s, s_kv, g), dtype=torch.float32)


def check_inputs(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale) -> None:
    dev = runtime.device()
    checks.check_tensor("index_q", index_q, dtype=_INPUTS, ndim=4, device=dev, inner_contiguous=2)
    b, s, h, d = index_q.shape
    checks.check_tensor("index_k", index_k, dtype=index_q.dtype, shape=(b, None, None, d), device=dev,
                        inner_contiguous=1)
    g = index_k.shape[2]
    if g == 0 or h % g:
        raise ValueError(f"index_k: key groups G = {g} must divide the query heads H = {h}")
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"index_q: head dim must be a power of two in [16, 256], got {d}")
    if index_q.dtype == E4M3 and d < 32:
        raise ValueError(f"index_q: an fp8 head dim must be at least 32 (the fp8 dot's K step), got {d}")
    checks.check_tensor("weights", weights, dtype=torch.float32, shape=(s, h), device=dev)
    checks.check_tensor("cu_seqlen_ks", cu_seqlen_ks, dtype=torch.int32, shape=(s,), device=dev)
    checks.check_tensor("cu_seqlen_ke", cu_seqlen_ke, dtype=torch.int32, shape=(s,), device=dev)
    if index_k_scale is not None:
        checks.check_tensor("index_k_scale", index_k_scale, dtype=torch.float32, shape=(b, index_k.shape[1], g),
                            device=dev)
        if checks.validate_values(index_k_scale) and bool((index_k_scale < 0).any()):
            raise ValueError("index_k_scale: must be >= 0 (relu(σ·x) is computed as σ·relu(x))")


def with_config(config: IndexerConfig, poison: bool = False):
    """The public function pinned to ``config`` (tests and tuning); ``poison`` pre-fills the output with
    NaN so that an unwritten logit fails the check."""

    def run(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale=None, clean_logits=True):
        check_inputs(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale)
        shape = (*index_q.shape[:2], *index_k.shape[1:3])
        out = torch.full(shape, float("nan"), device=index_q.device) if poison else \
            torch.empty(shape, device=index_q.device)
        return launch(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale, bool(clean_logits), out,
                      config)

    return run


def fp8_lightning_indexer_fwd(
    index_q: torch.Tensor,
    index_k: torch.Tensor,
    weights: torch.Tensor,
    cu_seqlen_ks: torch.Tensor,
    cu_seqlen_ke: torch.Tensor,
    index_k_scale: torch.Tensor | None = None,
    clean_logits: bool = True,
) -> torch.Tensor:
    """DeepSeek-V3.2 lightning-indexer logits: ``Σ_h weights[s,h] · relu(σ[b,t,g] · <q[b,s,h], k[b,t,g]>)``.

    Args:
        index_q: ``[B, S, H, D]`` bfloat16 or float8_e4m3fn (no query scale); ``[H, D]`` contiguous;
            D a power of two in [16, 256] (fp8: at least 32).
        index_k: ``[B, S_kv, G, D]`` same dtype; head h reads key group ``h // (H / G)``.
        weights: ``[S, H]`` float32, shared by the batch (scaling lives here: no sm_scale).
        cu_seqlen_ks, cu_seqlen_ke: ``[S]`` int32: row s sees keys ``ks[s] <= t < ke[s]``
            (``ke <= ks``: none), shared by the batch.
        index_k_scale: optional ``[B, S_kv, G]`` float32 per-key multiplier σ >= 0 (fp8 keys).
        clean_logits: True writes −inf outside each window; False leaves those entries unspecified.

    Returns:
        ``[B, S, S_kv, G]`` float32 logits.

    Arithmetic: fp8 inputs use fp8 tensor-core dots, bf16 inputs bf16 tensor-core dots (no internal
    fp8 quantization, unlike TileOPs): products are exact, accumulation is fp32, so bf16 rows are exact
    up to fp32 summation order.

    Example::

        logits = fp8_lightning_indexer_fwd(q_fp8, k_fp8, weights, ks, ke, index_k_scale=k_scale)
    """
    check_inputs(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale)
    return _indexer(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale, bool(clean_logits))
