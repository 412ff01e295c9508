"""Host side of the Gluon warp-specialized flash forward (``ws_kernel.py``): tile configs, which calls it
serves, TMA descriptors over 2-D views of the packed tensors, the launch. ``launch.launch`` sends a call here
when ``default_config`` names a config (or a test / sweep forces one with ``launch.forced(config=WsConfig(...))``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.attention_fns import LOG2E
from attnops.kernel_utils.cast import scaled_cast
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.split_combine import combine_splits

from . import ws_kernel
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
    pingpong: bool = False  # (overlap configs) the consumers issue their wgmmas in turns (FA3's scheduler barrier)
    # dense / varlen tile order (ws_kernel._tile): request-major (the order the 01:41 benchmark ran); True:
    # block-major where every request is as long as the longest (faster there in the 01:29 sweep of the one-Q-buffer
    # kernel: llama-8b-uniform 41.5 against 48.5 us, long-w1024 270 against 281)
    block_major: bool = False
    # varlen requests of unequal lengths: most keys first (sorted in the kernel, ws_kernel._sort_requests), rounds
    # in alternate directions (up to MAX_SORTED_REQUESTS requests; more keep the index order)
    lpt: bool = False
    # the G query heads of a KV head in one work tile (rows = (token, head), ``pack``), where G divides 64: a decode
    # request's G rows share one tile instead of filling G tiles with one row each (attn-core 0.3.18; the paged
    # D = 128 mixed-batch default since 0.3.19: gqa_paged_fwd.plan.PACKED_MERGE_DEFAULTS)
    pack_gqa: bool = False
    # the consumers free K / V slots one arrival per thread, without the warpgroup barrier Triton puts before a
    # single thread's arrival (``kernel_utils.gluon_fns.release``; twins below)
    thread_release: bool = False
    # each K / V slot freed in two halves: K as soon as both consumers' scores of it are done, V after their P·V
    # (``ws_kernel`` ``K_EARLY``, FA3's separate K / V pipelines): with 2 slots the loader no longer waits for the
    # P·V of the tile two back before it loads the next K (twins below)
    early_k_release: bool = False
    # the first q_registers columns of each consumer's Q tile in registers, the score wgmmas' A operand there
    # (``ws_kernel`` ``Q_REGS``; twins below; 0: Q in shared memory): those wgmmas then read only K's slice
    # from shared memory. The count behind it (one SM, both consumers, one key tile): the D = 128 default's 64-key
    # tile takes ~1024 clocks of wgmmas against 128 KB of shared-memory traffic (each score wgmma re-reading Q,
    # 2 x 16 KB; K and V read by both consumers, 64 KB; their TMA writes, 32 KB): 125 B a clock against the port's
    # 128. Q wholly in registers leaves 96 KB. A D = 256 32-key tile: 160 KB in ~1024 clocks (156 B a clock: at
    # most 82 % of the tensor rate; measured 502 TF/s against FA3's 635); its first 128 columns in registers
    # leave 128 KB. 16-bit calls only (fp8 calls keep Q in shared memory); a multiple of 64 (a 128-byte swizzle
    # atom) whose rest of HEAD_DIM is a power of two; 16 registers a thread per 64 columns.
    q_registers: int = 0
    # (overlap configs) O rescaled only after a key tile that moved some row's reference max by more than
    # ``gluon_fns.RESCALE_SLACK`` (``ws_kernel`` ``LAZY_RESCALE``; attn-mla's lazy rescale): the [64, D] fp32
    # multiply, D / 2 FMULs a thread, skipped on most tiles for a cross-warp max of one flag a row; not over paged
    # key tiles loaded in small copies (``lazy_rescale_applies``)
    lazy_rescale: bool = False

    def __post_init__(self):
        if self.q_registers % 64:
            raise ValueError(f"WsConfig: q_registers must be a multiple of 64 columns, got {self.q_registers}")
        if (self.pingpong or self.early_k_release or self.lazy_rescale) and not self.overlap:
            raise ValueError(f"WsConfig: pingpong, early_k_release and lazy_rescale run the overlap configs "
                             f"(overlap=True), got block_n={self.block_n}, stages={self.stages}, "
                             f"pingpong={self.pingpong}, early_k_release={self.early_k_release}, "
                             f"lazy_rescale={self.lazy_rescale}")

    @property
    def name(self) -> str:
        return (f"ws-n{self.block_n}s{self.stages}{'-ov' if self.overlap else ''}{'' if self.persistent else '-np'}"
                f"{'-pp' if self.pingpong else ''}{'-bm' if self.block_major else ''}{'-lpt' if self.lpt else ''}"
                f"{'-pk' if self.pack_gqa else ''}{'-t' if self.thread_release else ''}"
                f"{'-kr' if self.early_k_release else ''}{f'-qr{self.q_registers}' if self.q_registers else ''}"
                f"{'-l' if self.lazy_rescale else ''}")


# per head dim, the default first: K + V slots are STAGES · 2 · BLOCK_N · D · 2 bytes, the two Q buffers 64 KB at
# D = 128. D = 128 default (2026-12-02 03:30 sweep, benchmarks/results/h200/20261202-0330-tune-ws.json): the 64-key
# tile with 3 slots and the overlap in block-major order where every request is as long as the longest (llama-8b-
# uniform 46.3 against 54.5 us request-major and 50.4 for the Triton kernel; long-w1024 290.8 / 556.6 against
# 306.1 / 571.1) and with the requests sorted by keys where they are not (llama-8b / 70b-q-lt-kv 54.5 / 106.0 against
# 58.4 / 111.8); the two knobs never apply together (``launch``). The paged layout's default is the first of
# ``paged_configs`` (request-major, plan order). D = 64: the Triton kernel was 9-12 % faster on all four rows
# (20261202-0129-tune-ws.json): no default.
CONFIGS: dict[int, tuple[WsConfig, ...]] = {
    64: (WsConfig(128, 3), WsConfig(128, 3, persistent=False), WsConfig(128, 2), WsConfig(64, 4),
         WsConfig(128, 3, True), WsConfig(128, 3, True, pingpong=True),
         # the paged D = 64 config packed (gpt-oss's G = 8): on the H200 (2026-12-03) gpt-oss-sink-mixed 18.2 us
         # packed and merged against the Triton tile's 13.8 (its blocks visit too few keys)
         WsConfig(128, 3, True, pack_gqa=True)),
    128: (WsConfig(64, 3, True, block_major=True, lpt=True), WsConfig(64, 3, True), WsConfig(64, 4, True),
          WsConfig(64, 3, True, persistent=False), WsConfig(128, 2), WsConfig(128, 2, True), WsConfig(64, 3),
          WsConfig(64, 3, True, pingpong=True),
          WsConfig(64, 4, True, pingpong=True), WsConfig(64, 3, True, block_major=True),
          WsConfig(64, 3, True, lpt=True),
          # the default's order knobs with 4 slots (H200 2026-12-03: within 2 % of the default on the w256 / fp8 rows)
          WsConfig(64, 4, True, block_major=True, lpt=True),
          # the G heads of a KV head in one tile (``pack_gqa``): the paged mixed-batch default
          # (``gqa_paged_fwd.plan.PACKED_MERGE_DEFAULTS``) and the 16-bit default's twin (H100 2026-12-06: -3 to +13 %)
          WsConfig(64, 3, True, pack_gqa=True), WsConfig(64, 3, True, block_major=True, lpt=True, pack_gqa=True),
          # the dense / varlen and paged defaults with per-thread slot releases (``thread_release``; H100 2026-12-06:
          # -3 to +5 % against the dense / varlen default)
          WsConfig(64, 3, True, block_major=True, lpt=True, thread_release=True),
          WsConfig(64, 3, True, thread_release=True),
          # K freed before V (``early_k_release``): the 2-slot 128-key tile (eager form of the long-block and paged
          # default, ``LONG_BLOCK_DEFAULT``), and the dense / varlen default's twin (H100 2026-12-06: -4 to +0 %)
          WsConfig(128, 2, True, early_k_release=True),
          WsConfig(64, 3, True, block_major=True, lpt=True, early_k_release=True),
          # Q in registers (``q_registers``): the dense / varlen and paged defaults' twins (H100 2026-12-06: -2 to +1 %)
          WsConfig(64, 3, True, block_major=True, lpt=True, q_registers=128), WsConfig(64, 3, True, q_registers=128),
          # the lazy rescale (``lazy_rescale``): the long-block and paged default (since attn-core 0.3.20; its eager
          # form ``ws-n128s2-ov-kr`` is above), that one with per-thread slot releases (the flag's cross-warp max
          # brings barriers of its own; 0-1.5 % faster than the default on the H100 rows of ``LONG_BLOCK_DEFAULT`` /
          # ``PAGED_DEFAULTS``, within a run's noise), and the dense / varlen default's (llama-8b-uniform 36.0 against
          # 34.9)
          WsConfig(128, 2, True, early_k_release=True, lazy_rescale=True),
          WsConfig(128, 2, True, thread_release=True, early_k_release=True, lazy_rescale=True),
          WsConfig(64, 3, True, block_major=True, lpt=True, lazy_rescale=True)),
    # D = 256 (one Q buffer; the prefill op's D 256 rows; the paged default is ``ws-n64s2-ov-kr``, below)
    256: (WsConfig(32, 3, True), WsConfig(32, 4, True), WsConfig(64, 2, True), WsConfig(64, 2),
          WsConfig(32, 3, True, pingpong=True),
          # per-thread slot releases (H200 2026-12-05, qwen35-9b-rope: 18.63 against its twin's 18.99 ms)
          WsConfig(32, 4, True, thread_release=True),
          # the 64-key tile with K freed before V, the paged D = 256 default since the H100's 2026-12-06 sweep (H200
          # qwen35-9b-rope 14.38 against 18.24 ms for the pingpong tile): its score wgmmas (m64n64k16, 4 KB of
          # shared-memory operands per 32 clocks) fit the 128 B / clock shared-memory port where the 32-key tiles' (3 KB
          # per 16) do not; without the early K release its 2 slots starved on the joint K / V release
          WsConfig(64, 2, True, early_k_release=True), WsConfig(64, 2, True, pingpong=True, early_k_release=True),
          # half of Q in registers (all of it, 64 registers a thread beside the accumulator's 128, made ptxas spill
          # 160-1060 B and serialize the wgmmas, offline sm_90 2026-12-05): the 32-key 4-slot and pingpong tiles' twins,
          # and the 64-key tile's with K freed first; on the H200 (2026-12-05, qwen35-9b-rope) slower or level
          WsConfig(32, 4, True, q_registers=128), WsConfig(32, 3, True, pingpong=True, q_registers=128),
          WsConfig(64, 2, True, early_k_release=True, q_registers=128)),
}
DEFAULT_HEAD_DIMS = (128,)
# fp8 q / k with requests of unequal lengths: the 128-key tile with 2 slots and the overlap (2026-12-03 sweep, every
# config checked, benchmarks/results/h200/20261203-1510-tune-ws-fp8.json: llama-70b-fp8-q-lt-kv 98.0 against 102.4
# us for the 16-bit default's order knobs, qwen3-fp8-ragged 128.7 against 149.1; the 16-bit rows never gained from
# it: an fp8 K tile is half as large). Requests of one length keep the default (block-major: llama-8b-fp8 47.3
# against 54.8).
FP8_RAGGED_DEFAULT = WsConfig(128, 2, True)
# 16-bit calls whose query blocks visit LONG_BLOCK_KEYS keys or more: the 128-key 2-slot tile with K freed before V,
# as the paged D = 128 default (H100 2026-12-06, benchmarks/results/h100/20261206-0355-tune-fwd-kr.json, us):
# llama-8b / 70b-q-lt-kv (1536-key blocks) 47.6 / 89.2 against 49.5 / 97.5, llama-8b / 70b-long-w1024 (1152)
# 234.0 / 437.3 against 250.4 / 467.1, qwen3-8b-chunked-b8 (2048) 70.8 / 68.0 against 69.9 / 69.2 in two sweeps;
# with 512-key blocks it lost (llama-8b-uniform 41.3 against 35.2: too few tiles of 128 keys to fill its ring).
# Since attn-core 0.3.20 with the lazy rescale (``lazy_rescale``; H100 2026-12-06, benchmarks/results/h100/
# 20261206-10*-tune-*-lazy*.json, two runs, us, eager / lazy): llama-70b-q-lt-kv 90.0 / 86.0 and 87.0 / 85.8,
# llama-8b / 70b-long-w1024 234.1 / 234.4, 439.1 / 436.8.
LONG_BLOCK_DEFAULT = WsConfig(128, 2, True, early_k_release=True, lazy_rescale=True)
LONG_BLOCK_KEYS = 1024
# a query block must visit at least this many keys: with fewer, the per-tile cost (Q load, pipeline fill, store)
# outweighs the overlap (2026-12-02 03:30: the 384-key blocks of llama-8b / 70b-short-w256 45.7 / 84.7 us against
# the Triton kernel's 46.4 / 83.9; the 512-key blocks of llama-8b-uniform 46.3 against 50.4 in block-major order)
MIN_BLOCK_KEYS = 512


def token_rows(t: torch.Tensor) -> tuple[int, int] | None:
    """``(rows, row stride)`` of ``t`` (``[T, heads, D]``, or ``[B, S, heads, D]`` / pools ``[pages, PS, heads,
    D]``) seen as one row of ``heads·D`` elements per token, the 2-D view its TMA descriptors read; None where no
    such view exists: heads not packed in a row, the two leading dims not one token axis, a row stride that is
    not 16-byte aligned (TMA's rule). Rows may be spaced wider than ``heads·D``: q / k / v split from one fused
    qkv buffer are served as they are."""
    d, heads = t.shape[-1], t.shape[-2]
    if t.stride(-1) != 1 or (heads > 1 and t.stride(-2) != d):
        return None
    if t.dim() == 3:
        rows, stride = t.shape[0], t.stride(0)
    elif t.dim() == 4 and t.shape[1] == 1:
        rows, stride = t.shape[0], t.stride(0)
    elif t.dim() == 4 and (t.shape[0] == 1 or t.stride(0) == t.shape[1] * t.stride(1)):
        rows, stride = t.shape[0] * t.shape[1], t.stride(1)
    else:
        return None
    if rows <= 1:  # (one row: its stride is never used)
        return rows, heads * d
    if stride < heads * d or stride * t.element_size() % 16:
        return None
    return rows, stride


def _tensors_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> bool:
    """A Hopper GPU (not the interpreter), 16-bit q / k / v / out of one dtype or e4m3 q / k / v with a 16-bit out,
    D in ``CONFIGS``, q / k / v with ``token_rows`` views, out's last dim contiguous, 16-byte aligned bases."""
    if runtime.interpreting() or not runtime.is_hopper():
        return False
    sixteen = (torch.float16, torch.bfloat16)
    if q.dtype == E4M3:
        if any(t.dtype != E4M3 for t in (k, v)) or o.dtype not in sixteen:
            return False
    elif q.dtype not in sixteen or any(t.dtype != q.dtype for t in (k, v, o)):
        return False
    if q.shape[-1] not in CONFIGS or any(token_rows(t) is None for t in (q, k, v)):
        return False
    return o.stride(-1) == 1 and all(t.data_ptr() % 16 == 0 for t in (q, k, v))


def applies(p: Problem) -> bool:
    """Whether the kernel can serve a dense / varlen call: ``_tensors_ok``, no RoPE / lse output, dense out with
    one token stride (softcap and sinks: yes)."""
    if not _tensors_ok(p.q, p.k, p.v, p.out):
        return False
    if p.rope_cos is not None or p.lse is not None:
        return False
    return p.varlen or p.out.stride(0) == p.out.shape[1] * p.out.stride(1)


SMEM_LIMIT = 227 * 1024  # shared memory one program may use on sm_90
# The lazy rescale over paged key tiles loaded in copies of fewer rows (pages of 16 / 32 / 48 tokens at 128-key
# tiles) was 7 % slower than the eager one on the H100 (qwen3-ragged-odd's shape at 48-token pages, f16 and bf16,
# 2026-12-06; 1-2 % faster at 64): those launches keep the eager rescale. (Why is open: their lazy builds spill
# 52-144 B more, offline sm_90, but only values reloaded once a work tile, none inside a key loop.)
LAZY_MIN_COPY_ROWS = 64
MAX_SORTED_REQUESTS = 256  # the in-kernel sort's comparisons: SORT_B x 32 per step on 128 threads
MIN_KV_BOX = 8  # rows of the smallest paged K / V copy: 8 rows of >= 128 B fill a 1 KB 128-byte-swizzle atom


def q_buffers(head_dim: int) -> int:
    """Q buffers of two 64-row tiles: two (the next tile's Q loads during this one) up to D = 128, one at 256."""
    return 2 if head_dim <= 128 else 1


def smem_bytes(cfg: WsConfig, head_dim: int, last_v_copies: bool) -> int:
    """The Q buffers, the K / V ring, and with ``last_v_copies`` (paged) each consumer's last-V buffer."""
    rows = 2 * ROWS_PER_CONSUMER.value * q_buffers(head_dim) + 2 * cfg.stages * cfg.block_n
    return (rows + (2 * cfg.block_n if last_v_copies else 0)) * head_dim * 2


def tail_in_place(cfg: WsConfig, head_dim: int) -> bool:
    """Whether the paged kernel zeroes its last V tile's rows past the keys in the ring slot (``TAIL_IN_PLACE``):
    where the two per-consumer buffers would not fit beside the ring (D = 256 ws-n64s2-ov, D = 128
    ws-n128s2-ov)."""
    return smem_bytes(cfg, head_dim, True) > SMEM_LIMIT


def paged_configs(head_dim: int) -> tuple[WsConfig, ...]:
    """The configs ``launch_paged`` takes at this head dim: overlap configs whose buffers fit, with the last-V
    buffers or zeroing in place (the tile order knobs aside: paged work comes in the plan's order)."""
    return tuple(c for c in CONFIGS.get(head_dim, ())
                 if c.overlap and not (c.block_major or c.lpt) and smem_bytes(c, head_dim, False) <= SMEM_LIMIT)


# The paged layout's default per head dim, where the plan's rule (``worth_it``) takes the large class (2026-12-02
# 03:50 sweep beside the Triton paged kernel, outputs checked at full size: benchmarks/results/h200/
# 20261202-0350-tune-ws-paged.json): D = 64 falcon-7b 191.6 against 314.2 us. D = 128 and 256: the tile with K freed
# before V (``-kr``), whose score wgmmas read 96 B a clock of shared memory against the port's 128 (the 64-key D =
# 128 and 32-key D = 256 tiles overran it, docs/perf/attn-core.md); each variant checked, one run per GPU. D = 128,
# ``ws-n128s2-ov-kr`` against ``ws-n64s3-ov``, H100 2026-12-06 (benchmarks/results/h100/20261206-0215-tune-paged-kr.
# json, 20261206-0235-tune-paged-kr.json): llama-8b 430 / 469 us, llama-8b-rope prefill 516 / 564, starcoder 356 /
# 404, serving-step 283 / 295, qwen3-ragged-odd 179 / 184. D = 256, ``ws-n64s2-ov-kr`` against ``ws-n32s4-ov``: H200
# qwen35-9b-rope 14.38 / 18.24 ms (benchmarks/results/h200/20261205-0247-tune-qwen35-kr.json); H100 qwen35-9b-mixed
# 4.84 / 6.65 ms, gemma-2b 119 / 155 us (benchmarks/results/h100/20261206-0215-tune-ws-tail.json). Both rings leave
# no room for the last-V buffers: they zero in place.
# D = 128 since attn-core 0.3.20 with the lazy rescale where its tiles load in copies of 64 rows or more
# (``lazy_rescale_applies``; H100 2026-12-06, benchmarks/results/h100/20261206-10*-tune-paged-lazy*.json and
# -1009-probe-lazy-page.json, us, eager / lazy): llama-8b 425.4 / 420.8, serving-step 282.9 / 274.1 and 279.0 / 275.2,
# starcoder 351.2 / 342.6 and 358.1 / 347.9, llama-8b-rope prefill-op 515.5 / 508.9, GQAPagedFwd llama-8b-rope-prefill
# 310.6 / 309.3; qwen3-ragged-odd's shape at 64-token pages 171.5 / 170.2 (f16), 170.3 / 168.6 (bf16); at its own
# 48-token pages 181.5 / 193.4 and 178.8 / 190.9: hence the rule. D = 256: the lazy build spills (80 B, offline).
PAGED_DEFAULTS: dict[int, WsConfig] = {64: WsConfig(128, 3, True),
                                       128: WsConfig(128, 2, True, early_k_release=True, lazy_rescale=True),
                                       256: WsConfig(64, 2, True, early_k_release=True)}


def paged_applies(cfg: WsConfig, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, o: torch.Tensor,
                  page_size: int, plain: bool) -> bool:
    """Whether ``launch_paged`` can serve a paged call with ``cfg``: one of ``paged_configs``, ``_tensors_ok`` on
    the pools, ``plain`` (no RoPE of queries or cached keys, no fp8 scales), and key tiles that split into
    page-aligned copies of at least ``MIN_KV_BOX`` rows (whole 1 KB swizzle atoms); packed configs: each token's
    heads contiguous (the plan counted packed blocks)."""
    if not (plain and math.gcd(page_size, cfg.block_n) >= MIN_KV_BOX and cfg in paged_configs(q.shape[-1])):
        return False
    if pack(cfg, q, k_pool) != heads_per_tile(cfg, q.shape[-2] // k_pool.shape[-2]):
        return False
    return _tensors_ok(q, k_pool, v_pool, o)


def worth_it(max_q: int, block_keys: int, tiles: int) -> bool:
    """The default rule (shapes only; the head dim has a default config): requests of at least half a 128-row
    tile of queries, query blocks visiting ``MIN_BLOCK_KEYS`` keys or more (``block_keys``: at most), work tiles
    for 7 / 8 of the SMs or more. Fewer tiles left most SMs idle (dense qwen3-8b-chunked-prefill, 32 tiles: 33.9 us
    against the Triton kernel's 20.4); paged gemma-2b's 128 tiles on 132 SMs: 154.8 against 325.3."""
    return max_q >= BLOCK_M // 2 and block_keys >= MIN_BLOCK_KEYS and 8 * tiles >= 7 * runtime.num_sms()


def uniform_lengths(p: Problem) -> bool:
    """Every request as long as the longest (known without reading the lengths: the totals are B times the
    maxima); dense calls always."""
    return not p.varlen or (p.q.shape[0] == p.batch * p.max_q and p.k.shape[0] == p.batch * p.max_kv)


def default_config(p: Problem) -> WsConfig | None:
    """The config a dense / varlen call (``applies(p)`` holds) runs by default, or None (the Triton kernel):
    16-bit calls whose query blocks visit ``LONG_BLOCK_KEYS`` keys or more take ``LONG_BLOCK_DEFAULT``. Softcap,
    sinks and strided q / k / v (fused qkv views) stay on the Triton kernel until an H200 run has the
    warp-specialized one with them (written 2026-12-02 after the last device call)."""
    if p.softcap or p.sinks is not None or not all(t.is_contiguous() for t in (p.q, p.k, p.v)):
        return None
    d, h = p.q.shape[-1], p.q.shape[-2]
    if d not in DEFAULT_HEAD_DIMS:
        return None
    tiles = triton.cdiv(p.max_q, BLOCK_M) * p.batch * h
    block_keys = min(p.max_kv, p.wl + p.wr + BLOCK_M)
    if not worth_it(p.max_q, block_keys, tiles):
        return None
    if p.q.dtype == E4M3:
        return CONFIGS[d][0] if uniform_lengths(p) else FP8_RAGGED_DEFAULT
    return LONG_BLOCK_DEFAULT if block_keys >= LONG_BLOCK_KEYS else CONFIGS[d][0]


GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, E4M3: gl.float8e4nv}


def smem_layout(block: list[int], dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for(block, GL_DTYPES[dtype])


def _desc(t: torch.Tensor, tile_rows: int, box_rows: int | None = None):
    """A TMA descriptor over ``t``'s ``token_rows`` view: ``[box_rows, D]`` boxes (default ``tile_rows``) into
    shared tiles of ``[tile_rows, D]``."""
    rows, stride = token_rows(t)
    d = t.shape[-1]
    return TensorDescriptor(t, [rows, t.shape[-2] * d], [stride, 1], [box_rows or tile_rows, d],
                            smem_layout([tile_rows, d], t.dtype))


def heads_per_tile(cfg: WsConfig, group: int) -> int:
    """Query heads per work tile: G with ``cfg.pack_gqa`` where G > 1 divides 64 (a consumer's rows hold whole
    tokens), else 1."""
    return group if cfg.pack_gqa and group > 1 and ROWS_PER_CONSUMER.value % group == 0 else 1


def pack(cfg: WsConfig, q: torch.Tensor, k: torch.Tensor) -> int:
    """``heads_per_tile`` of the call, 1 where a token's heads are not contiguous rows of D (the 3-D Q descriptor;
    ``paged_applies`` refuses such paged calls, whose plan counted packed blocks)."""
    return heads_per_tile(cfg, q.shape[-2] // k.shape[-2]) if q.stride(-2) == q.shape[-1] else 1


def block_tokens(cfg: WsConfig, q: torch.Tensor, k: torch.Tensor) -> int:
    """Query tokens per work tile's block: ``BLOCK_M`` rows of ``pack`` heads each."""
    return BLOCK_M // pack(cfg, q, k)


def _packed_q_desc(q: torch.Tensor, heads_per_tile: int):
    """q as ``[tokens, H, D]`` in ``[64 / G, G, D]`` boxes: 64 rows of (token, head) per consumer tile."""
    rows, stride = token_rows(q)
    h, d = q.shape[-2], q.shape[-1]
    box = [ROWS_PER_CONSUMER.value // heads_per_tile, heads_per_tile, d]
    return TensorDescriptor(q, [rows, h, d], [stride, d, 1], box, smem_layout(box, q.dtype))


@dataclass(frozen=True)
class PagedSplits:
    """The split query blocks of a paged launch (``gqa_paged_fwd.plan``'s tail splits): every item of such a block
    computes its share of the block's key tiles for every query head (``ws_kernel._round_work``) into the
    workspace, and ``split_combine`` merges the shares into the output. Only whole blocks (``BLOCK_M`` query tokens
    inside their request) are split, so the combine writes every row of a block."""

    n_splits: int
    block_start: torch.Tensor  # [blocks] int32: the first query token (row of q / out) of each split block
    part_o: torch.Tensor  # [blocks · BLOCK_M · H · n_splits, D] fp32: rows (block, token, head, split)
    part_lse: torch.Tensor  # [blocks · BLOCK_M · H · n_splits] fp32, base 2

    @staticmethod
    def allocate(n_splits: int, block_start: torch.Tensor, heads: int, head_dim: int) -> PagedSplits:
        rows = block_start.shape[0] * BLOCK_M * heads * n_splits
        dev = block_start.device
        return PagedSplits(n_splits, block_start, testing.kernel_buffer((rows, head_dim), torch.float32, dev),
                           testing.kernel_buffer((rows,), torch.float32, dev))

    def merge(self, o: torch.Tensor, sinks: torch.Tensor | None) -> None:
        """The split blocks' rows of ``o`` (``[T, H, D]``) from the workspace, ``sinks`` (f32 ``[H]``) added."""
        heads = o.shape[-2]
        combine_splits(self.part_o, self.part_lse, o, rows=self.block_start.shape[0] * BLOCK_M * heads, heads=heads,
                       num_splits=self.n_splits, row_stride=self.n_splits, split_stride=1,
                       out_strides=(BLOCK_M, o.stride(0), o.stride(0), o.stride(1)), sinks=sinks,
                       block_index=self.block_start)


def lazy_rescale_applies(cfg: WsConfig, kv_box: int | None) -> bool:
    """Whether a launch with ``cfg`` whose K / V copies are ``kv_box`` rows (None: whole key tiles) builds the lazy
    rescale: ``cfg.lazy_rescale``, but not over copies of fewer than ``LAZY_MIN_COPY_ROWS`` rows."""
    return cfg.lazy_rescale and (kv_box is None or kv_box >= LAZY_MIN_COPY_ROWS)


def _run(cfg: WsConfig, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, n_work: int,
         sm_scale: float, wl: int, wr: int, softcap: float, sinks: torch.Tensor | None, kv_box: int | None = None,
         scales: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None, splits: PagedSplits | None = None,
         programs: int | None = None, **layout) -> None:
    """One launch over ``n_work`` (request, query block) units of every query head; ``softcap`` 0 = off,
    ``sinks`` f32 ``[H]`` or None; ``kv_box``: rows of a K / V copy (default a whole key tile); ``scales``: fp8
    q / k (e4m3) with v in 16 bits, their contiguous ``[B, H_kv]`` multipliers; ``splits``: paged items of four
    ints with split blocks' workspace (``PagedSplits``); ``programs``: a persistent grid's size cap (default
    ``runtime.num_sms()``); ``layout``: the kernel's layout arguments (pointers,
    sizes, strides, LAYOUT / KV_PLUS_Q / PAGE_SIZE / BLOCK_MAJOR)."""
    h, d = q.shape[-2], q.shape[-1]
    heads_per_tile = pack(cfg, q, k)
    tiles = n_work * h // heads_per_tile
    q_scale, k_scale, v_scale = scales if scales is not None else (o, o, o)
    q_desc = _packed_q_desc(q, heads_per_tile) if heads_per_tile > 1 else _desc(q, ROWS_PER_CONSUMER.value)
    gqa_fwd_ws_kernel[(min(tiles, programs or runtime.num_sms()) if cfg.persistent else tiles,)](
        q_desc, _desc(k, cfg.block_n, kv_box), _desc(v, cfg.block_n, kv_box),
        o, sink_ptr=sinks if sinks is not None else o, q_scale_ptr=q_scale, k_scale_ptr=k_scale,
        v_scale_ptr=v_scale, FP8=scales is not None,
        part_o_ptr=o if splits is None else splits.part_o, part_lse_ptr=o if splits is None else splits.part_lse,
        n_splits=1 if splits is None else splits.n_splits, SPLITS=splits is not None,
        n_heads=h, n_work=n_work, group=h // k.shape[-2],
        wl=wl, wr=wr, qk_scale=sm_scale * LOG2E,
        # attention_fns.softcap_scores' cap_scale with tanh_f32's 2·log2(e) folded in, and cap_log2
        cap_scale=2 * LOG2E * sm_scale / softcap if softcap else 0.0, cap_log2=softcap * LOG2E,
        BLOCK_M=BLOCK_M, BLOCK_N=cfg.block_n, HEAD_DIM=d, STAGES=cfg.stages, OVERLAP=cfg.overlap,
        PINGPONG=cfg.pingpong, Q_BUFS=q_buffers(d), SOFTCAP=bool(softcap), HAS_SINK=sinks is not None,
        PACK=heads_per_tile, THREAD_RELEASE=cfg.thread_release, K_EARLY=cfg.early_k_release,
        Q_REGS=min(cfg.q_registers, d) if scales is None else 0, LAZY_RESCALE=lazy_rescale_applies(cfg, kv_box),
        num_warps=4, **layout)


def launch(p: Problem, cfg: WsConfig) -> None:
    """Run a dense / varlen call (``applies(p)`` holds) with ``cfg``."""
    q, k, o = p.q, p.k, p.out
    if q.numel() == 0 or p.batch == 0:
        return
    if k.numel() == 0:  # no keys anywhere (a TMA descriptor needs a non-empty tensor): every row is 0
        o.zero_()
        return
    n_m_blocks = triton.cdiv(max(p.max_q, 1), block_tokens(cfg, q, k))
    dense = not p.varlen
    block_major = cfg.block_major and uniform_lengths(p)
    sort_b = (triton.next_power_of_2(p.batch) if cfg.lpt and p.varlen and not block_major
              and 1 < p.batch <= MAX_SORTED_REQUESTS else 0)
    order = torch.empty(max(p.batch, 1), dtype=torch.int32, device=q.device) if sort_b else q
    v, scales = p.v, None
    if q.dtype == E4M3:  # P·V in 16 bits: V's raw e4m3 values cast exactly (its scale multiplies the output)
        v, scales = scaled_cast(p.v, torch.empty_like(p.v, dtype=o.dtype)), (p.q_scale, p.k_scale, p.v_scale)
    _run(cfg, q, k, v, o, n_m_blocks * p.batch, p.sm_scale,
         p.wl, p.wr, float(p.softcap or 0.0), p.sinks, scales=scales,
         cu_q_ptr=q if dense else p.cu_q, kv_ptr=q if dense else p.cu_kv,
         items_ptr=q, order_ptr=order, table_ptr=q,
         s_q=q.shape[1] if dense else 0, s_kv=k.shape[1] if dense else 0, n_m_blocks=n_m_blocks,
         stride_ot=o.stride(1) if dense else o.stride(0), stride_oh=o.stride(-2), stride_tb=0,
         LAYOUT=ws_kernel.DENSE.value if dense else ws_kernel.VARLEN.value, KV_PLUS_Q=False, PAGE_SIZE=1,
         BLOCK_MAJOR=block_major, SORT_B=sort_b, TAIL_IN_PLACE=False)


def launch_paged(cfg: WsConfig, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, o: torch.Tensor,
                 cu_q: torch.Tensor, kv_lens: torch.Tensor, table: torch.Tensor, items: torch.Tensor, page_size: int,
                 sm_scale: float, wl: int, wr: int, kv_plus_q: bool, softcap: float = 0.0,
                 sinks: torch.Tensor | None = None, splits: PagedSplits | None = None,
                 programs: int | None = None) -> None:
    """Run the (request, query block) ``items`` ([n, 2] int32, blocks of ``block_tokens`` query tokens; with
    ``splits`` [n, 4]: (request, query block, split, split block or -1), see ``PagedSplits``) of a paged call
    (``paged_applies`` holds) over every query head, then merge the split blocks. ``k_pool`` / ``v_pool``: pools
    whose rows are tokens (``[pages, page_size, H_kv, D]`` or ``[pages · page_size, H_kv, D]``, ``token_rows``
    views); request b's keys are its first ``kv_lens[b]`` tokens (plus its query tokens with ``kv_plus_q``) through
    ``table[b]``. ``programs``: a persistent config's grid at most this many programs (default one per SM), the
    other SMs left to a launch beside it."""
    if items.shape[0] == 0 or q.numel() == 0:
        return
    _run(cfg, q, k_pool, v_pool, o, items.shape[0], sm_scale, wl, wr,
         softcap, sinks, kv_box=math.gcd(page_size, cfg.block_n), splits=splits, programs=programs, cu_q_ptr=cu_q,
         kv_ptr=kv_lens, items_ptr=items, order_ptr=items, table_ptr=table, s_q=0, s_kv=0, n_m_blocks=0,
         stride_ot=o.stride(0), stride_oh=o.stride(1), stride_tb=table.stride(0),
         LAYOUT=ws_kernel.PAGED.value, KV_PLUS_Q=kv_plus_q, PAGE_SIZE=page_size, BLOCK_MAJOR=False, SORT_B=0,
         TAIL_IN_PLACE=tail_in_place(cfg, q.shape[-1]))
    if splits is not None:
        splits.merge(o, sinks)
