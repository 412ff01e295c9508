"""Host side of the experimental Gluon warp-specialized flash forward (``ws_kernel.py``): tile configs, TMA
descriptors over 2-D views of the packed tensors, the launch. Hopper only; no default path calls it (the GPU
tests and ``benchmarks/tune_attn_core.py --ws`` do)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from attnops.kernel_utils import checks
from attnops.kernel_utils.attention_fns import LOG2E

from .ws_kernel import ROWS_PER_CONSUMER, gqa_fwd_ws_kernel

BLOCK_M = 2 * ROWS_PER_CONSUMER.value  # two consumer warpgroups of 64 rows


@dataclass(frozen=True)
class WsConfig:
    block_n: int
    stages: int
    overlap: bool = False  # S of the next tile and P·V in flight during the softmax (ws_kernel._consumer)

    @property
    def name(self) -> str:
        return f"ws-n{self.block_n}s{self.stages}{'-ov' if self.overlap else ''}"


# per head dim, the default first: K + V slots are STAGES · 2 · BLOCK_N · D · 2 bytes, Q 32 KB at D = 128
CONFIGS: dict[int, tuple[WsConfig, ...]] = {
    64: (WsConfig(128, 3), WsConfig(128, 2), WsConfig(64, 4), WsConfig(128, 3, True)),
    128: (WsConfig(128, 2), WsConfig(64, 3), WsConfig(128, 3), WsConfig(128, 2, True), WsConfig(64, 3, True)),
}


def smem_layout(block: list[int], dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for(block, gl.float16 if dtype == torch.float16 else gl.bfloat16)


def _desc(t2d: torch.Tensor, rows: int, d: int):
    return TensorDescriptor.from_tensor(t2d, [rows, d], smem_layout([rows, d], t2d.dtype))


def gqa_fwd_ws(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
               cu_seqlens_kv: torch.Tensor, max_seqlen_q: int, *, is_causal: bool = True,
               sm_scale: float | None = None, config: WsConfig | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """``q`` [T_q, H, D], ``k`` / ``v`` [T_kv, H_kv, D] (contiguous, fp16 / bf16, D in 64 / 128), int32
    cu_seqlens; bottom-right causal or no mask. Returns ``out`` [T_q, H, D]."""
    _16bit = (torch.float16, torch.bfloat16)
    checks.check_tensor("q", q, dtype=_16bit, ndim=3, device=torch.device("cuda"), inner_contiguous=3)
    t_q, h, d = q.shape
    if d not in CONFIGS:
        raise ValueError(f"q: head dim {d} not supported by the warp-specialized kernel (64 or 128)")
    checks.check_tensor("k", k, dtype=q.dtype, shape=(None, None, d), device=q.device, inner_contiguous=3)
    checks.check_tensor("v", v, dtype=q.dtype, shape=tuple(k.shape), device=q.device, inner_contiguous=3)
    h_kv = k.shape[1]
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"q: {h} heads is not a multiple of k's {h_kv}")
    checks.check_tensor("cu_seqlens_q", cu_seqlens_q, dtype=torch.int32, ndim=1, device=q.device)
    checks.check_tensor("cu_seqlens_kv", cu_seqlens_kv, dtype=torch.int32, shape=tuple(cu_seqlens_q.shape),
                        device=q.device)
    if out is not None:
        checks.check_tensor("out", out, dtype=q.dtype, shape=tuple(q.shape), device=q.device, inner_contiguous=1)
    cfg = config or CONFIGS[d][0]
    out = torch.empty_like(q) if out is None else out
    scale = (1.0 / math.sqrt(d) if sm_scale is None else sm_scale) * LOG2E
    batch = cu_seqlens_q.shape[0] - 1
    if t_q == 0 or batch == 0:
        return out
    if k.shape[0] == 0:  # no keys anywhere (a TMA descriptor needs a non-empty tensor): every row is 0
        return out.zero_()
    grid = (triton.cdiv(max(max_seqlen_q, 1), BLOCK_M), h, batch)
    gqa_fwd_ws_kernel[grid](
        _desc(q.view(t_q, h * d), ROWS_PER_CONSUMER.value, d), _desc(k.view(-1, h_kv * d), cfg.block_n, d),
        _desc(v.view(-1, h_kv * d), cfg.block_n, d), out, cu_seqlens_q, cu_seqlens_kv, scale, h // h_kv,
        out.stride(0), out.stride(1),
        CAUSAL=is_causal, BLOCK_M=BLOCK_M, BLOCK_N=cfg.block_n, HEAD_DIM=d, STAGES=cfg.stages, OVERLAP=cfg.overlap,
        num_warps=4)
    return out
