"""Device code shared by the attn-mla warp-specialized kernels (MLA decode ``mla_decode_with_kvcache_fwd/ws_kernel.py``,
DSA ``dsa_decode_with_kvcache_fwd/ws_kernel.py``): the consumer warpgroups' loop over a ring of latent key tiles.

64 query heads share every key row; the two consumer warpgroups split the channels, not the rows: warpgroup 0
owns latent channels 0-255 (and the rope channels), warpgroup 1 latent channels 256-511. Each computes its
partial scores (wgmma from shared memory), hands them to the other through a double-buffered fp32 exchange slot
(an mbarrier both arrive on and wait for), adds the other's, and then both hold the same full scores: the online
softmax runs in both (the same arithmetic on the same values: identical m, l, P), and each multiplies P by its
own 256 latent columns of the key tile (the values are the latent keys). No score is computed twice and no
output column is shared. The kernels own the loaders (TMA for contiguous caches, a gather for DSA) and the
epilogues.
"""

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from attnops.kernel_utils.gluon_fns import reference_max

HEADS = gl.constexpr(64)  # query heads per program: one warpgroup's wgmma M, shared by both consumers
HALF = gl.constexpr(256)  # latent channels per consumer
SMEM_LIMIT = 227 * 1024  # shared memory one program may use on sm_90
# The fp32 score-exchange slots [2, HEADS, BLOCK_N]: a warp stores / loads its accumulator fragment as 8-byte
# pieces (rows lane // 4, column pairs lane % 4 + 4j), served a half-warp (4 rows) at a time. 32-byte units
# XOR-swizzled over 4 rows give each of those 4 rows its own quarter of the banks: 2 wavefronts per warp access,
# the minimum. (The first layout, 8-byte units over 8 rows, left the rows of a half-warp on the same 16 banks:
# Nsight Compute measured 8 wavefronts per access on the H200, 2026-12-02.) Valid for rows of >= 32 keys.
EXCHANGE_LAYOUT = gl.constexpr(gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=4, order=[1, 0]))


# The consumers' output stores. From the wgmma accumulator layout (``wgmma_acc_layout(HALF)``: 2 consecutive
# columns a thread, 4 lanes a row, 8 rows a warp instruction) a 16-bit [HEADS, HALF] tile takes 64 4-byte stores
# a thread, each writing 8 rows x 16 bytes (half sectors): in the DSA kernel those 128 ``STG.E`` of the two consumers
# held 11.9 % of the warp-stall samples, mostly LSU-queue (lg) throttle (Nsight Compute, mla-d512-h64-kv32k, H200,
# 2026-12-04; docs/perf/attn-mla.md, thirtieth session). The kernels therefore move the tile first with the shared
# ``kernel_utils.gluon_fns.to_store_layout`` to ``gluon_fns.store_layout(HALF, bits)`` (16 bytes of consecutive
# columns a thread, 8 lanes along a row's 128 contiguous bytes, the accumulator's warp bases: warp shuffles only, no
# shared-memory scratch; the DSA kernel has ~1.5 KB of the 227 KB left, and a conversion through shared memory took
# 7.6 KB more): 16 ``STG.E.128`` a thread in 16 bits, 32 in fp32. Measured on the H200 (2026-12-04): DSA d512-h64
# rows 0.78-0.80 -> 0.68-0.71 ms (-11 to -14 %), d512-h128 -6 to -7 %, MLA decode mla-b128 rows ~-5 %.


@dataclass(frozen=True)
class WsConfig:
    """A launch config of the kernels built on ``consume_keys`` (the channel split) or, ``alternating``,
    ``latent_alt.consume_blocks`` (each warpgroup scores every other key block whole; host side)."""

    block_n: int  # keys per tile (the score wgmma's N)
    stages: int  # key tiles in flight (the ring's slots)
    block_h: int = HEADS.value  # query heads per program (fixed: one warpgroup's M)
    alternating: bool = False
    persistent: bool = False  # one program per SM looping over the work items (DSA's kernel only)
    # (alternating only) two ready barriers a ring slot: the low 256 latent channels, then the high ones with the rope
    # channels; a block's scores start on the first half once it has landed (``latent_alt._block_scores``)
    half_ready: bool = False
    # (alternating only) the consumers release ring slots and the query slot one arrival per thread, without the
    # warpgroup barrier Triton puts before a single thread's arrival (``kernel_utils.gluon_fns.release``)
    thread_release: bool = False
    # (alternating only) O rescaled only when some row's reference max moves by more than ``gluon_fns.RESCALE_SLACK``
    lazy_rescale: bool = False
    # (half_ready only; DSA's kernel) a ring slot freed by halves: the low 256 latent channels by warpgroup 0, the high
    # ones by warpgroup 1, each as soon as its own last read of them has retired, the rope channels after both
    # (``latent_alt``, "Split frees"); the loader refills each half on its own
    split_free: bool = False

    def __post_init__(self):
        """The kernels assert these at compile time; a forced config fails here first, before any launch."""
        if self.split_free and not self.half_ready:
            raise ValueError(f"WsConfig: split_free needs half_ready=True, got {self}")
        if (self.half_ready or self.thread_release or self.lazy_rescale) and not self.alternating:
            raise ValueError(f"WsConfig: half_ready, thread_release and lazy_rescale need alternating=True, got {self}")
        if self.lazy_rescale and self.block_n != 32:
            # (only the 32-key 4-slot form was built and checked: DSA's 64-key gather loader needs 56 registers, which
            # the lazy form's 200 / 48 split does not leave it)
            raise ValueError(f"WsConfig: lazy_rescale is built for 32-key blocks only, got block_n={self.block_n}")

    @property
    def name(self) -> str:
        return (f"ws-{'alt-' if self.alternating else ''}n{self.block_n}s{self.stages}{'-h' if self.half_ready else ''}"
                f"{'-t' if self.thread_release else ''}{'-f' if self.split_free else ''}"
                f"{'-l' if self.lazy_rescale else ''}"
                f"{'-p' if self.persistent else ''}")


@gluon.constexpr_function
def p_in_rope_slots(block_n, rope):
    """Whether the alternating consumer hands P_b [64 heads, ``block_n`` keys] over in block b's rope slot
    [``block_n`` keys, ``rope``] of the ring instead of a buffer of its own: at 64 x 64 both are the same 8 KB tile
    in the same 128-byte swizzle, and the slot is free once its owner has scored the block (host and device)."""
    return block_n == HEADS.value and rope == HEADS.value


def smem_bytes(cfg: WsConfig, rope: int) -> int:
    """Queries and the key ring (2 x 256 latent channels plus ``rope``), and either both warpgroups' two fp32
    score-exchange slots or (``alternating``) their row maxima and sums and, unless P goes into the rope slots
    (``p_in_rope_slots``), the two 16-bit P hand-off slots."""
    width = 2 * HALF.value + rope
    operands = 2 * (HEADS.value * width + cfg.stages * cfg.block_n * width)
    if cfg.alternating:
        p_slots = 0 if p_in_rope_slots(cfg.block_n, rope) else 2 * 2 * HEADS.value * cfg.block_n
        return operands + p_slots + 4 * 4 * HEADS.value
    return operands + 4 * 2 * 2 * HEADS.value * cfg.block_n


# Measured ones fastest first (the MLA default is CONFIGS[0]; DSA's order: its ws_launch). The alternating consumer
# (docs/perf/attn-mla.md): 32-key blocks in 4 slots (225 KB), 1.10-1.34x the Triton kernel on all 26 MLA rows on
# the H200 (2026-12-02); TMA boxes have power-of-2 rows (no 48-key blocks), and with 3 slots ptxas spilled 12 B.
# First its lazy-rescale form (``latent_alt``: the O rescale skipped while no row's reference max moves by more than
# 8 in base 2): on an H100 (2026-12-06, each checked) MLA decode 0-3.5 % faster (mla-b128-8192 536.6 -> 519.9 us),
# DSA 4-9 % on the rows of >= 32 tiles an item (d576-h128-kv32k 5044 -> 4752 us) and within 2 % on d512-h64.
# The channel split: 64-key tiles do not fit beside its exchange slots (Q 72 KB + 2 x 72 KB ring + 64 KB of
# exchange), so 32-key tiles, 3 slots (212 KB with a 64-channel rope part). Last: the alternating consumer's 64-key
# blocks in 2 slots with P in the rope slots (FlashMLA's layout, 217 KB; with P buffers of their own 233 KB), 1.24-1.28x
# slower than the 32-key 4-slot form on the H200 (2026-12-03).
CONFIGS = tuple(c for c in (WsConfig(32, 4, alternating=True, lazy_rescale=True), WsConfig(32, 4, alternating=True),
                            WsConfig(32, 3), WsConfig(32, 2), WsConfig(64, 2, alternating=True))
                if smem_bytes(c, 64) <= SMEM_LIMIT)
# Forced only (sweeps, tests; added 2026-12-04): the alternating configs with a ready barrier per half slot
# (``half_ready``). Why: the 64-key 2-slot ring ran 1.24-1.28x slower than the 32-key 4-slot one on the H200 (block b
# + 2 loads only after the other warpgroup has folded b, and its consumer waits for all of it); FlashMLA's sparse
# kernel, the same layout, starts a block's scores on its first channel half. And the default's form with per-thread
# releases (``thread_release``: 3-4 warpgroup barriers fewer per 2 blocks). On an H100 (2026-12-06, MLA mla-b128-8192
# and three DSA rows) none beat the defaults by more than 1 %: -h 0-5 % slower, -t 0-3 % slower (docs/perf/attn-mla.md).
FORCED_CONFIGS = (WsConfig(32, 4, alternating=True, half_ready=True),
                  WsConfig(64, 2, alternating=True, half_ready=True),
                  WsConfig(32, 4, alternating=True, thread_release=True))


@gluon.jit
def _partial_scores(q_half, k_half, qpe_smem, kpe_smem, k_ready, i, zero_s, WG: gl.constexpr, STAGES: gl.constexpr,
                    HAS_PE: gl.constexpr, GENERIC_COPIES: gl.constexpr):
    """Issue this warpgroup's partial S of the key tile at ring position i (async) once it has landed: its latent half,
    plus the rope channels in warpgroup 0 (``HAS_PE``). ``GENERIC_COPIES``: the tile came by cp.async (the
    generic proxy), so a proxy fence orders it before the wgmma (the async proxy) reads it; TMA needs none."""
    slot = i % STAGES
    mbarrier.wait(k_ready.index(slot), (i // STAGES) & 1)
    if GENERIC_COPIES:
        fence_async_shared()
    s = warpgroup_mma(q_half, k_half.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if HAS_PE and WG == 0:
        s = warpgroup_mma(qpe_smem, kpe_smem.index(slot).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _full_scores(s, mine, theirs, xchg, x, s_layout: gl.constexpr):
    """Exchange number ``x`` of the program: write this warpgroup's partial scores to its slot x % 2 of
    ``mine``, meet the other warpgroup (both arrive, both wait: count 2), and add its partial from ``theirs``.
    A slot is written again two exchanges later, after both passed the exchange in between, so after both read
    it."""
    mine.index(x % 2).store(s)
    gl.thread_barrier()  # every thread's part stored before this warpgroup's arrival releases them
    mbarrier.arrive(xchg.index(x % 2), count=1)
    mbarrier.wait(xchg.index(x % 2), (x // 2) & 1)
    return s + theirs.index(x % 2).load(s_layout)


@gluon.jit
def softmax_tile(s, n0, end, m_i, l_i, qk_scale, BLOCK_N: gl.constexpr, s_layout: gl.constexpr,
                 p_layout: gl.constexpr, o_layout: gl.constexpr, dtype: gl.constexpr, SLACK: gl.constexpr):
    """Online-softmax step (base 2, the scale folded into exp2) of key tile [n0, n0 + BLOCK_N), keys >= end
    masked (only the last tile has any): (P as the P·V wgmma's register operand, the rescale factor in
    the accumulator's layout, m, l, the tile's row sums of P). ``kernel_utils.attention_fns.online_softmax_step``'s
    arithmetic with the wgmma layouts (a Gluon kernel cannot call ``triton.jit`` functions).
    ``SLACK`` > 0 (base-2 units): a row's reference m moves only when the tile's maximum exceeds it by more than
    ``SLACK``, so P stays <= 2^SLACK and, on most tiles, the rescale factor is exactly 1 for every row (the caller
    may then skip the rescale: ``latent_alt``'s lazy rescale). m is then not the running maximum, but the
    (m, l) pair still gives the row's exact log-sum-exp, and the output O / l is unchanged."""
    if n0 + BLOCK_N > end:
        k_pos = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where((k_pos < end)[None, :], s, float("-inf"))
    # (every tile has a visible key: m_new is finite; m_i = -inf before the first tile: every row moves there)
    m_new = reference_max(m_i, gl.max(s, axis=1) * qk_scale, SLACK)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    row_sum = gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    return p_op, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), m_new, l_i * alpha + row_sum, row_sum



@gluon.jit
def consume_keys(q_half, qpe_smem, k_half, kpe_smem, mine, theirs, k_ready, kv_free, xchg, n0, end, n_tiles, r0,
                 qk_scale, WG: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, HAS_PE: gl.constexpr,
                 s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                 GENERIC_COPIES: gl.constexpr):
    """One consumer warpgroup over ``n_tiles`` >= 1 key tiles of the ring (keys n0, n0 + 1, ...; those >= end
    masked): its partial scores, the exchange, the softmax both run, P·V on its latent half; the partial scores
    of tile j + 1 are issued before the softmax of tile j, whose P·V runs during the next softmax. Returns
    (O [64, 256] f32 unnormalized, m, l in base 2). The ring needs two slots or more: tile j + 1 is awaited before
    tile j's slot is released. ``q_half`` / ``k_half``: this warpgroup's latent half of the queries and of the
    key ring; ``mine`` / ``theirs``: the two warpgroups' score-exchange slots; ``GENERIC_COPIES``: the ring is
    filled by cp.async (``_partial_scores``). Tile j sits at ring position r0 + j and is exchange number r0 + j
    (a persistent program carries the barriers' phases on from item to item; 0 for a program's only item)."""
    gl.static_assert(STAGES >= 2, "tile j + 1 is awaited before tile j's slot is released")
    dtype: gl.constexpr = q_half.dtype
    zero_s = gl.zeros([HEADS, BLOCK_N], gl.float32, layout=s_layout)
    m_i = gl.full([HEADS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([HEADS], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HEADS, HALF], gl.float32, layout=o_layout)
    s = _partial_scores(q_half, k_half, qpe_smem, kpe_smem, k_ready, r0, zero_s, WG, STAGES, HAS_PE, GENERIC_COPIES)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    s = _full_scores(s, mine, theirs, xchg, r0, s_layout)
    p_op, alpha, m_i, l_i, _ = softmax_tile(s, n0, end, m_i, l_i, qk_scale, BLOCK_N, s_layout, p_layout, o_layout,
                                            dtype, 0.0)
    for j in range(1, n_tiles):
        s_next = _partial_scores(q_half, k_half, qpe_smem, kpe_smem, k_ready, r0 + j, zero_s, WG, STAGES, HAS_PE,
                                 GENERIC_COPIES)
        slot = (r0 + j - 1) % STAGES
        acc = warpgroup_mma(p_op, k_half.index(slot), acc, is_async=True)  # O += P·V of tile j - 1
        s_next = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))  # the scores of j; P·V may run on
        s_next = _full_scores(s_next, mine, theirs, xchg, r0 + j, s_layout)
        p_next, alpha_next, m_i, l_i, _ = softmax_tile(s_next, n0 + j * BLOCK_N, end, m_i, l_i, qk_scale, BLOCK_N,
                                                       s_layout, p_layout, o_layout, dtype, 0.0)
        # p_op stays live until its wgmma is waited for: its registers are read asynchronously
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
        mbarrier.arrive(kv_free.index(slot), count=1)
        acc = acc * alpha_next[:, None]
        p_op = p_next
    last = (r0 + n_tiles - 1) % STAGES
    acc = warpgroup_mma(p_op, k_half.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
    mbarrier.arrive(kv_free.index(last), count=1)
    return acc, m_i, l_i
