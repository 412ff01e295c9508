"""Host-side schedule of the paged attention kernels: computed once per batch layout, reused by every run.

A plan lists the work items of each launch (request, block of packed query rows, KV split) heaviest
first, sizes the split-KV workspace and holds the combine list. It depends on the query lengths (how many
row blocks each request has) and, for the split decision only, on the KV lengths it was built with:
kernels read the actual lengths from the device at run time, so a plan stays *correct* while KV lengths
change (decode steps) as long as the query lengths do not; it may only become less balanced. Running with
a plan never syncs with the host and allocates only the output: CUDA-graph safe.

Two tile classes: requests with at most ``SMALL_ROWS`` packed rows (q_len·G, decode and short
speculative chunks) use a 16-row tile and are memory-bound; longer ones use the large tile (flash forward,
compute-bound). Each class is one launch (+ one combine launch when some of its items are split).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import triton

from attnops.attn_core.flash_fwd import ws_launch
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.attention_fns import window_bounds

from . import beside, tail_split

SMALL_ROWS = 16
# Programs per SM the latency rule's decision counts with (rounded up): a decode launch whose 256-key splits of
# that many programs would still leave half the SMs idle is latency-bound.
TARGET_PROGRAMS_PER_SM = 4
# Decode programs resident per SM (registers, sm_90 builds): two for every decode tile (D = 64 111 regs at 8 warps,
# D = 128 197 with the per-key page gather, 189 with RoPE, 179 over an fp8 pool; D = 256 128 at 8 warps), three for
# the D = 128 tile reading one page per tile (167 regs, with or without sinks / softcap / the fused merge). A
# bandwidth-bound decode launch splits so that its programs fill those slots once; past one wave, to the split count
# whose last wave is fullest. Every measured curve follows the partial last wave. H200, forced split counts
# (2026-12-03 13:00, benchmarks/results/h200/20261203-1300-tune-paged-splits.json, µs): llama-70b-p16 (264 slots,
# 64 programs a split) 4 / 5 / 6 splits = 0.97 / 1.21 / 1.45 waves: 47.8 / 64.5 / 59.1; llama-70b-p64 (396 slots)
# 4 / 5 / 6 = 47.0 / 47.3 / 47.2, 8 (1.29 waves) 55.8; llama-8b-32k-p64 4 / 6 = 269.7 / 255.8; llama-8b-b64-p64 (512
# programs a split) 1 / 2 / 3 = 1.29 / 2.59 / 3.88 waves: 164.9 / 147.8 / 146.9; llama-8b-b64-p16 1 (1.94) 147.8;
# llama-8b-p64 (256) 1 / 2 / 3: 139.8 / 168.8 / 142.2. SPLIT_PROGRAMS_PER_SM: the residency a plan assumes when its
# caller does not say (``gqa_paged_plan`` without ``resident_per_sm``); the first form of the rule (two per SM,
# attn-core 0.3.14) measured beside the peers: 20261203-1306-attn-core-paged-split-rule.jsonl.
SPLIT_PROGRAMS_PER_SM = 2
MAX_OVERFLOW_SPLITS = 4  # past one wave: the split counts tried for the fullest last wave
MIN_SPLIT_KEYS = {"small": 256, "large": 1024}
# Split blocks merged by their last split inside the attention kernel instead of a combine launch: on the H200
# (2026-12-01 21:20, benchmarks/results/h200/20261201-2120-tune-paged*.json) 27 % faster on llama-405b-p256, 10 % on
# llama-70b-p16, 1-4 % on the other split rows, never more than 1 % slower (``fused_combine=False`` per plan
# restores the combine launch).
FUSED_COMBINE_DEFAULT = True
# Pool tiles that lie in one page (page_size a multiple of BLOCK_N) read one table entry per tile instead of a
# per-key gather: the default for both launch kinds (H200: every one of 13 decode rows 3-10 % faster on
# 2026-12-01; the prefill tiles 11-23 % faster on the 4 prefill-op and 3 GQAPagedFwd prefill rows of the 21:20
# sweep, never slower; docs/perf/attn-core.md). ``tile_in_page=False`` per plan restores the per-key gather.
TILE_IN_PAGE_DEFAULT = frozenset({"small", "large"})
# Power-of-two page sizes: per-key page / slot by shift and mask instead of an integer division by the runtime
# page size (the tiles ``tile_in_page`` does not cover: pages smaller than the tile, the prefill kind). H200
# (2026-12-02 16:25, 20261202-1625-tune-paged-p16-32k.json, 8-warp tiles): 3-4 % faster on the three p16 rows,
# level on llama-8b-32k-p64 (tile_in_page covers it); offline sm_90 the 4-warp D = 128 decode loop 891 -> 653
# SASS. ``pow2_pages=False`` per plan restores the division.
POW2_PAGES_DEFAULT = True
# The large class on the warp-specialized kernel (flash_fwd/ws_kernel.py, paged layout, the head dim's
# ws_launch.PAGED_DEFAULTS config) where ws_launch.worth_it says so. H200, 2026-12-02 03:52 (benchmarks/results/h200/
# 20261202-0352-attn-core-paged-ws.jsonl, beside the peers): GQAPagedFwd/llama-8b 949 -> 483 us, serving-step 368 ->
# 277, qwen3-ragged-odd 343 -> 187, prefill op starcoder 669 -> 411, llama-8b-rope 1110 -> 569; every row checked.
WS_DEFAULT = True


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


# (class, head dim) -> tile config. Every entry is exercised by tests/test_gqa_paged_fwd.py::test_every_config
# on the GPU; the CPU tests run them through the interpreter on shrunk shapes. Compiled for sm_90 without a
# GPU (benchmarks/sm90_compile_paged.py): no spills except large D=256 with the prefill op's RoPE (136 B at
# R = D, 72 B at R = 64; 196 B before the contiguous RoPE tables; (64, 32, 8, 2) had none) and 12-16 B in two
# small D=64 variants; shared memory <= 192 KB.
CONFIGS: dict[tuple[str, int], TileConfig] = {
    # small (decode) tiles: 8 warps keep registers at 115-150 (4 warps: ~210) -> more tiles in flight per SM;
    # but at D = 128 the 4-warp tile was faster on every decode row swept on the H200 (2026-12-01 21:20 and
    # 2026-12-02 16:25, benchmarks/results/h200/*tune-paged*.json): 0.82x the 8-warp time on llama-8b-32k-p64,
    # 0.93-0.98x on the p16 / p256 / serving rows, level on llama-70b-p16. At D = 64 only where the splits are
    # long (LONG_SPLIT_CONFIGS).
    ("small", 64): TileConfig(16, 128, 8, 3),
    ("small", 128): TileConfig(16, 64, 4, 3),
    ("small", 256): TileConfig(16, 32, 8, 3),
    ("large", 64): TileConfig(128, 64, 8, 3),
    ("large", 128): TileConfig(128, 64, 8, 3),
    ("large", 256): TileConfig(64, 64, 8, 2),
}
# Latency-bound decode launches (256-key splits would give the small class at most half as many programs as
# SMs: one short request, MHA serving rows, the decode part of a short mixed batch) split down to
# LATENCY_SPLIT_KEYS keys and, at D = 128, take the 8-warp 128-key tile. H200, 2026-12-03 (benchmarks/results/
# h200/20261203-0825-tune-paged-latency-concurrent.json, against ``latency=False``): MHA serving-p128 11.6 -> 9.0
# us, serving-b2 / kv1k / kv512 / speculative 8.8 / 8.7 / 8.2 / 10.5 -> 7.8 / 7.6 / 6.6 / 9.8, qwen-ragged-rope
# 42.1 -> 37.5; but llama-8b-noncausal (112 programs at 256-key splits) 34.6 -> 38.4, hence half the SMs.
LATENCY_SPLIT_KEYS = 128
LATENCY_CONFIGS: dict[tuple[str, int], TileConfig] = {("small", 128): TileConfig(16, 128, 8, 2)}
# Bandwidth-bound decode launches whose every split reads at least LONG_SPLIT_KEYS keys take these tiles. At D = 64
# the 4-warp tile is faster on long splits and slower on short ones (H200, 2026-12-04, benchmarks/results/h200/
# 20261204-1727-tune-paged-opt13.json and -1737-tune-paged-d64.json, µs, 4 / 8 warps): MHA opt-1.3b-b16 (one split
# of 2048 keys) 73.9 / 84.2; opt-1.3b-b1 (8 splits of 256) 14.4 / 12.6; the latency rows (128-key splits: serving-b2,
# kv1k, kv512, speculative) 9.6 / 7.7, 9.3 / 7.4, 7.4 / 6.4, 10.6 / 9.4; gpt-oss-sink-decode 18.9 / 19.1.
LONG_SPLIT_KEYS = 1024
LONG_SPLIT_CONFIGS: dict[tuple[str, int], TileConfig] = {("small", 64): TileConfig(16, 128, 4, 3)}
# Mixed batches whose prefill class runs the Triton tile: the decode requests as items of the prefill launch (one
# launch instead of two; a decode item on the 128-row tile wastes MMA rows but reads its keys once). H200 Nsight,
# 2026-12-03: llama-8b-noncausal's two launches ran one after the other (prefill 20.7 us on 64 programs, decode
# 13.0 us on 112), gpt-oss-sink-mixed's 16.0 + 8.1 us; a side-stream decode launch did not overlap them. Merged
# (benchmarks/results/h200/20261203-0925-tune-merge-small.json, against two launches): noncausal 34.1 -> 22.7 us,
# qwen-ragged-rope 37.4 -> 25.1, sink-mixed 21.6 -> 16.8, gpt-oss-120b-window 26.6 -> 25.9, serving-step and
# ragged-odd within 1 %. The merged launch's D = 64 tile: the 4-warp 128x64 one (sink-mixed 14.0 us,
# 120b-window 23.1); at D = 128 the default tile stays (128x128: noncausal 21.4 but qwen-ragged-rope 27.9).
MERGE_SMALL_DEFAULT = True
MERGED_CONFIGS: dict[tuple[str, int], TileConfig] = {("large", 64): TileConfig(128, 64, 4, 3)}
# ``_merge_pays``: the decode launch a merge saves costs 6-13 µs on the H200 (sink-mixed's: 8.1 µs for 8 programs
# over 128 keys); the 128-row tile spends ~0.04 µs per key (noncausal: 20.7 µs for 512), so the decode blocks may
# add up to ~256 keys to the prefill launch. The four measured rows add 0-50 (gpt-oss-120b-window: 50, 25.8 ->
# 22.2 µs merged); long decodes beside a prefill add thousands and keep two launches.
MERGE_LAUNCH_KEYS = 256
# Mixed batches whose prefill requests give the unpacked ws config too few tiles (``_packed_merge``): the G query
# heads of a KV head packed into one ws tile, decode requests in the same launch. H200, 2026-12-03, every variant
# checked (benchmarks/results/h200/20261203-2300-tune-ws-packed-noncausal.json, 20261203-2310-tune-ws-packed-mixed
# .json): llama-8b-noncausal 22.6 -> 16.0 µs (FA3 published 16.4; packed without the decode requests: 27.9). D = 64
# has none: gpt-oss-sink-mixed (G = 8, 128-key window) ran 18.2 packed and merged against the Triton tile's 13.8.
# Where the unpacked config already runs, packing did not pay: serving-step 247.2 against 251.6 (within 2 %),
# qwen3-ragged-odd 196.9 / 182.0, llama-8b (no decode requests, packed alone) 495.4 / 480.3.
PACKED_MERGE_DEFAULTS: dict[int, ws_launch.WsConfig] = {128: ws_launch.WsConfig(64, 3, True, pack_gqa=True)}
# The warp-specialized launch's lightest query blocks split over their keys where its last round of tiles would
# leave SMs idle (``tail_split``; one head a tile). Written 2026-12-04 without a GPU: qwen35-9b-rope's 2048 tiles of
# ~33 k keys are 15.5 rounds on 132 SMs, run in 16; splitting its 3 lightest blocks in 3 shortens the modelled
# launch by 1.9 %, the combine included (the split build's key loop is 3 SASS longer, ~0.7 %). Off: on the H200
# (2026-12-05, 40 iterations) it moved qwen35-9b-rope -1.4 % on ``ws-n64s2-ov-kr`` and +1.9 to +5.8 % on two other
# tiles, on the H100 (2026-12-06) qwen35-9b-mixed +1 % and -3 % in two runs (noise either way; ``ws_tail=True``
# per plan forces it, benchmarks/tune_attn_core_paged.py --ws times both).
WS_TAIL_SPLITS_DEFAULT = False
# A mixed batch's decode launch beside its persistent warp-specialized prefill launch, on the SMs the prefill leaves
# it (``beside``; ``small_beside`` per plan). Written 2026-12-05 without a GPU: modelled serving-step 252 -> ~192 µs
# (measured 255 one after the other), nothing on another seed row. Off: on an H100 (2026-12-06) serving-step ran
# 322-368 µs beside against 294 one after the other (the decodes lose their bandwidth beside the prefill;
# docs/perf/attn-core.md). benchmarks/tune_attn_core_paged.py --ws times the model's choice and forced SM counts.
SMALL_BESIDE_DEFAULT = False


def config_key(kind: str, head_dim: int) -> tuple[str, int]:
    """D = 16 / 32 use the D = 64 tiles."""
    return kind, max(64, head_dim)


def decode_residency(head_dim: int, page_size: int, rope: bool, fp8_pool: bool) -> int:
    """Decode programs of the small class resident per SM for a call (see ``SPLIT_PROGRAMS_PER_SM``; checked
    against the sm_90 builds' registers by ``benchmarks/sm90_compile_paged.py``)."""
    one_page_per_tile = page_size % CONFIGS[config_key("small", head_dim)].block_n == 0
    return 3 if head_dim == 128 and one_page_per_tile and not rope and not fp8_pool else SPLIT_PROGRAMS_PER_SM


def wave_splits(programs_per_split: int, slots: int) -> int:
    """Splits per block for a bandwidth-bound launch of ``programs_per_split`` programs a split on ``slots``
    resident programs: as many as fill the slots once; where one split already overflows them, the count of at
    most ``MAX_OVERFLOW_SPLITS`` whose waves are fullest (fewest waves per split; fewer splits on a tie)."""
    if programs_per_split <= slots:
        return max(1, slots // programs_per_split)
    waves = lambda s: -(-programs_per_split * s // slots) / s  # noqa: E731
    return min(range(1, MAX_OVERFLOW_SPLITS + 1), key=lambda s: (waves(s), s))


@dataclass
class Launch:
    kind: str  # "small" | "large"
    cfg: TileConfig
    items: torch.Tensor  # [n, 5] int32: b, m_block, split, num_splits, slot
    combine: torch.Tensor  # [n_c, 4] int32: b, m_block, first slot, num_splits
    part_o: torch.Tensor  # [n_slots, H_kv, BLOCK_M, D] f32 (may be empty)
    part_lse: torch.Tensor  # [n_slots, H_kv, BLOCK_M] f32
    counters: torch.Tensor | None = None  # >= n_slots · H_kv int32 zeros (shared): merged in the kernel
    tile_in_page: bool = False  # one table entry per pool tile where page_size allows (TILE_IN_PAGE_DEFAULT)
    # the warp-specialized kernel's config and work ([n, 2] int32: b, block of ws_launch.BLOCK_M query tokens;
    # heaviest first): run_plan launches it instead of the Triton kernel where ws_launch.paged_applies holds
    ws: ws_launch.WsConfig | None = None
    ws_items: torch.Tensor | None = None
    ws_splits: ws_launch.PagedSplits | None = None  # its split blocks (``ws_tail``): ws_items then has 4 columns
    ws_programs: int | None = None  # its persistent grid's size where a launch runs beside it (default: every SM)
    beside: bool = False  # (small class) on a side stream beside the large ws launch, which leaves it its SMs

    @property
    def n_items(self) -> int:
        return self.items.shape[0]

    @property
    def n_combine(self) -> int:
        """Blocks the combine kernel merges (0 when the attention kernel merges them itself)."""
        return 0 if self.counters is not None else self.combine.shape[0]


@dataclass
class PagedAttentionPlan:
    """What ``plan_paged_attention`` computed; pass it as ``plan=`` to the op to skip planning."""

    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    window: tuple[int, int]  # (WL, WR) of attention_fns.window_bounds
    new_keys: bool
    device: torch.device
    launches: list[Launch] = field(default_factory=list)
    pow2_pages: bool = False  # shift / mask page addressing where the page size is a power of two

    def describe(self) -> str:
        parts = []
        for ln in self.launches:
            splits = int(ln.items[:, 3].max()) if ln.n_items else 0
            parts.append(f"{ln.kind}: {ln.n_items} items (max {splits} splits, {ln.n_combine} combined), "
                         f"BM={ln.cfg.block_m} BN={ln.cfg.block_n} w={ln.cfg.num_warps} s={ln.cfg.num_stages}")
            if ln.ws is not None:
                tail = ln.ws_splits
                parts[-1] += f", ws {ln.ws.name}" + (f" ({tail.block_start.shape[0]} blocks in {tail.n_splits} "
                                                     f"splits)" if tail is not None else "")
                parts[-1] += f" on {ln.ws_programs} programs" if ln.ws_programs is not None else ""
            if ln.beside:
                parts[-1] += ", beside it"
        return "; ".join(parts)

    def check_matches(self, q_lens, num_heads: int, num_kv_heads: int, head_dim: int, window, new_keys: bool):
        """Raise ValueError if the plan was built for another layout (host values: no device sync)."""
        if (num_heads, num_kv_heads, head_dim) != (self.num_heads, self.num_kv_heads, self.head_dim):
            raise ValueError(f"plan: built for H={self.num_heads}, H_kv={self.num_kv_heads}, D={self.head_dim}, "
                             f"got H={num_heads}, H_kv={num_kv_heads}, D={head_dim}")
        if tuple(window) != self.window or new_keys != self.new_keys:
            raise ValueError("plan: built for another mask (is_causal / window sizes)")
        if q_lens is not None and tuple(q_lens) != self.q_lens:
            raise ValueError(f"plan: built for query lengths {list(self.q_lens)[:8]}, got {list(q_lens)[:8]}")


def _key_span(q_len: int, kv_len: int, t_lo: int, t_hi: int, wl: int, wr: int) -> int:
    """Keys rows of tokens [t_lo, t_hi] visit (all sources together)."""
    off = kv_len - q_len
    lo = max(0, off + t_lo - wl)
    hi = min(kv_len, off + t_hi + wr + 1)
    return max(0, hi - lo)


def _splits(pool_span: int, block_n: int, min_keys: int, want: int, forced: bool) -> int:
    """KV splits of one block: forced, exactly ``want`` (some may be empty); else at most one per ``min_keys``
    keys and per key tile, at most ``want``."""
    if forced:
        return want
    return max(1, min(want, max(1, triton.cdiv(pool_span, block_n)), pool_span // min_keys))


def plan_paged_attention(q_lens, kv_lens, *, num_heads: int, num_kv_heads: int, head_dim: int,
                         is_causal: bool = True, window_size_left: int = -1, window_size_right: int = -1,
                         new_keys: bool = False, device=None, num_splits: int | None = None,
                         configs: dict | None = None, programs_per_sm: int | None = None,
                         fused_combine: bool | None = None, tile_in_page: bool | None = None,
                         min_split_keys: int | None = None, pow2_pages: bool | None = None,
                         ws: ws_launch.WsConfig | bool | None = None,
                         latency: bool | None = None, merge_small: bool | None = None,
                         resident_per_sm: int | None = None,
                         ws_tail: bool | tuple[int, int] | None = None,
                         small_beside: bool | int | None = None) -> PagedAttentionPlan:
    """Schedule one batch layout. ``q_lens`` / ``kv_lens``: per-request host ints (``kv_lens`` = pool keys;
    with ``new_keys`` the request also has its q_len new keys). Tuning / test knobs: ``num_splits`` forces
    the KV split count of every item; ``configs`` overrides ``CONFIGS`` entries; ``programs_per_sm``
    replaces ``TARGET_PROGRAMS_PER_SM`` and the decode residency in the split heuristic; ``resident_per_sm``:
    the decode programs resident per SM for the call's kernel variant (``decode_residency``; default
    ``SPLIT_PROGRAMS_PER_SM``); ``fused_combine`` (default ``FUSED_COMBINE_DEFAULT``) merges split blocks in
    the attention kernel. A fused plan's counters (the
    ``runtime.arrival_counters`` of the stream current when it is built) return to 0 after every run: run it
    on that stream, stream-ordered with the other kernels that use them (as its workspace already requires);
    ``tile_in_page`` (default: ``TILE_IN_PAGE_DEFAULT``'s launch kinds) reads one table entry per pool tile
    when the page size is a multiple of the key tile; ``min_split_keys`` replaces ``MIN_SPLIT_KEYS`` (both
    classes) in the split heuristic (latency rows: more, shorter splits); ``pow2_pages`` (default
    ``POW2_PAGES_DEFAULT``) addresses power-of-two pages by shift and mask; ``ws``: the large class on the
    warp-specialized kernel when the call allows it (``run_plan``): a ``WsConfig`` forces that config, True
    the default config where ``ws_launch.worth_it`` says so, False never (default ``WS_DEFAULT``); ``latency``:
    the small class's latency rule (``LATENCY_SPLIT_KEYS`` / ``LATENCY_CONFIGS`` where it would give at most
    half as many programs as SMs; None: that rule, True: always, False: never; an explicit ``min_split_keys`` or
    small config wins); ``merge_small``: a mixed batch's decode requests join the prefill class's launch when that
    launch runs the Triton tile (None: where ``_merge_pays`` and ``MERGE_SMALL_DEFAULT``, True: always, and with
    a warp-specialized large class whose config packs GQA heads, into its launch too; False: never). Outside the
    latency rule, a small class whose every split reads >= ``LONG_SPLIT_KEYS`` keys takes ``LONG_SPLIT_CONFIGS``'
    tile for its head dim (unless ``configs`` names one). ``ws_tail``: the warp-specialized launch's lightest whole
    blocks split over their keys where ``tail_split.choose`` finds its last round fuller (None:
    ``WS_TAIL_SPLITS_DEFAULT``, True: that rule, False: never, ``(k, s)``: the last k blocks in s shares).
    ``small_beside``: a mixed batch's decode launch on a side stream beside the persistent warp-specialized large
    launch, which then runs on fewer programs and leaves the other SMs to it (None: ``SMALL_BESIDE_DEFAULT``, True:
    where ``beside.choose`` says it pays, with its SM count, False: never, an int R: R SMs left to it)."""
    device = torch.device(device) if device is not None else runtime.device()
    group = num_heads // num_kv_heads
    wl, wr = window_bounds(is_causal, window_size_left, window_size_right)
    table = {**CONFIGS, **(configs or {})}
    q_lens = tuple(int(x) for x in q_lens)
    kv_lens = tuple(int(x) for x in kv_lens)
    plan = PagedAttentionPlan(q_lens, kv_lens, num_heads, num_kv_heads, head_dim, (wl, wr), new_keys, device,
                              pow2_pages=POW2_PAGES_DEFAULT if pow2_pages is None else pow2_pages)
    sms = runtime.num_sms()
    work = _ws_work(q_lens, kv_lens, num_heads, head_dim, wl, wr, new_keys, group, ws, device, merge_small, ws_tail,
                    small_beside)
    reserved = sms - work.programs if work.programs is not None else 0  # SMs the large launch leaves the small one
    small = [q * group <= SMALL_ROWS for q in q_lens]
    large_key = config_key("large", head_dim)
    merged_cfg = MERGED_CONFIGS.get(large_key) if large_key not in (configs or {}) else None
    merged_cfg = merged_cfg or table[large_key]
    shape = (q_lens, kv_lens, group, wl, wr, new_keys)
    merged = work.merged  # (a packed ws launch that took the decode requests: the Triton items of its fallback match)
    if merge_small is not False and work.cfg is None:
        large_blocks = _class_blocks(*shape, [not x for x in small], merged_cfg.block_m, True)
        small_blocks = _class_blocks(*shape, small, merged_cfg.block_m, True)
        merged = bool(large_blocks and small_blocks) and (
            merge_small or (MERGE_SMALL_DEFAULT
                            and _merge_pays(large_blocks, small_blocks, num_kv_heads, sms, merged_cfg)))
    if merged:
        small = [False] * len(q_lens)
    for kind in ("large", "small"):
        cfg = merged_cfg if merged and kind == "large" else table[config_key(kind, head_dim)]
        bm = cfg.block_m
        blocks = _class_blocks(*shape, [x == (kind == "small") for x in small], bm, kind == "large")
        if not blocks:
            continue
        n0 = len(blocks) * num_kv_heads
        class_sms = reserved if kind == "small" and reserved else sms  # (beside: the SMs the large launch leaves)
        if num_splits is not None:
            want = max(1, num_splits)
        elif kind == "small":
            want = max(1, math.ceil((programs_per_sm or TARGET_PROGRAMS_PER_SM) * class_sms / n0))
        else:
            want = max(1, math.ceil(sms / n0)) if n0 < sms else 1
        forced = num_splits is not None
        min_keys = min_split_keys or MIN_SPLIT_KEYS[kind]
        if kind == "small" and latency is not False and (latency or 2 * num_kv_heads * sum(
                _splits(span, cfg.block_n, min_keys, want, forced) for _, _, span, _, _ in blocks) <= class_sms):
            if min_split_keys is None:
                min_keys = LATENCY_SPLIT_KEYS
            if configs is None or config_key(kind, head_dim) not in configs:
                cfg = LATENCY_CONFIGS.get(config_key(kind, head_dim), cfg)
        elif kind == "small" and not forced:
            want = wave_splits(n0, (programs_per_sm or resident_per_sm or SPLIT_PROGRAMS_PER_SM) * class_sms)
            if (configs is None or config_key(kind, head_dim) not in configs) and all(
                    span // _splits(span, cfg.block_n, min_keys, want, False) >= LONG_SPLIT_KEYS
                    for _, _, span, _, _ in blocks):
                cfg = LONG_SPLIT_CONFIGS.get(config_key(kind, head_dim), cfg)
        items, combine, slot = [], [], 0
        for b, m, pool_span, cost, _ in blocks:
            s = _splits(pool_span, cfg.block_n, min_keys, want, forced)
            if s == 1:
                items.append((cost, (b, m, 0, 1, -1)))
            else:
                combine.append((b, m, slot, s))
                for i in range(s):
                    items.append((cost / s, (b, m, i, s, slot + i)))
                slot += s
        items.sort(key=lambda x: -x[0])  # heaviest first: the block scheduler fills the tail with light ones
        item_t = torch.tensor([it for _, it in items], dtype=torch.int32).reshape(-1, 5).to(device)
        comb_t = torch.tensor(combine, dtype=torch.int32).reshape(-1, 4).to(device)
        part_o = testing.kernel_buffer((slot, num_kv_heads, bm, head_dim), torch.float32, device)
        part_lse = testing.kernel_buffer((slot, num_kv_heads, bm), torch.float32, device)
        fused = FUSED_COMBINE_DEFAULT if fused_combine is None else fused_combine
        # the shared per-(device, stream) counters of the flash / MLA kernels: zeroed once, left at 0 by every
        # run, so a plan built per call adds no fill kernel to the call
        counters = runtime.arrival_counters(device, slot * num_kv_heads) if fused and slot else None
        tile = kind in TILE_IN_PAGE_DEFAULT if tile_in_page is None else tile_in_page
        ln = Launch(kind, cfg, item_t, comb_t, part_o, part_lse, counters, tile,
                    beside=kind == "small" and reserved > 0)
        if kind == "large":
            ln.ws, ln.ws_items, ln.ws_splits, ln.ws_programs = work.cfg, work.items, work.splits, work.programs
        plan.launches.append(ln)
    return plan


def _class_blocks(q_lens, kv_lens, group: int, wl: int, wr: int, new_keys: bool, members, bm: int,
                  large: bool) -> list[tuple[int, int, int, float, int]]:
    """(b, m_block, pool key span, cost, key span) of every ``bm``-row block of packed query rows of the member
    requests (``members[b]``; empty requests have none)."""
    blocks = []
    for b, (q, c) in enumerate(zip(q_lens, kv_lens)):
        if q == 0 or not members[b]:
            continue
        total = c + q if new_keys else c
        for m in range(math.ceil(q * group / bm)):
            t_lo = m * bm // group
            t_hi = min(q, -(-(m * bm + bm) // group)) - 1
            span = _key_span(q, total, t_lo, t_hi, wl, wr)
            rows = min(bm, q * group - m * bm)
            cost = span * (1.0 + (rows / 16.0 if large else 0.0))
            blocks.append((b, m, min(span, c) if new_keys else span, cost, span))
    return blocks


def _merge_pays(large_blocks, small_blocks, num_kv_heads: int, sms: int, cfg: TileConfig) -> bool:
    """Whether a mixed batch's decode blocks join the prefill launch by default. A decode block on the prefill tile
    pays the whole tile's MMAs over its keys. A launch's time is modelled in keys of one program: its blocks' key
    work spread over the programs in flight (one 8-warp or two 4-warp programs per SM: the tiles' registers), or
    its longest block after the planner's split heuristic (more blocks: fewer splits). Merging pays when the decode
    blocks add at most ``MERGE_LAUNCH_KEYS`` to the prefill launch's time: the decode launch's fixed cost, saved."""
    in_flight = sms * max(1, 8 // cfg.num_warps)

    def launch_keys(blocks) -> float:
        n0 = len(blocks) * num_kv_heads
        want = max(1, math.ceil(sms / n0)) if n0 < sms else 1
        longest = max(span / _splits(pool_span, cfg.block_n, MIN_SPLIT_KEYS["large"], want, False)
                      for _, _, pool_span, _, span in blocks)
        return max(num_kv_heads * sum(span for *_, span in blocks) / in_flight, longest)

    return launch_keys(large_blocks + small_blocks) - launch_keys(large_blocks) <= MERGE_LAUNCH_KEYS


class _WsWork(NamedTuple):
    """The large class's work for the warp-specialized kernel (``_ws_work``)."""

    cfg: ws_launch.WsConfig | None = None  # None: the Triton kernel
    items: torch.Tensor | None = None  # heaviest first
    merged: bool = False  # the small class's requests are items too
    splits: ws_launch.PagedSplits | None = None  # the split blocks (``_tail_items``)
    programs: int | None = None  # the persistent grid, leaving the other SMs to the small launch beside it


def _ws_work(q_lens, kv_lens, num_heads: int, head_dim: int, wl: int, wr: int, new_keys: bool, group: int, ws,
             device, merge_small: bool | None = None, ws_tail: bool | tuple[int, int] | None = None,
             small_beside: bool | int | None = None) -> _WsWork:
    """The large class's work for the warp-specialized kernel, or ``_WsWork()`` (the Triton kernel) when ``ws``
    (see ``plan_paged_attention``) or its default rule says no. The small class's requests join where the
    config packs a KV head's query heads into one tile and ``merge_small`` is True, or by default where
    ``_packed_merge`` takes the batch (one launch for a mixed batch; without packing a decode item filled a 128-row
    tile per query head: 33.6 against 23.1 µs on llama-8b-noncausal, H200 2026-12-03)."""
    if ws is None:
        ws = WS_DEFAULT
    if not (small_beside is None or isinstance(small_beside, (bool, int))):
        raise TypeError(f"small_beside: expected None, a bool or an int (SMs), got {small_beside!r}")
    if ws is False or head_dim not in ws_launch.CONFIGS or (ws is True and head_dim not in ws_launch.PAGED_DEFAULTS):
        _no_beside(small_beside, "the large class runs the Triton kernel")
        return _WsWork()
    large = [(b, q, c + q if new_keys else c) for b, (q, c) in enumerate(zip(q_lens, kv_lens))
             if q and q * group > SMALL_ROWS]
    if not large:
        _no_beside(small_beside, "no large class")
        return _WsWork()
    small = [(b, q, c + q if new_keys else c) for b, (q, c) in enumerate(zip(q_lens, kv_lens))
             if q and q * group <= SMALL_ROWS]
    with_small = merge_small is True
    if isinstance(ws, ws_launch.WsConfig):
        if ws not in ws_launch.paged_configs(head_dim):
            raise ValueError(f"ws: {ws.name} is not a paged config at head dim {head_dim} "
                             f"(ws_launch.paged_configs: {[c.name for c in ws_launch.paged_configs(head_dim)]})")
        cfg = ws
    elif _ws_worth_it(large, [], num_heads, 1, wl, wr):
        cfg = ws_launch.PAGED_DEFAULTS[head_dim]
    else:
        cfg = _packed_merge(large, small, num_heads, head_dim, group, wl, wr, merge_small)
        if cfg is None:
            _no_beside(small_beside, "the large class runs the Triton kernel")
            return _WsWork()
        with_small = True
    heads_per_tile = ws_launch.heads_per_tile(cfg, group)
    with_small = with_small and heads_per_tile > 1 and bool(small)
    if with_small:
        large = sorted(large + small)
    bm = ws_launch.BLOCK_M // heads_per_tile  # query tokens per block
    blocks = []  # (cost, b, query block, keys, rows)
    for b, q, total in large:
        for m in range(math.ceil(q / bm)):
            rows = min(bm, q - m * bm)
            keys = _key_span(q, total, m * bm, m * bm + rows - 1, wl, wr)
            blocks.append((keys * rows, b, m, keys, rows))
    blocks.sort(key=lambda x: -x[0])
    programs = _beside_programs(cfg, blocks, [] if with_small else small, num_heads // heads_per_tile,
                                num_heads // group, head_dim, small_beside)
    tail = WS_TAIL_SPLITS_DEFAULT if ws_tail is None else ws_tail
    forced = tuple(tail) if isinstance(tail, (tuple, list)) else None
    if not isinstance(tail, bool) and (forced is None or len(forced) != 2
                                       or not all(isinstance(x, int) and not isinstance(x, bool) for x in forced)):
        raise TypeError(f"ws_tail: expected None, a bool or a (blocks, shares) pair of ints, got {ws_tail!r}")
    if tail is not False and (heads_per_tile == 1 or forced):
        whole_tail = next((i for i, blk in enumerate(reversed(blocks)) if blk[4] < bm), len(blocks))
        choice = tail_split.choose([blk[3] for blk in blocks], whole_tail, num_heads, head_dim,
                                   programs or runtime.num_sms(), cfg.persistent, forced)
        if forced and heads_per_tile > 1:
            raise ValueError(f"ws_tail={forced}: split blocks hold one query head a tile; {cfg.name} packs "
                             f"{heads_per_tile} heads a tile")
        if forced and choice is None:
            raise ValueError(f"ws_tail={forced}: expected 1 <= k <= {whole_tail} (the whole {bm}-token blocks at "
                             f"the end of the launch's order) and s >= 2")
        if choice is not None:
            items, splits = _tail_items(blocks, *choice, q_lens, bm, num_heads, head_dim, device)
            return _WsWork(cfg, items, with_small, splits, programs)
    items = torch.tensor([(b, m) for _, b, m, _, _ in blocks], dtype=torch.int32).reshape(-1, 2).to(device)
    return _WsWork(cfg, items, with_small, None, programs)


def _beside_programs(cfg: ws_launch.WsConfig, blocks, small, units: int, num_kv_heads: int, head_dim: int,
                     small_beside: bool | int | None) -> int | None:
    """The persistent grid of the large ws launch when the small class's launch runs beside it (``small_beside``,
    see ``plan_paged_attention``; ``blocks``: the launch's (cost, b, m, keys, rows), ``units`` tiles each; ``small``:
    the (b, q, keys) of the requests a Triton launch serves), or None (every SM, one launch after the other)."""
    want = SMALL_BESIDE_DEFAULT if small_beside is None else small_beside
    if want is False:
        return None
    sms = runtime.num_sms()
    if not (small and cfg.persistent):
        _no_beside(small_beside, "no decode launch" if not small else f"{cfg.name} is not persistent")
        return None
    if want is True:
        small_bytes = sum(keys for _, _, keys in small) * num_kv_heads * head_dim * 2 * 2  # K and V, 16 bits
        reserved = beside.choose([blk[3] for blk in blocks for _ in range(units)], head_dim, sms, small_bytes)
        return sms - reserved if reserved is not None else None
    if not 1 <= want < sms:
        raise ValueError(f"small_beside={want}: expected 1 <= SMs left to the decode launch < {sms} (the GPU's SMs)")
    return sms - want


def _no_beside(small_beside: bool | int | None, why: str) -> None:
    """A forced SM count (``small_beside=R``) where no decode launch can run beside a persistent ws launch."""
    if small_beside is not None and not isinstance(small_beside, bool):
        raise ValueError(f"small_beside={small_beside}: nothing to run beside ({why})")


def _tail_items(blocks, k: int, s: int, q_lens, bm: int, num_heads: int, head_dim: int,
                device) -> tuple[torch.Tensor, ws_launch.PagedSplits]:
    """Items ``(b, query block, split, split block)`` of the ws launch with its last ``k`` blocks (whole ones) in
    ``s`` shares each (``ws_kernel._round_work``), and their workspace: split block i is the (k − i)-th lightest,
    its first query token ``cu_seqlens_q[b] + m·bm``."""
    starts = [0, *itertools.accumulate(q_lens)]
    n = len(blocks)
    items = [(b, m, 0, -1) for _, b, m, _, _ in blocks[:n - k]]
    for i, (_, b, m, _, _) in enumerate(blocks[n - k:]):
        items += [(b, m, j, i) for j in range(s)]
    block_start = torch.tensor([starts[b] + m * bm for _, b, m, _, _ in blocks[n - k:]], dtype=torch.int32)
    return (torch.tensor(items, dtype=torch.int32).to(device),
            ws_launch.PagedSplits.allocate(s, block_start.to(device), num_heads, head_dim))


def _ws_worth_it(large, small, num_heads: int, heads_per_tile: int, wl: int, wr: int) -> bool:
    """``ws_launch.worth_it`` on the blocks of 128 / ``heads_per_tile`` query tokens of the ``large`` requests
    (their query counts and last blocks' key spans) and, counted as tiles only, of the ``small`` ones."""
    bm = ws_launch.BLOCK_M // heads_per_tile
    block_keys = max(_key_span(q, total, max(q - bm, 0), q - 1, wl, wr) for _, q, total in large)
    blocks = sum(math.ceil(q / bm) for _, q, _ in large + small)
    return ws_launch.worth_it(min(q for _, q, _ in large), block_keys, blocks * num_heads // heads_per_tile)


def _packed_merge(large, small, num_heads: int, head_dim: int, group: int, wl: int, wr: int,
                  merge_small: bool | None) -> ws_launch.WsConfig | None:
    """The default for a mixed batch the unpacked config leaves on the Triton tile (too few tiles): the head dim's
    ``PACKED_MERGE_DEFAULTS`` config with the decode requests in its launch, where packing applies (G divides 64),
    merging is allowed (``merge_small`` not False, ``MERGE_SMALL_DEFAULT``) and the packed tiles, decode ones
    included, pass ``ws_launch.worth_it``, and no query block visits as many keys as the Triton plan would split
    (2 x ``MIN_SPLIT_KEYS["large"]``): the ws kernel has no KV splits, so a long decode request would be one long
    tile where the Triton launches spread its keys over many programs."""
    cfg = PACKED_MERGE_DEFAULTS.get(head_dim)
    if (cfg is None or not small or merge_small is False or not (merge_small or MERGE_SMALL_DEFAULT)
            or ws_launch.heads_per_tile(cfg, group) == 1):
        return None
    heads_per_tile = ws_launch.heads_per_tile(cfg, group)
    bm = ws_launch.BLOCK_M // heads_per_tile
    longest = max(_key_span(q, total, max(q - bm, 0), q - 1, wl, wr) for _, q, total in large + small)
    if longest >= 2 * MIN_SPLIT_KEYS["large"]:
        return None
    return cfg if _ws_worth_it(large, small, num_heads, heads_per_tile, wl, wr) else None
