"""Host side of the Gluon warp-specialized DSA kernel (``ws_kernel.py``): which calls it serves, the TMA
descriptors of q, the launch. ``op.launch`` runs it when its config is a ``WsConfig`` (tests and sweeps:
``op.with_config(WS_CONFIGS[0])``), and by default (``op.default_config``, ``WS_DEFAULT``) on the calls it serves
whose KV groups fill 64-head blocks: on the H200 it ran every seed row faster than the Triton kernel."""

from __future__ import annotations

from dataclasses import replace

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from attnops.attn_mla.latent_ws import CONFIGS, FORCED_CONFIGS, HALF, HEADS, WsConfig
from attnops.kernel_utils import runtime

from .ws_kernel import dsa_decode_ws_kernel

__all__ = ["WS_CONFIGS", "WsConfig", "applies", "default", "refusal", "run"]

# The alternating consumer (``latent_alt``) first: the default, 1.15-1.18x the channel split on the H200
# (docs/perf/attn-mla.md, seventeenth session); the channel split (``latent_ws.consume_keys``) after it. 64-key
# tiles (``ws-alt-n64s2``, FlashMLA's layout) only with the rope tail (``config_refusal``): without it ptxas spills
# 24 B of scalars in the gather loader (40 registers; 28 B with [224, 48]), and the compile test takes no spill.
# First, the default: the alternating consumer persistent (``-p``): one program per SM running every grid-th work
# item, so an item's query load, ring fill and stores overlap its neighbours' tiles. On the H200 (2026-12-03 sweep,
# each checked) 5-9 % faster than one item per program: d512-h64-kv32k 0.871 -> 0.791 ms (16 tiles an item),
# d512-h128-kv32k 2.800 -> 2.624, d576-h128-kv32k 5.451 -> 5.158 (docs/perf/attn-mla.md). Its lazy-rescale form
# (``-l``, ``latent_ws.CONFIGS``) first: 4-9 % faster on an H100 where items have >= 32 tiles (2026-12-06).
MLA_ONLY = (WsConfig(64, 2, alternating=True),)
ALTERNATING = tuple(c for c in CONFIGS if c.alternating and c not in MLA_ONLY)
# Last, forced only (tests and sweeps): 64-key blocks, and ``latent_ws.FORCED_CONFIGS`` (a ready barrier per half
# slot; per-thread releases), persistent where that is safe: 64-key blocks hand P over in the rope slots, where
# the statistics hand-off is ordered only while each warpgroup's blocks keep one slot parity, which holds for an
# item from ring position 0 and not after a persistent program's odd-length item (``latent_alt``; found in review,
# 2026-12-07: two 1-tile items in a row could let warpgroup 0 publish twice before warpgroup 1 read the first), so
# those run one item a program (``config_refusal``). Aimed at the rows below 0.8x FlashMLA (its sparse kernel has
# the 64-key layout and the half-slot barriers, one item a program); on an H100 (2026-12-06, before the lazy
# rescale, their persistent forms) none beat the default by more than 1 % (docs/perf/attn-mla.md, thirty-ninth
# session).
FORCED = MLA_ONLY + tuple(replace(c, persistent=c.block_n != 64) for c in FORCED_CONFIGS)
# Forced only: ring slots freed and refilled by latent halves (``latent_alt``, "Split frees"), on the 64-key
# half-ready form (FlashMLA's sparse kernel's layout and schedule) and on the 32-key default. Why: the 64-key blocks'
# score wgmmas read 1.5x less shared memory per product than the 32-key ones (the latter are bound there: 2752
# against 2176 clocks per 64 keys), and an earlier refill should hide more of the 2-slot ring's gather latency. On an
# H100 (2026-12-07, one process) no row gained: n64s2-h-f 4.60 / 5.02 / 0.914 ms on d576-h128-kv8k / kv32k /
# ds-v32-kv2k against n64s2-h's 4.54 / 5.20 / 0.920 and the default's 4.91 / 5.00 / 0.973 (it beats n64s2-h only on
# kv32k, where the default is faster still); the 32-key form with split frees was 0.2-5 % slower than without.
SPLIT_FREE = (WsConfig(64, 2, alternating=True, half_ready=True, split_free=True),
              WsConfig(32, 4, alternating=True, half_ready=True, split_free=True, lazy_rescale=True, persistent=True))
WS_CONFIGS = (tuple(replace(c, persistent=True) for c in ALTERNATING) + ALTERNATING
              + tuple(c for c in CONFIGS if not c.alternating) + FORCED + SPLIT_FREE)
# The default on small caches (``default``): the 64-key half-ready form, one item a program. On an H100 (2026-12-07,
# one process, each checked) it ran d576-h128-kv8k 4.54 against the 32-key default's 4.91 ms and ds-v32-kv2k 0.920
# against 0.973, but d576-h128-kv32k 5.20 against 5.00: its 2-slot ring hides less of a gather's latency, which
# grows once the selected rows no longer sit in the near half of the L2 (the kv8k cache is 9.4 MB, kv32k's 37.7).
# Hence the cut at half the 50 MB L2 (the H100's and H200's), on the whole cache's bytes.
SMALL_CACHE = WsConfig(64, 2, alternating=True, half_ready=True)
SMALL_CACHE_BYTES = 25 << 20
LATENT = 2 * HALF.value  # the value width the kernel serves (D = 512)
TAILS = (0, 64)  # the rope tails it serves


def default(kv: torch.Tensor, dim_tail: int) -> WsConfig:
    """The config a call the kernel serves runs by default: ``SMALL_CACHE`` where it serves the rope tail and the
    cache ``kv`` is at most ``SMALL_CACHE_BYTES``, else ``WS_CONFIGS[0]``."""
    if config_refusal(SMALL_CACHE, dim_tail) is None and kv.numel() * kv.element_size() <= SMALL_CACHE_BYTES:
        return SMALL_CACHE
    return WS_CONFIGS[0]


def _q_rows(q: torch.Tensor) -> tuple[int, int] | None:
    """``(rows, row stride)`` of q ``[B, S, H, W]`` seen as ``[B·S·H, W]`` (its TMA view), or None: last dim
    strided, the leading dims not one uniform row axis, or a row stride TMA cannot take (16-byte units)."""
    if q.stride(-1) != 1:
        return None
    row = q.stride(2) if q.shape[2] > 1 else q.shape[3]  # (a size-1 dim's stride can be anything)
    pitch = row
    for dim in (2, 1):  # S's stride is H rows, B's is S·H rows
        pitch *= q.shape[dim]
        if q.shape[dim - 1] > 1 and q.stride(dim - 1) != pitch:
            return None
    if row < q.shape[3] or row * q.element_size() % 16 or q.data_ptr() % 16:
        return None
    return q.shape[0] * q.shape[1] * q.shape[2], row


def config_refusal(cfg: WsConfig, dim_tail: int) -> str | None:
    """Why config ``cfg`` cannot serve calls with this rope tail, or None: 64-key blocks need the tail, and run one
    item a program (above)."""
    if cfg.block_n == 64 and cfg.persistent:
        return "64-key blocks hand P over in the rope slots, which needs each item to start at ring position 0: " \
               "not persistent"
    if cfg.block_n == 64 and dim_tail != 64:
        return f"64-key blocks need the 64-channel rope tail (without it the gather loader spills), got {dim_tail}"
    return None


def refusal(q: torch.Tensor, kv: torch.Tensor, dim_tail: int, cfg: WsConfig | None = None) -> str | None:
    """Why the kernel (with config ``cfg``, where given) cannot serve a call, or None: D = 512 with a rope tail of 0
    or 64, 16-bit, q readable through its TMA row view, the cache's rows 16-byte aligned (cp.async pieces), on a
    Hopper GPU; ``config_refusal``."""
    d = q.shape[-1] - dim_tail
    if d != LATENT or dim_tail not in TAILS:
        return f"needs D = {LATENT} and dim_tail in {TAILS}, got D = {d}, dim_tail = {dim_tail}"
    if cfg is not None and config_refusal(cfg, dim_tail):
        return config_refusal(cfg, dim_tail)
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"needs float16 / bfloat16, got {q.dtype}"
    if _q_rows(q) is None:
        return f"q: strides {tuple(q.stride())} give no 2-D row view TMA can read"
    if any(s * kv.element_size() % 16 for s in kv.stride()[:3]) or kv.data_ptr() % 16:
        return f"kv: strides {tuple(kv.stride())} do not keep every row 16-byte aligned"
    if runtime.interpreting() or not runtime.is_hopper():
        return "needs a Hopper GPU (TMA, cp.async, wgmma, warp specialization; not the interpreter)"
    return None


def applies(q: torch.Tensor, kv: torch.Tensor, dim_tail: int, cfg: WsConfig | None = None) -> bool:
    """Whether the kernel (with ``cfg``, where given) serves the call (``refusal`` says why not)."""
    return refusal(q, kv, dim_tail, cfg) is None


def _q_desc(q: torch.Tensor, box: list[int]) -> TensorDescriptor:
    rows, stride = _q_rows(q)
    dtype = gl.float16 if q.dtype == torch.float16 else gl.bfloat16
    return TensorDescriptor(q, [rows, q.shape[-1]], [stride, 1], box, gl.NVMMASharedLayout.get_default_for(box, dtype))


def run(cfg: WsConfig, q, kv, clean, count, out, dim_tail: int, head_blocks_per_kv: int, qk_scale: float) -> None:
    """Launch over the (head block per KV head, B·S·H_kv row) work items, one per program or, ``persistent``, one
    program per SM, for ``applies``-checked inputs, after ``dsa_prepare_indices_kernel`` filled ``clean`` ([rows,
    BLOCK_K]) and ``count``."""
    b, s, h, _ = q.shape
    h_kv = kv.shape[2]
    n_items = head_blocks_per_kv * b * s * h_kv
    programs = min(n_items, runtime.num_sms()) if cfg.persistent else n_items
    q_desc = _q_desc(q, [HEADS.value, HALF.value])
    dsa_decode_ws_kernel[(programs,)](
        q_desc, _q_desc(q, [HEADS.value, dim_tail]) if dim_tail else q_desc, kv, clean, count, out, n_items, s, h, h_kv,
        h // h_kv, head_blocks_per_kv, qk_scale, kv.stride(0), kv.stride(1), kv.stride(2), out.stride(0),
        out.stride(1), out.stride(2), TAIL=dim_tail, BLOCK_K=clean.shape[1], BLOCK_N=cfg.block_n,
        STAGES=cfg.stages, ALTERNATING=cfg.alternating, HALF_READY=cfg.half_ready,
        THREAD_RELEASE=cfg.thread_release, LAZY_RESCALE=cfg.lazy_rescale, SPLIT_FREE=cfg.split_free,
        num_warps=4)
