"""Host side of GQABwd's warp-specialized kernels (``ws_kernel.py``: dK / dV, ``ws_dq_kernel.py``: dQ): their
configs, which calls they serve, TMA descriptors, the launches. ``launch.forced(config=WsBwdConfig(...))`` runs
the dK / dV kernel with the Triton kernel's dQ role beside it, or with ``gluon_dq`` the Gluon dQ kernel (tests and
sweeps); ``launch.ws_default`` says which calls take them by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from attnops.attn_core.flash_fwd.ws_launch import token_rows
from attnops.kernel_utils import runtime
from attnops.kernel_utils.attention_fns import LOG2E

from .ws_dq_kernel import BLOCK_N as DQ_KEYS
from .ws_dq_kernel import ROWS as DQ_ROWS
from .ws_dq_kernel import gqa_bwd_dq_ws_kernel
from .ws_kernel import KEYS_PER_CONSUMER, gqa_bwd_dkdv_ws_kernel

if TYPE_CHECKING:
    from .launch import Problem

BLOCK_KEYS = 2 * KEYS_PER_CONSUMER.value  # keys per dK / dV program: two consumer warpgroups
HEAD_DIMS = (64, 128)  # [64, D] fp32 dK and dV per consumer thread: 2 x D / 2 registers


def pair_rows(head_dim: int) -> int:
    """Query rows per (head, query block) pair: 64 at D = 64; 32 at D = 128, where [64, 64] fp32 Sᵀ / dPᵀ tiles
    beside dK and dV spilled (192-320 B, offline sm_90)."""
    return 64 if head_dim <= 64 else 32


@dataclass(frozen=True)
class WsBwdConfig:
    stages: int  # (Q_i, dO_i) pairs in flight in the dK / dV kernel, K / V tiles in the dQ kernel
    gluon_dq: bool = False  # dQ by the Gluon kernel (else the Triton kernel's dQ role)
    persistent: bool = False  # dK / dV programs, at most one per SM, each walking tiles (kernel: PERSISTENT)
    early_scores: bool = False  # both kernels issue the next scores before their last product's wait (EARLY_SCORES)

    def __post_init__(self):
        if self.early_scores and self.stages < 2:  # the next tile is waited for while this one holds its slot
            raise ValueError(f"WsBwdConfig: early_scores needs stages >= 2, got {self.stages}")

    @property
    def name(self) -> str:
        return (f"ws-{'' if self.gluon_dq else 'dkdv-'}s{self.stages}{'-p' if self.persistent else ''}"
                f"{'-e' if self.early_scores else ''}")


# ``ws-s3-p`` (attn-core 0.3.19): the persistent dK / dV kernel, for calls of many short tiles; ``ws-s3-p-e``
# (0.3.20) the same with early scores, the long MHA rows' default (``launch.WS_PERSISTENT_LONG``). ``ws-s3-e`` (early
# scores on the non-persistent default) was removed: level to 2.5 % slower on the GQA long rows (H100, 2026-12-06).
WS_CONFIGS = (WsBwdConfig(2), WsBwdConfig(3), WsBwdConfig(4), WsBwdConfig(2, True), WsBwdConfig(3, True),
              WsBwdConfig(3, True, persistent=True), WsBwdConfig(3, True, persistent=True, early_scores=True))


def refusal(p: Problem) -> str | None:
    """Why the kernels cannot serve a call, or None: D 64 / 128, 16-bit, q / dO / k / v readable as 2-D token rows,
    on a Hopper GPU. Their dQ is always the deterministic one (a separate dQ launch, Triton or Gluon): a call with
    deterministic=False, which permits atomics without asking for them, gets it too (``launch``)."""
    d = p.q.shape[-1]
    if d not in HEAD_DIMS:
        return f"needs D in {HEAD_DIMS}, got {d}"
    if p.q.dtype not in (torch.float16, torch.bfloat16):
        return f"needs float16 / bfloat16, got {p.q.dtype}"
    for name in ("q", "do", "k", "v"):
        t = getattr(p, name)
        if token_rows(t) is None or t.data_ptr() % 16:
            return f"{name}: strides {tuple(t.stride())} give no 2-D token-row view TMA can read"
    if runtime.interpreting() or not runtime.is_hopper():
        return "needs a Hopper GPU (TMA, wgmma, warp specialization; not the interpreter)"
    return None


def _desc(t: torch.Tensor, rows_per_box: int) -> TensorDescriptor:
    rows, stride = token_rows(t)
    d = t.shape[-1]
    box = [rows_per_box, d]
    dtype = gl.float16 if t.dtype == torch.float16 else gl.bfloat16
    return TensorDescriptor(t, [rows, t.shape[-2] * d], [stride, 1], box,
                            gl.NVMMASharedLayout.get_default_for(box, dtype))


def run(cfg: WsBwdConfig, p: Problem, delta: torch.Tensor, part: torch.Tensor | None = None,
        dq_stream: torch.cuda.Stream | None = None) -> None:
    """dK and dV of a ``refusal``-checked call (``delta``: the preprocess's ``[B, H, S_q]`` rows), and with
    ``gluon_dq`` dQ too. ``part`` (``[2, s, B·H_kv, S_kv, D]`` fp32, s > 1 dividing G): each program sums over G / s
    query heads and stores its unscaled partial sums there instead (the caller adds them: ``launch._head_sum``).
    ``dq_stream``: the dQ kernel runs there (``runtime.side_stream``: forked and joined by the caller)."""
    b, s_q, h, d = p.q.shape
    s_kv, h_kv = p.k.shape[1], p.k.shape[2]
    splits = 1 if part is None else part.shape[1]
    n_tiles = triton.cdiv(s_kv, BLOCK_KEYS) * b * h_kv * splits
    grid = (min(n_tiles, runtime.num_sms()) if cfg.persistent else n_tiles,)
    rows = pair_rows(d)
    gqa_bwd_dkdv_ws_kernel[grid](
        _desc(p.q, rows), _desc(p.do, rows), _desc(p.k, KEYS_PER_CONSUMER.value),
        _desc(p.v, KEYS_PER_CONSUMER.value), p.lse, delta, p.dk, p.dv, delta if part is None else part, n_tiles,
        s_q, s_kv, h_kv, h // h_kv, h // h_kv // splits, p.sm_scale * LOG2E, p.sm_scale, p.lse.stride(0),
        p.lse.stride(1), p.dk.stride(0), p.dk.stride(1), p.dk.stride(2), p.dv.stride(0), p.dv.stride(1),
        p.dv.stride(2), HEAD_DIM=d, BLOCK_M=rows, STAGES=cfg.stages, IS_CAUSAL=p.is_causal, PARTIAL=splits > 1,
        PERSISTENT=cfg.persistent, EARLY_SCORES=cfg.early_scores, num_warps=4)
    if cfg.gluon_dq:
        with runtime.on_stream(dq_stream):
            _run_dq(p, delta, cfg.stages, cfg.early_scores)


def _run_dq(p: Problem, delta: torch.Tensor, stages: int, early_scores: bool) -> None:
    """The Gluon dQ kernel on the current stream."""
    b, s_q, h, d = p.q.shape
    s_kv, h_kv = p.k.shape[1], p.k.shape[2]
    gqa_bwd_dq_ws_kernel[(triton.cdiv(s_q, 2 * DQ_ROWS.value) * b * h,)](
        _desc(p.q, DQ_ROWS.value), _desc(p.do, DQ_ROWS.value), _desc(p.k, DQ_KEYS.value),
        _desc(p.v, DQ_KEYS.value), p.lse, delta, p.dq, s_q, s_kv, h, h // h_kv, p.sm_scale * LOG2E, p.sm_scale,
        p.lse.stride(0), p.lse.stride(1), p.dq.stride(0), p.dq.stride(1), p.dq.stride(2),
        HEAD_DIM=d, STAGES=stages, IS_CAUSAL=p.is_causal, EARLY_SCORES=early_scores, num_warps=4)
