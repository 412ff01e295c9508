"""Host side of the shared GQA forward kernel: tile configs, split-KV heuristic, launch.

Configs are a small fixed table per head-dim class (no autotuning: the choice is a deterministic
function of the shapes, so a benchmark row always runs the same kernel). ``CONFIGS`` is public so a GPU
test can run every entry and check its output; ``forced(...)`` pins a config / split count for a block
of calls (tests, tuning sweeps).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.attention_fns import LOG2E
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.split_combine import combine_splits

from . import ws_launch
from .kernel import gqa_fwd_kernel, rope_rows_kernel


@dataclass(frozen=True)
class FwdConfig:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    fp8_dot: bool = True  # fp8 inputs: Q·Kᵀ on fp8 tensor cores (exact products); False upcasts to 16-bit
    tma: bool = False  # K/V through per-request TMA descriptors where the call allows it (``tma_applies``)

    @property
    def name(self) -> str:
        return (f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}" + ("" if self.fp8_dot else "-up")
                + ("-tma" if self.tma else ""))


# Prefill-class configs (more than DECODE_ROWS packed rows per request), first = default. Chosen from an
# offline sm_90 compile of every candidate (``python -m benchmarks.sm90_compile --all``): every default
# compiles without register spills, pipelines its K/V loads (cp.async) and uses wgmma; shared memory stays
# <= 196 KB of the 227 KB. Known exception: RoPE with D >= 256 spills (~0.2 KB since the contiguous RoPE
# tables of attention_fns.rope_tile; ~2 KB before) in the default config.
# The ``-tma`` entries (K/V by TMA, mbarrier-pipelined; offline sm_90: 184 registers at D = 128 against
# the default's 212) stay forced only: on the H200 they ran 0.93-0.97x the same non-TMA tile on the q < kv
# prefill rows (docs/perf/attn-core.md).
# D = 64: the 4-warp 128x64 tile, on the H200 (2026-12-01 21:20, benchmarks/results/h200/20261201-2120-tune-d64.json)
# 15 % faster than the 8-warp one on gpt-oss-uniform, 12 % on gpt-oss-q-lt-kv, 17 % on gpt-oss-rope-interleaved
# with in-loop RoPE (5 % slower with the key pre-pass: 59.1 against 56.4 us, both far under the 80 of before).
# D = 128: the 4-warp 64x64 tile (235 registers, 112 KB: two programs per SM, so one's softmax overlaps the
# other's MMA), on the H200 (tenth session, benchmarks/results/h200/20261201-2238-tune-ws.json) faster than the
# 8-warp 128x64 one on all 12 prefill rows timed: llama-8b-uniform 48.7 -> 44.5 us, q-lt-kv 67.0 -> 65.6,
# llama-70b-q-lt-kv 125.7 -> 125.2, long-w1024 321 -> 314 / 617 -> 599, uniform-rope with the key pre-pass
# 62.3 -> 56.3 (97 us with in-loop RoPE: the pre-pass is the default on prefill shapes).
# Since attn-core 0.3.17 the 4-warp 64x32 tile where the grid has more than two programs per SM
# (``FEW_PROGRAMS_CONFIGS`` for the rest): 147-168 registers (offline sm_90, 16-bit, with sinks / softcap) and
# 64 KB, so three programs per SM instead of two. H200 (2026-12-03, bf16, benchmarks/results/h200/
# 20261203-1819-tune-short-m64n32.json): llama-70b-short-w256 (2048 programs) 73.0 -> 64.1 us, llama-8b-short-w256
# (1024) 41.3 -> 37.5, llama-8b-uniform (1024; that row runs the warp-specialized kernel, 41.1) 45.0 -> 43.2; the
# 64x32 tile with 4 slots (two per SM) was level with 64x64 (73.6 on the 70b row): the third program is the gain.
PREFILL_CONFIGS: dict[int, tuple[FwdConfig, ...]] = {
    64: (FwdConfig(128, 64, 4, 3), FwdConfig(128, 128, 8, 3), FwdConfig(128, 64, 8, 3), FwdConfig(64, 64, 4, 3),
         FwdConfig(128, 64, 8, 3, tma=True), FwdConfig(128, 128, 8, 3, tma=True)),
    128: (FwdConfig(64, 32, 4, 3), FwdConfig(64, 64, 4, 3), FwdConfig(128, 64, 8, 3), FwdConfig(128, 128, 8, 2),
          FwdConfig(128, 32, 8, 3), FwdConfig(128, 64, 8, 3, tma=True), FwdConfig(128, 128, 8, 2, tma=True)),
    256: (FwdConfig(128, 32, 8, 2), FwdConfig(128, 64, 8, 2), FwdConfig(128, 32, 8, 3), FwdConfig(64, 64, 4, 2),
          FwdConfig(128, 32, 8, 2, tma=True), FwdConfig(128, 64, 8, 2, tma=True)),
    512: (FwdConfig(64, 32, 8, 2), FwdConfig(64, 16, 8, 2), FwdConfig(32, 32, 4, 2)),
}
# fp8 inputs: the same tiles (Q·Kᵀ on fp8 tensor cores; no TMA path), their own default first, then that default
# with Q/K upcast to 16-bit. D = 128 keeps the 8-warp 128x64 tile: the 16-bit default ran the fp8 prefill rows
# 7-10 % slower on the H200 (2026-12-01 22:48: llama-70b-fp8-q-lt-kv 132 -> 145 us, qwen3-fp8-ragged 148 -> 159).
# Grids of at most FEW_PROGRAMS_PER_SM programs per SM (before KV splits) gain nothing from a third resident program
# and pay the 32-key tile's per-key loop costs: they keep 0.3.5's 64x64 tile. H200, 2026-12-03 (20261203-1830-attn-core-
# issue3-68.jsonl, on the 64x32 tile): prefill-rope (32 programs) 17.3 -> 18.5 us, qwen3-8b-chunked-prefill (64
# programs over 2048 keys) 20.5 -> 24.8 against the 64x64 tile's earlier records.
FEW_PROGRAMS_PER_SM = 2
FEW_PROGRAMS_CONFIGS: dict[int, FwdConfig] = {128: FwdConfig(64, 64, 4, 3)}
FP8_DEFAULTS: dict[int, FwdConfig] = {128: FwdConfig(128, 64, 8, 3)}


def _fp8_configs(d: int, cs: tuple[FwdConfig, ...]) -> tuple[FwdConfig, ...]:
    first = FP8_DEFAULTS.get(d, cs[0])
    return (first, *(c for c in cs if not c.tma and c != first),
            FwdConfig(first.block_m, first.block_n, first.num_warps, first.num_stages, fp8_dot=False))


FP8_PREFILL_CONFIGS: dict[int, tuple[FwdConfig, ...]] = {d: _fp8_configs(d, cs) for d, cs in PREFILL_CONFIGS.items()}
# Decode-class configs: BLOCK_M is set per call to the packed rows of one request (G·S_q rounded up to a
# power of two, >= 16). Keyed by head-dim class, then by the largest BLOCK_M they serve without spilling.
DECODE_ROWS = 64
DECODE_CONFIGS: dict[int, dict[int, tuple[FwdConfig, ...]]] = {
    64: {64: (FwdConfig(0, 64, 4, 3), FwdConfig(0, 128, 4, 3))},
    128: {64: (FwdConfig(0, 64, 4, 3), FwdConfig(0, 128, 4, 2), FwdConfig(0, 128, 8, 3))},
    256: {16: (FwdConfig(0, 64, 4, 2), FwdConfig(0, 32, 4, 3)),
          32: (FwdConfig(0, 32, 4, 3), FwdConfig(0, 64, 8, 2)),
          64: (FwdConfig(0, 32, 8, 2), FwdConfig(0, 64, 8, 2))},
    512: {16: (FwdConfig(0, 32, 8, 2), FwdConfig(0, 16, 4, 3), FwdConfig(0, 32, 8, 3)),
          32: (FwdConfig(0, 32, 8, 2),),
          64: (FwdConfig(0, 16, 8, 2), FwdConfig(0, 32, 8, 2))},
}

# A KV split covers at least this many keys. 128 since the combine merges a row's splits in one step (attn-core
# 0.3.13): before it, each split cost ~0.2 µs of merge and 256 kept them few; on the 2026-12-03 sweep the rows this
# moves were already as fast or faster with more splits (qwen3-30b-1k 8 splits 7.3 against 4: 8.7 us; -4k 32: 9.7
# against 16: 10.1); with it gemma-2b-8k-bs1 (32 -> 64 splits) 17.7 -> 8.3 us, qwen3-30b-1k / -4k 7.4 / 10.0 -> 5.7 /
# 6.9 (H200, 20261203-1125-attn-core-dense-combine.jsonl).
MIN_SPLIT_KEYS = 128
MAX_SPLITS = 128
# Split calls merge in the kernel (the last split of each block, ``FUSED_COMBINE``) instead of a combine
# launch. Off for dense / varlen calls: on the H200 the 8 qwen3-30b split rows ran 0.3-1.1 us slower merged (the
# last program merges alone at the tail; docs/perf/attn-core.md). ``forced(fused_combine=True)`` in tests / sweeps.
FUSED_COMBINE_DEFAULT = False
# RoPE on prefill shapes: rotate the keys once in a pre-pass (rope_rows_kernel) when several query blocks of a
# request read each key, instead of in every block's key loop. On the H200 (2026-12-01 21:20, tune-rope / tune-d64
# JSON) faster on every RoPE prefill row timed: gpt-oss-rope-interleaved 79.8 -> 56.4 us (f16; bf16 alike),
# prefill-rope 20.5 -> 20.4 with the default tile (19.2 at m64n64 / 3 splits). ``forced(rope_key_prepass=False)``
# keeps the in-loop rotation; decode shapes keep it either way.
ROPE_KEY_PREPASS_DEFAULT = True
ROPE_KEY_ELEMS = 4096  # key elements per pre-pass program (rows = this / padded D: no spills up to D = 512)
# 16-bit RoPE prefill calls that rotate every channel and that the warp-specialized kernel would serve without RoPE:
# queries and keys rotated in two pre-passes (``prerotated``), then that kernel. H200 (2026-12-03, benchmarks/results/
# h200/20261203-1518-attn-core-fp8ws-ropews-bwd.jsonl against the same rows' Triton times at 14:51): qwen-ragged-rope
# 127.5 -> 117.1 us, llama-8b-uniform-rope 56.2 -> 53.5; llama-8b-rope-partial (R = 64 of 128) 50.5 -> 55.4: the
# passes copy whole rows while the Triton kernel rotates only R channels, so partial rotations keep it (50.0 us
# again under this rule, 20261203-1527-attn-core-rope-partial.jsonl).
# ``forced(rope_ws=False)`` keeps the Triton kernel everywhere (queries rotated in its prologue).
ROPE_WS_DEFAULT = True


def _dim_class(head_dim: int) -> int:
    for d in (64, 128, 256, 512):
        if head_dim <= d:
            return d
    raise ValueError(f"head dim {head_dim} > 512 is not supported")


def is_decode(rows_per_request: int) -> bool:
    return rows_per_request <= DECODE_ROWS


def configs_for(head_dim: int, rows_per_request: int, fp8: bool = False,
                few_programs: bool = False) -> tuple[FwdConfig, ...]:
    """Every config this call shape may run (first = default); decode configs get BLOCK_M filled in.
    ``few_programs``: the grid has at most ``FEW_PROGRAMS_PER_SM`` programs per SM (``FEW_PROGRAMS_CONFIGS``' tile
    first where the head-dim class has one)."""
    d = _dim_class(head_dim)
    if is_decode(rows_per_request):
        bm = max(16, triton.next_power_of_2(max(rows_per_request, 1)))
        table = DECODE_CONFIGS[d]
        base = table[min(k for k in table if k >= bm)]
        # fp8 decode is memory-bound: upcasting Q/K costs nothing, so the fp8-MMA variant comes last
        cs = tuple(FwdConfig(bm, c.block_n, c.num_warps, c.num_stages, fp8_dot=not fp8) for c in base)
        if fp8:
            cs += (FwdConfig(bm, cs[0].block_n, cs[0].num_warps, cs[0].num_stages, fp8_dot=True),)
        return cs
    cs = (FP8_PREFILL_CONFIGS if fp8 else PREFILL_CONFIGS)[d]
    few = FEW_PROGRAMS_CONFIGS.get(d) if few_programs and not fp8 else None
    return cs if few is None else (few, *(c for c in cs if c != few))


def grid_programs(p: Problem, block_m: int) -> int:
    """Programs of a launch with ``block_m`` packed rows per block that have work (before KV splits): a varlen
    batch holds at most cdiv(T_q·G, block_m) + B non-empty blocks."""
    G = p.q.shape[-2] // p.k.shape[-2]
    total_tokens = p.q.shape[0] if p.varlen else p.q.shape[0] * p.q.shape[1]
    m_blocks = max(1, triton.cdiv(max(p.max_q, 0) * G, block_m))
    return min(p.batch * m_blocks, triton.cdiv(total_tokens * G, block_m) + p.batch) * p.k.shape[-2]


def choose_splits(programs: int, max_kv: int, sms: int, block_n: int = 1) -> int:
    """KV splits when the grid cannot fill the GPU: as many as keep every program resident in one wave
    (``sms // programs``), each split at least MIN_SPLIT_KEYS keys. 1 when ``programs`` already covers 3/4 of
    the SMs. One wave beat the former ~2 programs per SM on every split decode row timed on the H200 (2026-12-01
    21:20: llama-8b-32k 2 splits 251 us against 5: 268, llama-70b-32k 4: 134 against 9: 149; qwen3-30b-16k..256k
    33 splits 20.5-140 us against 64-66: 25.9-145). Splits are whole ``block_n`` tiles (``split_kv_range``): the
    count is lowered to the splits that get keys at that chunk size (prefill-scaled fp8: 28 tiles in 8 splits are
    7 chunks of 4 and an empty eighth, whose partial the combine would still merge)."""
    if programs <= 0 or programs * 4 >= sms * 3:
        return 1
    splits = max(1, min(sms // programs, max_kv // MIN_SPLIT_KEYS, MAX_SPLITS))
    tiles = triton.cdiv(max_kv, block_n)
    return max(1, triton.cdiv(tiles, triton.cdiv(tiles, splits))) if tiles else splits


_FORCED: dict[str, object] = {}


def forced(config: FwdConfig | ws_launch.WsConfig | None = None, num_splits: int | None = None,
           fused_combine: bool | None = None, rope_key_prepass: bool | None = None, rope_ws: bool | None = None):
    """Pin the tile config, the split count, where splits are merged (in the kernel or by a combine launch)
    and/or where RoPE keys are rotated (pre-pass or key loop) for every launch inside the block (tests,
    sweeps). ``rope_key_prepass=True`` applies to every 16-bit RoPE call, decode shapes included. A
    ``WsConfig`` runs the warp-specialized kernel (``ws_launch``; ValueError where it does not apply; RoPE calls
    rotated first, ``prerotated``). ``rope_ws``: whether the default sends RoPE calls to it (``ROPE_WS_DEFAULT``)."""
    return runtime.pinned(_FORCED, config=config, num_splits=num_splits, fused_combine=fused_combine,
                          rope_key_prepass=rope_key_prepass, rope_ws=rope_ws)


@dataclass
class Problem:
    """One call, in the kernel's terms. Dense: ``q [B, S_q, H, D]``; varlen: ``q [T_q, H, D]`` with
    ``cu_q / cu_kv`` and host bounds ``max_q / max_kv`` (used for the grid and the split choice)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    varlen: bool
    batch: int
    max_q: int
    max_kv: int
    cu_q: torch.Tensor | None = None
    cu_kv: torch.Tensor | None = None
    q_scale: torch.Tensor | None = None
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None
    rope_cos: torch.Tensor | None = None
    rope_sin: torch.Tensor | None = None
    rotary_dim: int = 0
    interleaved: bool = False
    sinks: torch.Tensor | None = None
    wl: int = 1 << 30
    wr: int = 1 << 30
    sm_scale: float = 1.0
    softcap: float = 0.0
    lse: torch.Tensor | None = None  # optional f32 base-2 lse output (dense [B, H, S_q]); forces one split


def _bsh_strides(t: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    return (0, t.stride(0), t.stride(1)) if varlen else (t.stride(0), t.stride(1), t.stride(2))


# (head-dim class, decode?, fp8?) -> index of the first config that compiled within the GPU's resources
_FITS: dict[tuple[int, bool, bool, bool], int] = {}


def launch(p: Problem) -> None:
    """Launch the forward (and the combine when split). Without a forced config, the first config of
    ``configs_for`` is used; one that exceeds the GPU's shared memory / registers (``OutOfResources``,
    raised before anything runs) falls through to the next, and the choice is remembered."""
    q, k = p.q, p.k
    total_tokens = q.shape[0] if p.varlen else q.shape[0] * q.shape[1]
    if total_tokens == 0 or p.batch == 0:
        return
    D, G = q.shape[-1], q.shape[-2] // k.shape[-2]
    fp8 = q.dtype == E4M3
    rows = max(p.max_q, 0) * G
    pinned = _FORCED.get("config")
    if isinstance(pinned, ws_launch.WsConfig):
        if not ws_serves(p):
            raise ValueError(f"{pinned.name}: the warp-specialized kernel does not serve this call")
        ws_run(p, pinned)
        return
    if pinned is not None:
        _launch(p, pinned)
        return
    if not is_decode(rows) and ws_serves(p) and (ws := ws_default(p)) is not None:
        ws_run(p, ws)
        return
    few = grid_programs(p, configs_for(D, rows, fp8)[0].block_m) <= FEW_PROGRAMS_PER_SM * runtime.num_sms()
    cands = configs_for(D, rows, fp8, few)
    key = (_dim_class(D), is_decode(rows), fp8, few)
    first = _FITS.get(key, 0)
    for i in range(first, len(cands)):
        try:
            _launch(p, cands[i])
        except triton.runtime.errors.OutOfResources:
            if i == len(cands) - 1:
                raise
            continue
        _FITS[key] = i
        return


def rope_keys_in_prepass(p: Problem, rows_per_request: int, block_m: int) -> bool:
    """Rotate the keys in a pre-pass: 16-bit RoPE calls whose requests span more than one query block (forced
    either way by ``forced(rope_key_prepass=...)``)."""
    if p.rope_cos is None or p.q.dtype == E4M3:
        return False
    if "rope_key_prepass" in _FORCED:
        return bool(_FORCED["rope_key_prepass"])
    return ROPE_KEY_PREPASS_DEFAULT and rows_per_request > block_m


def rotate_rows(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, interleaved: bool, *,
                batch: int, max_rows: int, cu: torch.Tensor | None = None,
                pos_off: torch.Tensor | None = None, keys: torch.Tensor | int | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """A contiguous copy of ``x`` (varlen ``[T, heads, D]`` packed by ``cu``, or dense ``[B, S, heads, D]``) with
    row i of each request rotated at position i (plus ``pos_off[b]``, int32 ``[B]``; or, with ``keys`` (varlen:
    cu_seqlens of the keys, dense: S_kv), at the queries' bottom-right positions ``kv_len − q_len + i``)
    (``rope_rows_kernel``); into ``out`` (x's shape, any strides) where given."""
    if out is None:
        out = testing.kernel_buffer(x.shape, x.dtype, x.device)
    heads, D = x.shape[-2], x.shape[-1]
    varlen = cu is not None
    rows = ROPE_KEY_ELEMS // triton.next_power_of_2(D)
    rope_rows_kernel[(triton.cdiv(max(max_rows, 1), rows), heads, batch)](
        x, out, cu if varlen else x, pos_off if pos_off is not None else x,
        keys if isinstance(keys, torch.Tensor) else x, cos, sin, 0 if varlen else x.shape[1],
        keys if isinstance(keys, int) else 0, cos.shape[0],
        *_bsh_strides(x, varlen), *_bsh_strides(out, varlen), cos.stride(0),
        HEAD_DIM=D, BLOCK_D=triton.next_power_of_2(D), BLOCK_T=rows, VARLEN=varlen,
        ROTARY_DIM=rotary_dim or D, INTERLEAVED=interleaved, POS_OFFSET=pos_off is not None,
        QUERY_ROWS=keys is not None, num_warps=4,
    )
    return out


def rotated_keys(p: Problem) -> torch.Tensor:
    """``p.k`` rotated at its positions in each request, contiguous."""
    return rotate_rows(p.k, p.rope_cos, p.rope_sin, p.rotary_dim, p.interleaved, batch=p.batch, max_rows=p.max_kv,
                       cu=p.cu_kv if p.varlen else None)


def prerotated(p: Problem) -> Problem:
    """``p`` with its queries and keys rotated in two pre-passes (queries at their bottom-right positions) and no
    RoPE left: the warp-specialized kernel's form of a 16-bit RoPE call."""
    q = rotate_rows(p.q, p.rope_cos, p.rope_sin, p.rotary_dim, p.interleaved, batch=p.batch, max_rows=p.max_q,
                    cu=p.cu_q if p.varlen else None, keys=p.cu_kv if p.varlen else p.k.shape[1])
    return dataclasses.replace(p, q=q, k=rotated_keys(p), rope_cos=None, rope_sin=None, rotary_dim=0,
                               interleaved=False)


def ws_serves(p: Problem) -> bool:
    """Whether the warp-specialized kernel serves ``p``: as it is, or (16-bit RoPE calls) after ``prerotated``."""
    if p.rope_cos is None:
        return ws_launch.applies(p)
    return p.q.dtype != E4M3 and ws_launch.applies(dataclasses.replace(p, rope_cos=None, rope_sin=None))


def ws_default(p: Problem) -> ws_launch.WsConfig | None:
    """The warp-specialized config a call ``ws_serves`` runs by default (None: the Triton kernel)."""
    if p.rope_cos is None:
        return ws_launch.default_config(p)
    if not _FORCED.get("rope_ws", ROPE_WS_DEFAULT) or p.rotary_dim not in (0, p.q.shape[-1]):
        return None
    return ws_launch.default_config(dataclasses.replace(p, rope_cos=None, rope_sin=None))


def ws_run(p: Problem, cfg: ws_launch.WsConfig) -> None:
    """Run ``p`` (``ws_serves(p)`` holds) on the warp-specialized kernel with ``cfg``."""
    ws_launch.launch(prerotated(p) if p.rope_cos is not None else p, cfg)


def tma_applies(p: Problem) -> bool:
    """Whether a ``-tma`` config runs its TMA path for this call (else it runs the pointer path): Hopper
    or the interpreter; 16-bit K/V without RoPE; a power-of-two head dim; K/V row, head and batch strides
    and base addresses 16-byte aligned (TMA's rules for the per-request descriptors)."""
    if not (runtime.interpreting() or runtime.is_hopper()):
        return False
    D = p.q.shape[-1]
    if p.q.dtype == E4M3 or p.rope_cos is not None or D != triton.next_power_of_2(D):
        return False
    for t in (p.k, p.v):
        if t.data_ptr() % 16 or any(s * t.element_size() % 16 for s in t.stride()[:-1]):
            return False
    return True


def _launch(p: Problem, cfg: FwdConfig) -> None:
    q, k, v, o = p.q, p.k, p.v, p.out
    H, D = q.shape[-2], q.shape[-1]
    H_kv = k.shape[-2]
    G = H // H_kv
    total_tokens = q.shape[0] if p.varlen else q.shape[0] * q.shape[1]
    fp8 = q.dtype == E4M3
    rows = max(p.max_q, 0) * G
    num_m_blocks = max(1, triton.cdiv(rows, cfg.block_m))
    programs = grid_programs(p, cfg.block_m)
    kv_span = p.max_kv if p.wl >= p.max_kv else min(p.max_kv, p.wl + p.max_q + 1)
    num_splits = _FORCED.get("num_splits") or choose_splits(programs, kv_span, runtime.num_sms(), cfg.block_n)
    if p.lse is not None:
        num_splits = 1
    split = num_splits > 1
    block_d = triton.next_power_of_2(D)

    fused = split and bool(_FORCED.get("fused_combine", FUSED_COMBINE_DEFAULT))
    dummy = q  # never read: pointers of absent optional inputs
    if split:
        ws_o = testing.kernel_buffer((num_splits, total_tokens, H, D), torch.float32, q.device)
        ws_lse = testing.kernel_buffer((num_splits, total_tokens, H), torch.float32, q.device)
        lse_arg = ws_lse
    else:
        ws_o = dummy
        lse_arg = p.lse if p.lse is not None else dummy
    counters = runtime.arrival_counters(q.device, p.batch * H_kv * num_m_blocks) if fused else dummy
    softcap = float(p.softcap or 0.0)
    S_q = 0 if p.varlen else q.shape[1]
    S_kv = 0 if p.varlen else k.shape[1]
    tma = cfg.tma and tma_applies(p)
    if tma:
        runtime.ensure_descriptor_scratch()
    rope_k_in_loop = p.rope_cos is not None
    if rope_k_in_loop and rope_keys_in_prepass(p, rows, cfg.block_m):
        k, rope_k_in_loop = rotated_keys(p), False
    grid = (num_m_blocks, H_kv, p.batch * num_splits)
    gqa_fwd_kernel[grid](
        q, k, v, o, ws_o, lse_arg,
        p.cu_q if p.varlen else dummy, p.cu_kv if p.varlen else dummy,
        p.q_scale if fp8 else dummy, p.k_scale if fp8 else dummy, p.v_scale if fp8 else dummy,
        p.rope_cos if p.rope_cos is not None else dummy, p.rope_sin if p.rope_sin is not None else dummy,
        p.sinks if p.sinks is not None else dummy, counters,
        S_q, S_kv, H, H_kv, G, num_m_blocks, num_splits, total_tokens,
        p.sm_scale * LOG2E, (p.sm_scale / softcap) if softcap else 0.0, softcap * LOG2E, p.wl, p.wr,
        *_bsh_strides(q, p.varlen), *_bsh_strides(k, p.varlen), *_bsh_strides(v, p.varlen),
        *_bsh_strides(o, p.varlen),
        p.rope_cos.stride(0) if p.rope_cos is not None else 0,
        HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        VARLEN=p.varlen, SPLIT=split, IS_FP8=fp8, FP8_DOT=fp8 and cfg.fp8_dot,
        COMPUTE_BF16=o.dtype == torch.bfloat16, SOFTCAP=softcap > 0, HAS_SINK=p.sinks is not None,
        ROPE=p.rope_cos is not None, ROTARY_DIM=p.rotary_dim or D, INTERLEAVED=p.interleaved,
        EXACT_DOT=runtime.interpreting(), ROPE_K=rope_k_in_loop, TMA=tma, NUM_STAGES=cfg.num_stages,
        FUSED_COMBINE=fused, WRITE_LSE=p.lse is not None, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if split and not fused:
        # output row = token·H + head; a dense token is b·S_q + query
        b_stride, t_stride, h_stride = _bsh_strides(o, p.varlen)
        placement = (1, t_stride, 0, h_stride) if p.varlen else (max(S_q, 1), b_stride, t_stride, h_stride)
        combine_splits(ws_o, ws_lse, o, rows=total_tokens * H, heads=H, num_splits=num_splits, row_stride=1,
                       split_stride=total_tokens * H, out_strides=placement, sinks=p.sinks)
