"""Host side of the GQABwd kernels: tile configs, the forced-config hook, launch.

Configs are a small fixed table per head-dim class (no autotuning: ``choose`` is a deterministic function
of the shapes). ``configs_for`` is public so a GPU test can run every entry and check dq/dk/dv; a config
that does not fit the GPU's shared memory (``OutOfResources``, raised before anything runs) falls through
to the next one and is skipped from then on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.attention_fns import LOG2E
from attnops.kernel_utils.cast import scaled_cast

from . import ws_launch
from .kernel import gqa_bwd_head_sum_kernel, gqa_bwd_kernel, gqa_bwd_preprocess_kernel


@dataclass(frozen=True)
class BwdConfig:
    block_m1: int  # dK/dV role: query rows streamed per step
    block_n1: int  # dK/dV role: keys kept per program
    block_m2: int  # dQ role: packed query rows kept per program
    block_n2: int  # dQ role: keys streamed per step
    num_warps: int
    num_stages: int

    @property
    def name(self) -> str:
        return f"m{self.block_m1}n{self.block_n1}-m{self.block_m2}n{self.block_n2}w{self.num_warps}s{self.num_stages}"


# Per head-dim class, first = preferred; ``choose`` moves to a smaller key block when the longest dK/dV
# program would outlast an even share of the work (GQA rows with few key blocks). Every entry
# compiles for sm_90 without register spills (ptxas -v, f16 and bf16; docs/perf/attn-core.md): the fp32
# accumulators (dK + dV: 2·BLOCK_N1·D, dQ: BLOCK_M2·D) and the K/V (dK/dV role) or Q/dO (dQ role) tiles
# held for the whole program stay within 255 registers per thread. D = 256 keeps BLOCK_M1 = 16 so the
# dK/dV role still maps to wgmma (M = 64); its second entry runs mma.sync (BLOCK_N1 = 32). The 4-warp D = 128
# entry (255 registers, 64 KB: two programs per SM, as the forward's 64x64 4-warp tile that beat the 8-warp one
# on the H200) is ``SHORT_CONFIGS``' choice for short sequences.
CONFIGS: dict[int, tuple[BwdConfig, ...]] = {
    64: (BwdConfig(64, 128, 128, 64, 8, 3), BwdConfig(32, 128, 128, 32, 8, 3), BwdConfig(64, 64, 64, 64, 4, 3)),
    128: (BwdConfig(64, 128, 128, 64, 8, 2), BwdConfig(32, 128, 128, 32, 8, 3), BwdConfig(64, 64, 128, 64, 8, 2),
          BwdConfig(32, 64, 64, 32, 4, 2)),
    256: (BwdConfig(16, 64, 64, 16, 8, 2), BwdConfig(32, 32, 32, 32, 8, 2)),
}
# Short sequences (at most SHORT_KEYS keys): the 4-warp D = 128 entry, two programs per SM. H200 sweeps, every config
# checked first: it led ``choose``'s 8-warp tile on all eight 512-token rows (benchmarks/results/h200/
# 20261203-1300-tune-bwd-short.json: llama-8b-short 115.3 against 123.9 us, llama-70b-short 175.7 / 190.0;
# 20261203-1510-tune-bwd-short-mha.json: llama-8b / 70b-short-mha 140.7 / 140.3 against 151.9 / 150.5). On the
# 2048-token rows the 8-warp entries stayed within 1 % of the best config swept (docs/perf/attn-core.md).
SHORT_KEYS = 512
SHORT_CONFIGS: dict[int, BwdConfig] = {128: BwdConfig(32, 64, 64, 32, 4, 2)}
MAX_HEAD_DIM = 256
PREPROCESS_ROWS = 64
HEAD_SUM_ROWS = 32  # key rows per program of gqa_bwd_head_sum_kernel
# Head splits' partial sums added by the last subgroup program of each key block (``FUSED_SUM`` in the kernel:
# no head-sum launch) instead of gqa_bwd_head_sum_kernel. H200, 2026-12-03 (benchmarks/results/h200/
# 20261203-1819-tune-bwd-splits.json), llama-70b-short bf16: 2 subgroups 123.6 us with the head-sum launch, 118.9
# fused; 4: 136.1 / 124.3; 8: 165.0 / 148.9; unsplit 180.6.
FUSED_SUM_DEFAULT = True
# The Triton kernel's program order (``gqa_bwd_kernel``): (batch, KV head) pairs per chunk, each chunk's dK/dV
# programs then its dQ programs (one chunk: every dK/dV program before every dQ program). Why chunks pay: on a
# grid of several waves (the short MHA rows: 128 pairs, 2048 programs, ~8 waves of 264 resident) each wave of dK/dV
# programs streams Q / dO of every pair and each wave of dQ programs K / V of every pair, so later waves re-read
# from HBM what earlier ones read; chunks of 32 pairs keep a wave's ~16 MB within the 50 MB L2. H200, 2026-12-05,
# one run, checked (benchmarks/results/h200/20261205-0234-tune-bwd-order.json), llama-8b / 70b-short-mha bf16:
# 32 pairs 126.7 / 129.1 us, 16 127.2 / 129.0, 8 131.6 / 131.6, 64 133.4 / 133.1, one chunk 140.8 / 141.2. (Those
# rows now take the Gluon kernels; a call of at most 32 pairs, e.g. every short GQA seed row, keeps one chunk.)
ORDER_GROUP = 32


def _dim_class(head_dim: int) -> int:
    for d in CONFIGS:
        if head_dim <= d:
            return d
    raise ValueError(f"head dim {head_dim} > {MAX_HEAD_DIM} is not supported")


def configs_for(head_dim: int) -> tuple[BwdConfig, ...]:
    """Every config a call with this head dim may run (the GPU test runs them all)."""
    return CONFIGS[_dim_class(head_dim)]


def choose(head_dim: int, batch: int, s_q: int, s_kv: int, heads: int, kv_heads: int, is_causal: bool,
           sms: int) -> BwdConfig:
    """The config for a call: ``SHORT_CONFIGS``' entry of the class for at most ``SHORT_KEYS`` keys; else the first of
    the class whose dK/dV grid (one program per key block of each (batch, KV head)) covers at least 3/4 of the SMs,
    else the one with the most programs (smallest key block).
    H200 sweeps of the grid-fill rule (2026-12-01, benchmarks/results/h200/20261201-2120-tune-bwd-short.json and
    docs/perf/attn-core.md): llama-70b-long (128 programs of 128 keys) 693 us against 847 with 64-key blocks (the
    512-token rows it once decided take ``SHORT_CONFIGS`` since attn-core 0.3.15). ``heads``, ``s_q`` and
    ``is_causal`` do not enter: on these rows the grid's fill decided, not the longest program's share of the
    work."""
    if s_kv <= SHORT_KEYS and _dim_class(head_dim) in SHORT_CONFIGS:
        return SHORT_CONFIGS[_dim_class(head_dim)]
    cs = configs_for(head_dim)
    programs = lambda c: batch * kv_heads * triton.cdiv(max(s_kv, 1), c.block_n1)  # noqa: E731
    for c in cs:
        if 4 * programs(c) >= 3 * sms:
            return c
    return max(cs, key=programs)


def head_splits(block_n: int, batch: int, s_kv: int, heads: int, kv_heads: int, sms: int) -> int:
    """Subgroups of the G query heads a dK/dV program sums over (a divisor of G; 1: all of them, dK / dV stored
    directly). Why: each program walks G x (query blocks) steps, so with few (batch, KV head) pairs the grid is a
    few long programs and leaves SMs idle. With fewer programs than SMs: the fewest subgroups that give every SM a
    program (more add partial sums, 8·s·programs·BLOCK_N1·D bytes, and shorten programs no further than the
    wave). H200, 2026-12-03: llama-70b-short (B 2, H_kv 8, G 8: 128 programs of 64 keys) 2 subgroups 118.9 us, 4
    124.3, unsplit 180.6 (20261203-1819-tune-bwd-splits.json); llama-70b-long (128 programs of 128 keys) 2
    subgroups 601.1, 4 624.2, unsplit 684.6 (20261203-2300-tune-bwd-ws-pipelined.json). With a program per SM or
    more none: llama-8b-short (256 programs) 115.2 unsplit against 127.4 with 2 subgroups, llama-8b-long 591.6
    against 629.6 (20261203-2310-tune-bwd-ws-rest.json). ``block_n``: keys per dK/dV program (the tile's
    ``block_n1``)."""
    programs = batch * kv_heads * triton.cdiv(s_kv, block_n)
    if programs >= sms:
        return 1
    g = heads // kv_heads
    return min((d for d in range(1, g + 1) if g % d == 0 and d * programs >= sms), default=g)


_FORCED: dict[str, BwdConfig | ws_launch.WsBwdConfig | int] = {}
_TOO_BIG: set[BwdConfig] = set()  # configs that did not fit this GPU's shared memory


def forced(config: BwdConfig | ws_launch.WsBwdConfig | None = None, splits: int | None = None,
           fused_sum: bool | None = None, group: int | None = None):
    """Pin the tile config (and / or ``splits``, the head subgroups of ``head_splits``, ``fused_sum``, who adds
    their partial sums: ``FUSED_SUM_DEFAULT``, and ``group``, the Triton kernel's program order: ``ORDER_GROUP``)
    of every backward launch inside the block (tests, sweeps). A
    ``WsBwdConfig`` runs the warp-specialized dK / dV kernel with the Triton kernel's dQ role (``choose``'s tile)
    beside it, or with ``gluon_dq`` the Gluon dQ kernel; with ``splits`` its programs sum over G / splits heads each,
    their partials added by the head-sum launch (``fused_sum`` is the Triton kernel's only). ``splits`` or ``group``
    alone keeps the Triton kernel."""
    return runtime.pinned(_FORCED, config=config, splits=splits, fused_sum=fused_sum, group=group)


@dataclass
class Problem:
    """One dense backward call: ``q, o, do [B, S_q, H, D]``, ``k, v [B, S_kv, H_kv, D]``, ``lse [B, H, S_q]``
    f32 base 2; outputs ``dq, dk, dv`` preallocated (any strides with the last dim contiguous)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    do: torch.Tensor
    lse: torch.Tensor
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    is_causal: bool
    sm_scale: float
    deterministic: bool = True  # False: dQ by fp32 atomics from the dK/dV programs (kernel.py)


# The default for long sequences (``ws_default``): the Gluon dK / dV and dQ kernels with 3 stages, over the head
# subgroups ``head_splits`` gives. H200, 2026-12-03, every variant checked, against the Triton kernel's default in
# the same run (benchmarks/results/h200/20261203-2300-tune-bwd-ws-pipelined.json, -2310-tune-bwd-ws-rest.json,
# -2335-tune-bwd-ws-splits.json): llama-8b-long 522.9 against 590.7 us, llama-8b-long-mha 587.6 / 685.2,
# llama-70b-long-mha 587.1 / 690.5, llama-70b-long (128 programs: 2 subgroups) 541.6 / 594.0. Unsplit that row ran
# 722-734 (20261204-0423-probe-bwd.json: the dK / dV kernel 500 us against 308 with 2 subgroups). Not the rows of
# at most ``SHORT_KEYS`` keys: llama-8b-short 136.4 against the Triton 4-warp tile's 115.5, short-mha 144.4 / 139.8
# (two 4-warp programs per SM).
WS_DEFAULT = ws_launch.WsBwdConfig(3, gluon_dq=True)
# The same kernels with the persistent dK / dV kernel (at most one program per SM, each walking tiles in a serpentine
# order) for grids of more than PERSISTENT_WAVES programs per SM: the many one-head tiles of MHA rows, where each
# program's K / V loads and epilogue otherwise stall its SM. H200, 2026-12-04, every variant checked, one run
# (benchmarks/results/h200/20261204-1530-tune-bwd-ws-persistent.json): llama-8b-long-mha (1024 programs on 132 SMs)
# 539.1 against 568.8 us, llama-70b-long-mha 541.9 / 573.2; llama-8b-long (256 programs) 487.2 against 484.1.
WS_PERSISTENT = ws_launch.WsBwdConfig(3, gluon_dq=True, persistent=True)
# Short MHA calls take them too: H200, 2026-12-05, one run, every variant checked (benchmarks/results/h200/
# 20261205-0235-tune-bwd-short-mha.json): llama-8b / 70b-short-mha (512 programs on 132 SMs) persistent 119.1 /
# 119.9 us, non-persistent 121.2 / 122.1, against the Triton tile's 140.8 / 140.9 (before the 16-byte stores the
# Gluon kernels were the slower: 144.4 against 139.8). Hence 3 waves, not 4: it changes only these rows.
PERSISTENT_WAVES = 3
# Beyond SHORT_KEYS keys with early scores (``-e``: each consumer issues its next scores before its last product's
# wait; attn-core 0.3.20). H100, 2026-12-06, every config checked, one run each (benchmarks/results/h100/
# 20261206-1350-tune-bwd-early-k128.json, -1410-tune-bwd-short-mha.json): the long MHA rows 533.5-541.4 against
# 539.8-546.4 us (-0.9 to -1.5 %, all four; CUPTI per kernel, llama-8b-long-mha bf16: dK / dV 318.2 against 330.7, dQ
# 223.0 against 227.4); the 512-key MHA rows 137.3-138.4 against 135.1-136.2 (+1.1 to +1.8 %), the GQA long rows on
# WS_DEFAULT level to 2.5 % slower: those keep the plain form.
WS_PERSISTENT_LONG = ws_launch.WsBwdConfig(3, gluon_dq=True, persistent=True, early_scores=True)


def ws_default(p: Problem, sms: int) -> ws_launch.WsBwdConfig | None:
    """For a call the Gluon kernels serve (``ws_launch.refusal``), MHA or with more than ``SHORT_KEYS`` keys:
    ``WS_PERSISTENT`` where the dK / dV grid (over ``head_splits``' subgroups) has more than ``PERSISTENT_WAVES``
    programs per SM of ``sms`` (``WS_PERSISTENT_LONG`` beyond ``SHORT_KEYS`` keys), else ``WS_DEFAULT``; None
    otherwise (the Triton kernel: the short GQA rows, where it led, 115.5 against 136.4 us, 2026-12-03)."""
    B, S_kv, H_kv, _ = p.k.shape
    short_gqa = S_kv <= SHORT_KEYS and p.q.shape[2] != H_kv
    if short_gqa or ws_launch.refusal(p) is not None:
        return None
    programs = B * H_kv * triton.cdiv(S_kv, ws_launch.BLOCK_KEYS)
    programs *= head_splits(ws_launch.BLOCK_KEYS, B, S_kv, p.q.shape[2], H_kv, sms)
    if programs <= PERSISTENT_WAVES * sms:
        return WS_DEFAULT
    return WS_PERSISTENT_LONG if S_kv > SHORT_KEYS else WS_PERSISTENT


# The Gluon dQ kernel on a second stream, beside the dK / dV kernel (both read only the inputs and the preprocess's
# Δ): its programs take the SMs the dK / dV kernel's last, shortest programs (causal, heaviest first) leave idle.
# H200, 2026-12-04, same process (benchmarks/results/h200/20261204-0441-probe-bwd-concurrent-dq.json): llama-8b-long
# 519-523 -> 485-488 us, llama-70b-long 539-541 -> 500-502, llama-8b / 70b-long-mha 583-586 -> 573-575.
CONCURRENT_DQ = True
# The Triton kernel launched as the preprocess's programmatic dependent (sm_90: ``launch_pdl``, ``griddepcontrol``):
# its programs load K / V (dK / dV role) or Q / dO (dQ role) while the preprocess's last programs run and wait for
# Δ there, instead of starting after the preprocess has drained. Predicted 2-5 us off the 512-token rows' ~115-140
# us; measured on the H200 (2026-12-05, 20261205-0233-attn-core-bwd-pdl.jsonl): no gain (short MHA 140.6 / 141.0
# against 140; llama-8b-short 115.6 against 115.5). Kept, bitwise equal to the plain launch (test_dependent_launch_gpu).
DEPENDENT_LAUNCH = True


def _bsh(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def launch(p: Problem) -> None:
    """Preprocess (Δ; zeroes the atomic dQ accumulator), the backward kernel, and for
    ``deterministic=False`` the dQ cast. Nothing is launched for an empty problem."""
    B, S_q, H, D = p.q.shape
    S_kv = p.k.shape[1]
    ws = _FORCED.get("config") if isinstance(_FORCED.get("config"), ws_launch.WsBwdConfig) else None
    refused = ws_launch.refusal(p) if ws else None
    if refused:
        raise ValueError(f"config {ws.name}: the warp-specialized dK / dV kernel cannot serve this call: {refused}")
    if not _FORCED.keys() & {"config", "splits", "group"}:
        ws = ws_default(p, runtime.num_sms())
    if ws:  # their dQ is deterministic; deterministic=False permits atomics, so it takes them too (and no dQ buffer)
        p = replace(p, deterministic=True)
    G = H // p.k.shape[2]
    if G % (_FORCED.get("splits") or 1):
        raise ValueError(f"GQABwd: splits must divide the group size {G}, got {_FORCED['splits']}")
    if _FORCED.get("group", 1) < 1:
        raise ValueError(f"GQABwd: group (pairs per chunk of the program order) must be >= 1, got {_FORCED['group']}")
    if B == 0 or S_q == 0 or S_kv == 0:
        return
    block_d = triton.next_power_of_2(D)
    delta = torch.empty((B, H, S_q), dtype=torch.float32, device=p.q.device)
    dq_acc = delta if p.deterministic else torch.empty((B, S_q, H, D), dtype=torch.float32, device=p.q.device)
    # The Triton kernel right after the preprocess starts as its dependent (``DEPENDENT_LAUNCH``)
    dependent = DEPENDENT_LAUNCH and not ws and runtime.dependent_launch()
    heads = min(triton.next_power_of_2(H), PREPROCESS_ROWS)
    tokens = PREPROCESS_ROWS // heads
    gqa_bwd_preprocess_kernel[(B * triton.cdiv(S_q, tokens), triton.cdiv(H, heads))](
        p.o, p.do, delta, dq_acc, S_q, H, *_bsh(p.o), *_bsh(p.do),
        HEAD_DIM=D, BLOCK_D=block_d, TOKENS=tokens, HEADS=heads, ZERO_DQ=not p.deterministic,
        LAUNCH_DEPENDENTS=dependent, num_warps=4,
    )
    if ws:
        splits = _FORCED.get("splits") or head_splits(ws_launch.BLOCK_KEYS, B, S_kv, H, p.k.shape[2],
                                                      runtime.num_sms())
        part = _partials(p, splits) if splits > 1 else None
        # (the side stream joined at the block's end: dQ done before anything after the call on the caller's stream)
        with runtime.side_stream(p.q.device, ws.gluon_dq and CONCURRENT_DQ) as side:
            ws_launch.run(ws, p, delta, part, side)
            if part is not None:
                _head_sum(p, part, splits)
    if not (ws and ws.gluon_dq):
        _launch_any(p, delta, dq_acc, dq_only=ws is not None, dependent=dependent)
    if not p.deterministic:
        scaled_cast(dq_acc, p.dq, p.sm_scale)


def _launch_any(p: Problem, delta: torch.Tensor, dq_acc: torch.Tensor, dq_only: bool = False,
                dependent: bool = False) -> None:
    """The forced tile config, else ``choose``'s, falling through configs that do not fit the GPU; ``dq_only``:
    the kernel's dQ programs alone (a forced ``WsBwdConfig`` ran the dK / dV role); ``dependent``: launched as the
    preprocess's programmatic dependent."""
    B, S_q, H, D = p.q.shape
    if isinstance(_FORCED.get("config"), BwdConfig):
        _launch(p, delta, dq_acc, _FORCED["config"], dq_only, dependent)
        return
    first = choose(D, B, S_q, p.k.shape[1], H, p.k.shape[2], p.is_causal, runtime.num_sms())
    cands = [first] + [c for c in configs_for(D) if c != first]
    for cfg in cands:
        if cfg in _TOO_BIG:
            continue
        try:
            _launch(p, delta, dq_acc, cfg, dq_only, dependent)
            return
        except triton.runtime.errors.OutOfResources:
            _TOO_BIG.add(cfg)
    raise RuntimeError(f"GQABwd: no tile config fits this GPU for head dim {D}")


def _launch(p: Problem, delta: torch.Tensor, dq_acc: torch.Tensor, cfg: BwdConfig, dq_only: bool = False,
            dependent: bool = False) -> None:
    """The backward kernel, and the head-subgroup sum where ``head_splits`` (or a forced count) splits the dK/dV
    programs' heads; ``dq_only``: its dQ programs alone (the dK / dV role ran elsewhere)."""
    B, S_q, H, D = p.q.shape
    S_kv, H_kv = p.k.shape[1], p.k.shape[2]
    G = H // H_kv
    bh_kv = B * H_kv
    splits = 1 if dq_only else _FORCED.get("splits") or head_splits(cfg.block_n1, B, S_kv, H, H_kv,
                                                                      runtime.num_sms())
    part = _partials(p, splits) if splits > 1 else delta  # (never read with one subgroup)
    fused_sum = splits > 1 and bool(_FORCED.get("fused_sum", FUSED_SUM_DEFAULT))
    key_blocks = 0 if dq_only else triton.cdiv(S_kv, cfg.block_n1)
    counters = runtime.arrival_counters(p.q.device, key_blocks * bh_kv) if fused_sum else delta
    num_q_blocks = triton.cdiv(S_q * G, cfg.block_m2)
    group = min(_FORCED.get("group", ORDER_GROUP), bh_kv)
    grid = (bh_kv * (key_blocks * splits + (num_q_blocks if p.deterministic else 0)),)
    gqa_bwd_kernel[grid](
        p.q, p.k, p.v, p.do, p.lse, delta, p.dq, p.dk, p.dv, dq_acc, part, counters,
        S_q, S_kv, H, H_kv, G, splits, key_blocks, num_q_blocks, bh_kv, group,
        p.sm_scale * LOG2E, p.sm_scale,
        *_bsh(p.q), *_bsh(p.k), *_bsh(p.v), *_bsh(p.do),
        p.lse.stride(0), p.lse.stride(1),
        *_bsh(p.dq), *_bsh(p.dk), *_bsh(p.dv),
        HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D),
        BLOCK_M1=cfg.block_m1, BLOCK_N1=cfg.block_n1, BLOCK_M2=cfg.block_m2, BLOCK_N2=cfg.block_n2,
        IS_CAUSAL=p.is_causal, EVEN_M1=S_q % cfg.block_m1 == 0, EVEN_N1=S_kv % cfg.block_n1 == 0,
        EVEN_N2=S_kv % cfg.block_n2 == 0,
        ATOMIC_DQ=not p.deterministic, PARTIAL=splits > 1, FUSED_SUM=fused_sum, EXACT_DOT=runtime.interpreting(),
        WAIT_PRIOR=dependent, CHUNKED=group < bh_kv, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        launch_pdl=dependent,
    )
    if splits > 1 and not fused_sum:
        _head_sum(p, part, splits)


def _partials(p: Problem, splits: int) -> torch.Tensor:
    """The fp32 partial sums of ``splits`` head subgroups, ``[2 (dK, dV), splits, B·H_kv, S_kv, D]``."""
    B, S_kv, H_kv, D = p.k.shape
    return testing.kernel_buffer((2, splits, B * H_kv, S_kv, D), torch.float32, p.q.device)


def _head_sum(p: Problem, part: torch.Tensor, splits: int) -> None:
    """dK, dV from the ``splits`` head subgroups' fp32 partial sums ``part`` (``[2, splits, B·H_kv, S_kv, D]``)."""
    B, S_kv, H_kv, D = p.k.shape
    gqa_bwd_head_sum_kernel[(triton.cdiv(S_kv, HEAD_SUM_ROWS), B * H_kv)](
        part, p.dk, p.dv, S_kv, H_kv, B * H_kv, splits, p.sm_scale, *_bsh(p.dk), *_bsh(p.dv),
        HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D), BLOCK_R=HEAD_SUM_ROWS, num_warps=4,
    )
