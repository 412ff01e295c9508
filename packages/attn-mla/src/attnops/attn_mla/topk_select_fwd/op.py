"""TopKSelectFwd: checks, launch configuration, torch custom-op registration."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton

from attnops.kernel_utils import checks, runtime, testing

from .kernel import (
    topk_select_kernel,
    topk_split_histogram_kernel,
    topk_split_rank_kernel,
    topk_split_select_kernel,
)


@dataclass(frozen=True)
class TopKConfig:
    block: int  # positions per tile of the compaction read (and per step of the other loops)
    stages: int  # software-pipeline depth of the compaction read (cp.async tiles in flight + 1)
    samples: int  # sampled keys per long row (power of two, multiple of 8)
    slack: tuple[int, int]  # the sample threshold aims at slack[0] / slack[1] × topk survivors
    cap_factor: int  # register-select width = scratch slots = cap_factor × next_pow2(topk) (at most max_cap)
    max_cap: int
    num_warps: int
    maxnreg: int | None  # register cap per thread (ptxas otherwise takes up to 255 and one program fills an SM)
    programs_per_sm: int  # persistent programs per SM: must all be resident (regs, smem), see sm90 compile
    radix: bool = False  # register selects by 8-bit digit histograms (4 dependent steps instead of 32)
    # Split path (split_chunk > 0): every row over cdiv(S_kv, split_chunk) programs of split_chunk positions,
    # two launches (histogram of the keys' top hist_bits bits; threshold bin, writes, last program's select);
    # cap(topk) = candidate slots of the threshold bin. block: step of the last program's loops.
    split_chunk: int = 0
    hist_bits: int = 11
    # Split path: a third launch ranks the threshold bin's candidates over every program of the row instead of
    # the row's last program selecting them (``topk_split_rank_kernel``)
    rank_launch: bool = False
    # The rank launch: candidates a program ranks at a time, and against how many at a time. Its grid spreads the
    # row's CAP slots over up to SMs / rows programs (at least the row's chunks), rank_slice each.
    rank_slice: int = 32
    rank_block: int = 256

    def programs_per_row(self, s_kv: int) -> int:
        return triton.cdiv(s_kv, self.split_chunk) if self.split_chunk else 1

    def cap(self, topk: int) -> int:
        return min(max(256, self.cap_factor * triton.next_power_of_2(topk)), self.max_cap)

    def full_only(self, topk: int) -> bool:
        """topk too large for the scratch (the sample path aims at ~2.25·topk survivors and needs room for
        its spread): every row longer than CAP is selected over the whole window (34 reads)."""
        return 4 * topk > self.cap(topk)


# The split path's config for the decode row; its sweep candidates below vary one field or two.
_SPLIT = TopKConfig(block=1024, stages=1, samples=64, slack=(9, 4), cap_factor=1, max_cap=4096, num_warps=4,
                    maxnreg=None, programs_per_sm=1, split_chunk=512, hist_bits=11)
# ... and its rank-launch form (the decode row's default, ``h200-split-rank-s8`` below)
_SPLIT_RANK = replace(_SPLIT, rank_launch=True, rank_slice=8, rank_block=1024, cap_factor=4, max_cap=8192)
# Every config the op can pick; tests run each (GPU: full-size rows; CPU: shrunk rows).
CONFIGS = {
    # Many rows: 8-warp programs capped at 80 registers, 3 per SM. 2048-position tiles, 3 in flight per
    # program (cp.async, 24 KB), ~72 KB of scores in flight per SM while programs stream; the select runs
    # over a 4·topk register tensor (k = 2048: 32 keys per thread).
    "h200": TopKConfig(block=2048, stages=4, samples=2048, slack=(9, 4), cap_factor=4, max_cap=16384,
                       num_warps=8, maxnreg=80, programs_per_sm=3),
    # 4-warp programs, 16 positions per thread per tile (fewer instructions per score), 4 per SM.
    "h200-4w": TopKConfig(block=2048, stages=4, samples=1024, slack=(9, 4), cap_factor=4, max_cap=16384,
                          num_warps=4, maxnreg=128, programs_per_sm=4),
    # Few rows (decode): one 16-warp program per row; windows up to 16384 keys go straight to registers.
    "h200-latency": TopKConfig(block=4096, stages=3, samples=2048, slack=(9, 4), cap_factor=8, max_cap=16384,
                               num_warps=16, maxnreg=128, programs_per_sm=1),
    # Sweep candidate for the decode row (not picked): the final select over 4·topk registers instead of
    # 8·topk (half the compares per bitwise step); ~2.25·topk survivors expected, so a 4·topk cap is ~9 σ of
    # the sample's rank error away. Windows of 4·topk..8·topk keys then take the sample path.
    "h200-latency-4x": TopKConfig(block=4096, stages=3, samples=2048, slack=(9, 4), cap_factor=4, max_cap=16384,
                                  num_warps=16, maxnreg=128, programs_per_sm=1),
    # Sweep candidates (not picked): the decode and the many-row configs with the 4-step radix select.
    "h200-latency-radix": TopKConfig(block=4096, stages=3, samples=2048, slack=(9, 4), cap_factor=8,
                                     max_cap=16384, num_warps=16, maxnreg=128, programs_per_sm=1, radix=True),
    "h200-radix": TopKConfig(block=2048, stages=4, samples=2048, slack=(9, 4), cap_factor=4, max_cap=16384,
                             num_warps=8, maxnreg=80, programs_per_sm=3, radix=True),
    # The split path for few long rows (rows × cdiv(S_kv, 512) <= SMs; the default there until 2026-12-06, now
    # in its rank-launch form below): each row split over 512-key programs;
    # 2048 bins (4 per octave) put ~5.3 % of a normal row in the threshold bin (~870 candidates at 16384 keys,
    # k = 2048), selected in 21 bitwise steps by the row's last program over a next_pow2(topk)-wide register
    # tensor. (4096 bins would halve the candidates, but not that tensor, and double tl.histogram's work:
    # 2304 SASS per 512-key program, ~1 µs, offline sm_90.)
    "h200-split": _SPLIT,
    # Sweep candidate (not picked): the last program's select by 8-bit digits (4 histogram steps instead of 21
    # bitwise ones over the candidates).
    "h200-split-radix": replace(_SPLIT, radix=True),
    # The decode row's default (picked with the split path): the threshold bin's candidates ranked by a third launch
    # instead of the row's last program selecting them, 8 candidates a program against 1024 at once, over up to 132
    # programs. H100 2026-12-06 (each config checked, 20 iterations): 11.9 µs against h200-split's 15.7 (kernels
    # 3.6 + 4.5 + 3.7 against 3.6 + 11.7); the same launch with 32 candidates a program against 256 at a time, on
    # the row's 32 programs, 16.4 (its rank kernel 8.1: four dependent steps in 28 busy programs); 16 a program 12.8;
    # with 4096 bins (half the candidates) 13.3 (a slower histogram and select). Its candidate slots are 4·topk (no
    # register tensor holds them here, and the ranking's work follows the count, not the slots): 2048 bins are 4 an
    # octave, so scores in [0, 1) put ~2200 of 16384 keys in the threshold bin at k = 2048 (~4200 of 32768), which
    # 2048 slots would send to the whole-window select of one program.
    "h200-split-rank-s8": _SPLIT_RANK,
    # Sweep candidates (not picked): the split path with 8 / 16 warps. H200 Nsight of h200-split (2026-12-03,
    # SASS counts): every select program runs ~1080 instructions per warp and the row's last program ~3000 more,
    # at ~7-9 cycles each: one warp per scheduler hides no latency. More warps spread the 2048 bins, the chunk
    # and the candidates over more threads (fewer instructions per warp; the cross-warp step stays one).
    "h200-split-w8": replace(_SPLIT, num_warps=8),
    "h200-split-w16": replace(_SPLIT, num_warps=16),
    # Small steps so that shrunk rows still take several steps per pass (interpreter).
    "interpreter": TopKConfig(block=256, stages=1, samples=64, slack=(9, 4), cap_factor=4, max_cap=16384,
                              num_warps=4, maxnreg=None, programs_per_sm=1),
    # The split path on shrunk rows: 12 programs per 3001-key row, 1024 bins (~4x the GPU config's candidates
    # per bin: ~280 on a shrunk row; still within 2·topk slots on the full-size rows, which the GPU tests run).
    "interpreter-split": TopKConfig(block=128, stages=1, samples=64, slack=(9, 4), cap_factor=2, max_cap=4096,
                                    num_warps=4, maxnreg=None, programs_per_sm=1, split_chunk=256, hist_bits=10),
    # A threshold aimed below topk: the sample misses on most rows, so the whole-window select runs.
    "fallback": TopKConfig(block=512, stages=1, samples=128, slack=(1, 4), cap_factor=4, max_cap=16384,
                           num_warps=4, maxnreg=None, programs_per_sm=1),
}


SPLIT_MIN_KEYS = 4096  # shorter rows: a row split saves less than its second launch costs
# The split path for few long rows: on the H200 (2026-12-02) the decode row (1 x 16384 keys) took 19.2 us against
# 37.4 us for one program per row (h200-latency); its GPU tests pass. Since 2026-12-06 in its rank-launch form.
SPLIT_DEFAULT = True
# ... and for decode batches beyond one wave of 512-key programs, up to this many waves, in its last-program form
# (h200-split). H100 2026-12-06, 16384-key rows (µs, h200-split / h200-split-rank-s8 / h200-latency): 8 rows 16.8 /
# 17.2 / 40.3, 16 rows 18.9 / 23.4 / 40.5, 32 rows 28.3 / 38.7 / 41.1, 34 rows (8.2 waves) 32.0 / 43.1 / 41.2, 64 rows
# (15.5 waves) 42.6 / 63.2 / 42.5: 12 waves (49 such rows) lies between the last win measured and the tie. Between
# them (H100, 2026-12-06, h200-split / h200): 40 rows (9.7 waves) 36.0 / 39.5, 48 rows (11.6 waves) 40.4 / 39.8 (a
# 1.5 % loss, within a run's noise), 56 and 63 rows 40.7 / 40.1 and 41.0 / 40.2: the crossover is near 11 waves.
# The rank launch spreads a row over SMs / rows programs only, so past one wave it falls behind the last-program select.
# Wider chunks that keep the batch in one wave lost at every count (2048 / 4096 keys: 23.8 / 26.1 at 8 rows).
SPLIT_MAX_WAVES = 12


def pick_config(num_rows: int = 1 << 30, s_kv: int = 0) -> TopKConfig:
    if runtime.interpreting():
        return CONFIGS["interpreter"]
    if s_kv >= SPLIT_MIN_KEYS:
        programs = num_rows * CONFIGS["h200-split"].programs_per_row(s_kv)
        if SPLIT_DEFAULT and programs <= runtime.num_sms():
            return CONFIGS["h200-split-rank-s8"]  # few long rows: one program per row would leave most SMs idle
        if SPLIT_DEFAULT and programs <= SPLIT_MAX_WAVES * runtime.num_sms():
            return CONFIGS["h200-split"]
        # one 8-warp program a row beat the 16-warp one on every long-row count timed: H100 64 / 128 rows of 16384
        # keys 40.2 / 42.4 µs against 42.5 / 45.8, and 36.1 against 37.8 on one row (H200 2026-12-02: 35.9 / 37.6)
        return CONFIGS["h200"]
    return CONFIGS["h200-latency" if num_rows < runtime.num_sms() else "h200"]


def launch(index_score, starts, ends, topk: int, out: torch.Tensor, config: TopKConfig) -> torch.Tensor:
    """Fill ``out`` ([B, S, G, topk] int32, contiguous) with ``config``; inputs already checked."""
    b, s, s_kv, g = index_score.shape
    num_rows = b * s * g
    if num_rows == 0:
        return out
    if config.split_chunk:
        return _launch_split(index_score, starts, ends, topk, out, config)
    cap = config.cap(topk)
    nprog = min(num_rows, runtime.num_sms() * config.programs_per_sm)
    scratch = torch.empty((nprog, cap), dtype=torch.int64, device=index_score.device)
    extra = {} if config.maxnreg is None or runtime.interpreting() else {"maxnreg": config.maxnreg}
    topk_select_kernel[(nprog,)](
        index_score, starts, ends, out, scratch,
        num_rows, s, g, s_kv, topk,
        *index_score.stride()[:2], index_score.stride(2), index_score.stride(3),
        *starts.stride(), *ends.stride(),
        BLOCK=config.block, STAGES=config.stages, CAP=cap, SAMPLES=config.samples,
        SLACK_NUM=config.slack[0], SLACK_DEN=config.slack[1], FULL_ONLY=config.full_only(topk), RADIX=config.radix,
        num_warps=config.num_warps, num_stages=config.stages, **extra,
    )
    return out


SPLIT_ROWS = 512  # rows per launch pair of the split path (row histograms and candidates: ~10 MB at k = 2048)


def _launch_split(index_score, starts, ends, topk: int, out: torch.Tensor, config: TopKConfig) -> torch.Tensor:
    """The split path: grid (rows, programs per row), two launches per batch of rows (three with ``rank_launch``;
    one batch whenever ``pick_config`` chose it; pinned on many long rows, several). The row histograms and
    counters live in the stream's arrival counters (zero between calls: each row's last program resets its own),
    so no memset runs; the candidates are scratch that the last step reads only where step 2 wrote."""
    b, s, s_kv, g = index_score.shape
    num_rows, chunks = b * s * g, config.programs_per_row(s_kv)
    dev, bins, cap = index_score.device, 1 << config.hist_bits, config.cap(topk)
    batch = min(num_rows, SPLIT_ROWS)
    state = runtime.arrival_counters(dev, batch * (bins + 3))
    hist, counters = state[: batch * bins], state[batch * bins: batch * (bins + 3)]
    candidates = torch.empty((batch, cap), dtype=torch.int64, device=dev)
    strides = (*index_score.stride(), *starts.stride(), *ends.stride())
    for row0 in range(0, num_rows, batch):
        grid = (min(batch, num_rows - row0), chunks)
        topk_split_histogram_kernel[grid](
            index_score, starts, ends, hist, row0, s, g, s_kv, *strides,
            CHUNK=config.split_chunk, HIST_BITS=config.hist_bits,
            num_warps=config.num_warps,
        )
        topk_split_select_kernel[grid](
            index_score, starts, ends, out, hist, counters, candidates, row0, s, g, s_kv, topk, *strides,
            CHUNK=config.split_chunk, HIST_BITS=config.hist_bits, CAP=cap, BLOCK=config.block, RADIX=config.radix,
            RANK_LAUNCH=config.rank_launch, num_warps=config.num_warps,
        )
        if config.rank_launch:
            spread = min(triton.cdiv(cap, config.rank_slice), runtime.num_sms() // grid[0])
            topk_split_rank_kernel[(grid[0], max(chunks, spread))](
                index_score, starts, ends, out, hist, counters, candidates, row0, s, g, s_kv, topk, *strides,
                HIST_BITS=config.hist_bits, CAP=cap, BLOCK=config.block, SLICE=config.rank_slice,
                RANK_BLOCK=config.rank_block, num_warps=config.num_warps,
            )
    return out


@torch.library.custom_op("attnops::topk_select_fwd", mutates_args=())
def _topk_select(index_score: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, topk: int) -> torch.Tensor:
    b, s, _, g = index_score.shape
    out = testing.kernel_buffer((b, s, g, topk), torch.int32, index_score.device)
    return launch(index_score, starts, ends, topk, out, pick_config(b * s * g, index_score.shape[2]))


@_topk_select.register_fake
def _(index_score, starts, ends, topk):
    b, s, _, g = index_score.shape
    return index_score.new_empty((b, s, g, topk), dtype=torch.int32)


def check_inputs(index_score, starts, ends, topk) -> None:
    dev = runtime.device()
    checks.check_tensor("index_score", index_score, dtype=torch.float32, ndim=4, device=dev)
    b, s, s_kv, _ = index_score.shape
    checks.check_tensor("starts", starts, dtype=torch.int32, shape=(b, s), device=dev)
    checks.check_tensor("ends", ends, dtype=torch.int32, shape=(b, s), device=dev)
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise TypeError(f"topk: expected an int, got {type(topk).__name__}")
    if not 0 < topk <= s_kv:
        raise ValueError(f"topk: must satisfy 0 < topk <= S_kv = {s_kv}, got {topk}")
    if s_kv >= 2**31 - 1:
        raise ValueError(f"index_score: S_kv = {s_kv} does not fit int32 positions")
    if index_score.stride(2) >= 2**18:
        raise ValueError(f"index_score: stride along S_kv must be < 2^18, got {index_score.stride(2)}")


def with_config(config: TopKConfig, poison: bool = False):
    """The public function pinned to ``config`` (tests and tuning); ``poison`` pre-fills the output with
    int32 min so that an unwritten slot fails the check."""

    def run(index_score, starts, ends, topk):
        check_inputs(index_score, starts, ends, topk)
        b, s, _, g = index_score.shape
        shape, dev = (b, s, g, topk), index_score.device
        # empty as in the op (a fill would add a kernel to the sweeps' timings); poison: int32 min everywhere
        out = torch.full(shape, -(2**31), dtype=torch.int32, device=dev) if poison else \
            torch.empty(shape, dtype=torch.int32, device=dev)
        return launch(index_score, starts, ends, topk, out, config)

    return run


def topk_select_fwd(index_score: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, topk: int) -> torch.Tensor:
    """Positions of the ``topk`` largest scores inside each row's window (DeepSeek-V3.2 index top-k).

    Args:
        index_score: ``[B, S, S_kv, G]`` float32, any strides (e.g. indexer logits).
        starts, ends: ``[B, S]`` int32: row (b, s) considers positions ``t`` with
            ``max(starts, 0) <= t < min(ends, S_kv)`` for each of its G groups; an empty window is legal.
        topk: ``0 < topk <= S_kv``.

    Returns:
        ``[B, S, G, topk]`` int32 absolute key positions (group axis before topk). A window with fewer
        than ``topk`` positions is padded with ``S_kv``. Order inside a row is unspecified (one program
        per row writes ascending positions; the split path for few long rows writes the keys above the
        threshold bin in arrival order, then the rest); ties go to the lower position; in-window
        −inf scores are eligible; NaN scores are unspecified.

    Example::

        scores = torch.randn(1, 4096, 65536, 1, device="cuda")
        starts = torch.zeros(1, 4096, dtype=torch.int32, device="cuda")
        ends = torch.full((1, 4096), 65536, dtype=torch.int32, device="cuda")
        idx = topk_select_fwd(scores, starts, ends, 2048)  # [1, 4096, 1, 2048]
    """
    check_inputs(index_score, starts, ends, topk)
    return _topk_select(index_score, starts, ends, topk)
