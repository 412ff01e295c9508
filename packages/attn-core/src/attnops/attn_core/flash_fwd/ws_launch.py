"""Host side of the Gluon warp-specialized flash forward (``ws_kernel.py``): tile configs, which calls it
serves, TMA descriptors over 2-D views of the packed tensors, the launch. ``launch.launch`` sends a call here
when ``default_config`` names a config (or a test / sweep forces one with ``launch.forced(config=WsConfig(...))``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from attnops.kernel_utils import runtime
from attnops.kernel_utils.attention_fns import LOG2E

from .ws_kernel import ROWS_PER_CONSUMER, gqa_fwd_ws_kernel

if TYPE_CHECKING:
    from .launch import Problem

BLOCK_M = 2 * ROWS_PER_CONSUMER.value  # two consumer warpgroups of 64 rows


@dataclass(frozen=True)
class WsConfig:
    block_n: int
    stages: int
    overlap: bool = False  # S of the next tile and P·V in flight during the softmax (ws_kernel._consumer)
    persistent: bool = True  # one program per SM walking the work tiles; False: one program per tile

    @property
    def name(self) -> str:
        return f"ws-n{self.block_n}s{self.stages}{'-ov' if self.overlap else ''}{'' if self.persistent else '-np'}"


# per head dim, the default first: K + V slots are STAGES · 2 · BLOCK_N · D · 2 bytes, the two Q buffers 64 KB at
# D = 128. D = 128 default: the 64-key tile with 3 slots and the overlap, the config benchmarked beside the peers
# on the H200 (2026-12-02 01:41, benchmarks/results/h200/20261202-0141-attn-core-ws.jsonl: 10-19 % under the
# Triton kernel on the q-lt-kv, long-w1024 and chunked-b8 rows). Next candidate: 4 slots (second), in the same
# call's sweep (20261202-0139-tune-ws.json) 1-4 % faster on 4 of those 5 rows and 1.3 % slower on one; not the
# default until a benchmark run has it. D = 64: the Triton kernel was 9-12 % faster on all four rows
# (20261202-0129-tune-ws.json): no default.
CONFIGS: dict[int, tuple[WsConfig, ...]] = {
    64: (WsConfig(128, 3), WsConfig(128, 3, persistent=False), WsConfig(128, 2), WsConfig(64, 4),
         WsConfig(128, 3, True)),
    128: (WsConfig(64, 3, True), WsConfig(64, 4, True), WsConfig(64, 3, True, persistent=False), WsConfig(128, 2),
          WsConfig(128, 2, True), WsConfig(64, 3)),
}
DEFAULT_HEAD_DIMS = (128,)
# a query block must visit at least this many keys: with fewer, the per-tile cost (Q load, pipeline fill, store)
# outweighs the overlap (2026-12-02: llama-8b-uniform and -short-w256, 512 keys, 9-10 % slower than the Triton
# kernel; every row of >= 1024 keys 10-19 % faster)
MIN_BLOCK_KEYS = 1024


def applies(p: Problem) -> bool:
    """Whether the kernel can serve the call: a Hopper GPU (not the interpreter), 16-bit q / k / v, D in
    ``CONFIGS``, no RoPE / sinks / softcap / lse output, q / k / v contiguous and out with one token stride
    (the 2-D TMA views), 16-byte aligned bases."""
    q, k, v, o = p.q, p.k, p.v, p.out
    if runtime.interpreting() or not runtime.is_hopper():
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if q.shape[-1] not in CONFIGS or o.dtype != q.dtype:
        return False
    if p.rope_cos is not None or p.sinks is not None or p.softcap or p.lse is not None:
        return False
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()) or o.stride(-1) != 1:
        return False
    if not p.varlen and o.stride(0) != o.shape[1] * o.stride(1):
        return False
    return all(t.data_ptr() % 16 == 0 for t in (q, k, v))


def default_config(p: Problem) -> WsConfig | None:
    """The config the call runs by default (``applies(p)`` holds), or None (the Triton kernel): D = 128 calls
    whose requests hold at least half a 128-row tile of queries, whose query blocks visit ``MIN_BLOCK_KEYS``
    keys or more, and whose work tiles fill the GPU once. Fewer tiles than SMs (qwen3-8b-chunked-prefill: 32)
    left most SMs idle: 33.9 us against the Triton kernel's 20.4."""
    d, h = p.q.shape[-1], p.q.shape[-2]
    if d not in DEFAULT_HEAD_DIMS or p.max_q < BLOCK_M // 2:
        return None
    if min(p.max_kv, p.wl + p.wr + BLOCK_M) < MIN_BLOCK_KEYS:  # the keys one query block visits at most
        return None
    if triton.cdiv(p.max_q, BLOCK_M) * p.batch * h < runtime.num_sms():
        return None
    return CONFIGS[d][0]


def smem_layout(block: list[int], dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for(block, gl.float16 if dtype == torch.float16 else gl.bfloat16)


def _desc(t2d: torch.Tensor, rows: int, d: int):
    return TensorDescriptor.from_tensor(t2d, [rows, d], smem_layout([rows, d], t2d.dtype))


def launch(p: Problem, cfg: WsConfig) -> None:
    """Run the call (``applies(p)`` holds) with ``cfg``."""
    q, k, v, o = p.q, p.k, p.v, p.out
    h, d = q.shape[-2], q.shape[-1]
    h_kv = k.shape[-2]
    rows_q = q.numel() // (h * d)
    if rows_q == 0 or p.batch == 0:
        return
    if k.numel() == 0:  # no keys anywhere (a TMA descriptor needs a non-empty tensor): every row is 0
        o.zero_()
        return
    n_m_blocks = triton.cdiv(max(p.max_q, 1), BLOCK_M)
    tiles = n_m_blocks * p.batch * h
    grid = (min(tiles, runtime.num_sms()) if cfg.persistent else tiles,)
    s_q, s_kv = (0, 0) if p.varlen else (q.shape[1], k.shape[1])
    stride_ot, stride_oh = (o.stride(0), o.stride(1)) if p.varlen else (o.stride(1), o.stride(2))
    dummy = q
    gqa_fwd_ws_kernel[grid](
        _desc(q.view(rows_q, h * d), ROWS_PER_CONSUMER.value, d), _desc(k.view(-1, h_kv * d), cfg.block_n, d),
        _desc(v.view(-1, h_kv * d), cfg.block_n, d), o, p.cu_q if p.varlen else dummy,
        p.cu_kv if p.varlen else dummy, s_q, s_kv, h, p.batch, n_m_blocks, h // h_kv, p.wl, p.wr,
        p.sm_scale * LOG2E, stride_ot, stride_oh,
        VARLEN=p.varlen, BLOCK_M=BLOCK_M, BLOCK_N=cfg.block_n, HEAD_DIM=d, STAGES=cfg.stages, OVERLAP=cfg.overlap,
        num_warps=4)
