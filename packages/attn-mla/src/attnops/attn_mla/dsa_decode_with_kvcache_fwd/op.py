"""DSADecodeWithKVCacheFwd: checks, index preparation, launch, torch custom-op registration."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from attnops.kernel_utils import checks, runtime, testing

from . import ws_launch
from .kernel import dsa_decode_kernel, dsa_prepare_indices_kernel

_ACTIVATIONS = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class DSAConfig:
    block_h: int  # query heads per program (all read the same selected rows)
    block_n: int  # selected rows gathered per step
    num_warps: int
    num_stages: int


# Every config the op can pick; tests run each (GPU: full-size rows; CPU: shrunk rows).
CONFIGS = {
    # 64 heads × 64 gathered rows, 2 stages (224 KB shared with the rope tail, 200 KB without). Score dots
    # [4, 2]: 36 wgmma m64n32k16 per step (32 without a tail), none repeated; P·V 4 × m64n256k16. sm_90
    # compile: 255 regs, 0 B (tail) / 16 B (no tail, outside the loop) of spills (v2; v1 was 64 × 32 with
    # both warpgroups computing every score, 72 m64n16k16 per 32 rows).
    "h200": DSAConfig(block_h=64, block_n=64, num_warps=8, num_stages=2),
    "interpreter": DSAConfig(block_h=16, block_n=16, num_warps=4, num_stages=1),
}


def pick_config() -> DSAConfig:
    return CONFIGS["interpreter" if runtime.interpreting() else "h200"]


# The warp-specialized kernel (``ws_launch``) by default where it serves the call and the KV groups fill its
# 64-head blocks: on the H200 (2026-12-02) it passed its GPU tests and ran all 17 seed rows 7-16 % faster than
# the Triton kernel (benchmarks/results/h200/20261202-0610-attn-mla-dsa-ws.jsonl; docs/perf/attn-mla.md).
WS_DEFAULT = True


def default_config(q, kv, dim_tail: int) -> DSAConfig | ws_launch.WsConfig:
    """The config a call runs by default: ``ws_launch.default`` under ``WS_DEFAULT`` for whole 64-head blocks on a
    call the Gluon kernel serves, else the Triton kernel's ``pick_config()``."""
    group = q.shape[2] // max(kv.shape[2], 1)
    cfg = ws_launch.default(kv, dim_tail)
    if WS_DEFAULT and group % cfg.block_h == 0 and ws_launch.applies(q, kv, dim_tail, cfg):
        return cfg
    return pick_config()


def launch(q, kv, indices, out, *, dim_tail: int, stride_kv: int, q_start_index_s: int, sm_scale: float,
           is_causal: bool, config: DSAConfig | ws_launch.WsConfig) -> torch.Tensor:
    """Fill ``out`` ([B, S, H, D]); inputs already checked. A ``ws_launch.WsConfig`` runs the Gluon
    warp-specialized kernel (ValueError, before any launch, on a call it does not serve)."""
    b, s, h, width = q.shape
    s_kv, h_kv, k = kv.shape[1], kv.shape[2], indices.shape[3]
    d = width - dim_tail
    rows = b * s * h_kv
    ws = isinstance(config, ws_launch.WsConfig)
    refused = ws_launch.refusal(q, kv, dim_tail, config) if ws else None
    if refused:
        raise ValueError(f"config {config.name}: the warp-specialized kernel cannot serve this call: {refused}")
    if rows == 0 or h == 0:
        return out
    block_k = max(16, triton.next_power_of_2(k))
    clean = torch.empty((rows, block_k), dtype=torch.int32, device=q.device)
    count = torch.empty((rows,), dtype=torch.int32, device=q.device)
    dsa_prepare_indices_kernel[(rows,)](
        indices, clean, count,
        s, h_kv, s_kv, k, q_start_index_s, stride_kv,
        indices.stride(0), indices.stride(1), indices.stride(2),
        BLOCK_K=block_k, CAUSAL=is_causal, num_warps=4 if block_k <= 1024 else (8 if block_k <= 4096 else 16),
    )
    group = h // h_kv
    block_h = config.block_h if ws else min(config.block_h, max(16, triton.next_power_of_2(group)))
    head_blocks_per_kv = triton.cdiv(group, block_h)
    if ws:
        ws_launch.run(config, q, kv, clean, count, out, dim_tail, head_blocks_per_kv, sm_scale * LOG2E)
        return out
    dsa_decode_kernel[(head_blocks_per_kv, rows)](
        q, kv, clean, count, out,
        s, h_kv, group, head_blocks_per_kv, sm_scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        kv.stride(0), kv.stride(1), kv.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        D=d, TAIL=dim_tail, BLOCK_K=block_k, BLOCK_H=block_h, BLOCK_N=config.block_n,
        NUM_STAGES=config.num_stages, num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


@torch.library.custom_op("attnops::dsa_decode_with_kvcache_fwd", mutates_args=())
def _dsa_decode(
    q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, dim_tail: int, stride_kv: int, q_start_index_s: int,
    sm_scale: float, is_causal: bool,
) -> torch.Tensor:
    b, s, h, width = q.shape
    out = testing.kernel_buffer((b, s, h, width - dim_tail), q.dtype, q.device)
    return launch(q, kv, indices, out, dim_tail=dim_tail, stride_kv=stride_kv, q_start_index_s=q_start_index_s,
                  sm_scale=sm_scale, is_causal=is_causal, config=default_config(q, kv, dim_tail))


@_dsa_decode.register_fake
def _(q, kv, indices, dim_tail, stride_kv, q_start_index_s, sm_scale, is_causal):
    b, s, h, width = q.shape
    return q.new_empty((b, s, h, width - dim_tail))


def _int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return value


def resolve_params(q, dim_tail, stride_kv, q_start_index_s, sm_scale) -> tuple[int, float]:
    """Check the scalar parameters; returns (dim_tail, sm_scale) with their defaults filled in."""
    width = q.shape[-1]
    dim_tail = (width - 512 if width > 512 else 0) if dim_tail is None else _int("dim_tail", dim_tail)
    d = width - dim_tail
    if dim_tail < 0 or d < 16 or d > 1024 or d & (d - 1):
        raise ValueError(f"dim_tail: q width {width} − dim_tail {dim_tail} must be a power of two in [16, 1024]")
    if dim_tail and (dim_tail < 16 or dim_tail & (dim_tail - 1)):
        raise ValueError(f"dim_tail: must be 0 or a power of two >= 16, got {dim_tail}")
    stride_kv = _int("stride_kv", stride_kv)
    q_start = _int("q_start_index_s", q_start_index_s)
    if stride_kv < 1:
        raise ValueError(f"stride_kv: must be >= 1, got {stride_kv}")
    if not (q_start > stride_kv or (q_start == 0 and stride_kv == 1)):
        raise ValueError(f"q_start_index_s: must exceed stride_kv ({stride_kv}), or be 0 with stride_kv = 1; "
                         f"got {q_start}")
    if sm_scale is None:
        sm_scale = width**-0.5
    if not isinstance(sm_scale, (int, float)) or isinstance(sm_scale, bool) or not math.isfinite(sm_scale) \
            or sm_scale <= 0:
        raise ValueError(f"sm_scale: expected a positive finite float, got {sm_scale!r}")
    return dim_tail, float(sm_scale)


def check_inputs(q, kv, indices) -> None:
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=_ACTIVATIONS, ndim=4, device=dev, inner_contiguous=1)
    b, s, h, width = q.shape
    checks.check_tensor("kv", kv, dtype=q.dtype, shape=(b, None, None, width), device=dev, inner_contiguous=1)
    h_kv = kv.shape[2]
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"kv: KV heads H_kv = {h_kv} must divide the query heads H = {h}")
    checks.check_tensor("indices", indices, dtype=torch.int32, shape=(b, s, h_kv, None), device=dev,
                        inner_contiguous=1)
    if indices.shape[3] == 0 or indices.shape[3] > 16384:
        raise ValueError(f"indices: the number of slots K must lie in [1, 16384], got {indices.shape[3]}")


def with_config(config: DSAConfig | ws_launch.WsConfig, poison: bool = False):
    """The public function pinned to ``config`` (tests and tuning); ``poison`` pre-fills the output with
    NaN so that an unwritten element fails the check."""

    def run(q, kv, indices, *, q_start_index_s, stride_kv=1, dim_tail=None, sm_scale=None, is_causal=True):
        check_inputs(q, kv, indices)
        tail, scale = resolve_params(q, dim_tail, stride_kv, q_start_index_s, sm_scale)
        shape = (*q.shape[:3], q.shape[3] - tail)
        out = torch.full(shape, float("nan"), dtype=q.dtype, device=q.device) if poison else \
            torch.empty(shape, dtype=q.dtype, device=q.device)
        return launch(q, kv, indices, out, dim_tail=tail, stride_kv=stride_kv, q_start_index_s=q_start_index_s,
                      sm_scale=scale, is_causal=bool(is_causal), config=config)

    return run


def dsa_decode_with_kvcache_fwd(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    *,
    q_start_index_s: int,
    stride_kv: int = 1,
    dim_tail: int | None = None,
    sm_scale: float | None = None,
    is_causal: bool = True,
) -> torch.Tensor:
    """DeepSeek sparse attention (V3.2 DSA): each query row attends to the KV rows its indices select.

    Args:
        q: ``[B, S, H, D + dim_tail]`` float16 / bfloat16; last dim contiguous.
        kv: ``[B, S_kv, H_kv, D + dim_tail]`` same dtype: keys are the full width, values the first D
            channels; last dim contiguous.
        indices: ``[B, S, H_kv, K]`` int32 selected KV rows per query row and KV head (query head h uses
            KV head ``h // (H / H_kv)``). A slot selects row j when ``0 <= j < S_kv`` and, if causal,
            ``(j + 1)·stride_kv − 1 <= q_start_index_s + s``; anything else (the pad ``S_kv``, −1, future
            rows) selects nothing; repeated slots count once.
        q_start_index_s: absolute token position of query row 0; must exceed ``stride_kv``, or be 0 with
            ``stride_kv = 1``.
        stride_kv: tokens per KV row (1 on every seed row).
        dim_tail: rope tail width; None = ``width − 512`` when the width exceeds 512, else 0.
        sm_scale: None = ``(D + dim_tail) ** −0.5``.
        is_causal: False drops the causal filter (index validity only, FlashMLA sparse convention).

    Returns:
        ``[B, S, H, D]`` in q's dtype; a row with no valid slot is zeros. No lse.

    Example::

        o = dsa_decode_with_kvcache_fwd(q, kv, topk_idx, q_start_index_s=kv.shape[1] - q.shape[1])
    """
    check_inputs(q, kv, indices)
    dim_tail, sm_scale = resolve_params(q, dim_tail, stride_kv, q_start_index_s, sm_scale)
    return _dsa_decode(q, kv, indices, dim_tail, stride_kv, q_start_index_s, sm_scale, bool(is_causal))
