"""The alternating-block consumer loop of the attn-mla warp-specialized kernels (``WsConfig(alternating=True)``).

Why: in the channel-split loop (``latent_ws.consume_keys``) both consumer warpgroups need both partial scores of a
tile, so both exponentiate at the same moment and the tensor cores idle then (Nsight Compute, 2026-12-02: tensor
pipe active 35-46 %). Here warpgroup w scores the key blocks b with b % 2 == w *whole* (all 512 latent and the rope
channels), runs their softmax, keeps P_b in registers for its own P·V and hands P_b (16-bit), the running max m_b
and P_b's row sums to the other warpgroup through shared memory. Each warpgroup still owns 256 output columns and
folds every block into them in key order: O = O·2^(m_{b-1} - m_b) + P_b·V_b, with P_b from registers (its own
blocks) or shared memory (the other's, a wgmma operand read in place). The running max passes along the chain of
blocks, so one warpgroup's softmax runs while the other's score and P·V wgmmas occupy the tensor cores.

Hand-off slot w (P buffer ``p_mine`` of warpgroup w, statistics ``st_mine``: row 0 m_b, row 1 row sums) is written
only by warpgroup w and read only by the other: ``full[w]`` (one arrival: warpgroup w published) and ``empty[w]``
(one arrival: the other retired the P·V that read it). The two slots are separate allocations: as halves of one
[2, ...] buffer, Triton's membar analysis (which cannot tell the halves apart) put a CTA barrier between every
access to one half and the next to the other (2 of the loop's 17 ``BAR.SYNC`` per 2 blocks, Nsight Compute /
SASS of 2026-12-02). Block b's use of slot b % 2 is number b // 2 of that slot: the barriers' phases. Every wgmma is
retired inside its loop step (one in flight across the loop's boundary makes ptxas serialize them all, C7514).

64-key blocks (FlashMLA's layout, ``latent_ws.p_in_rope_slots``): two P buffers of their own do not fit beside a
2-slot ring of [64, 576] blocks (233 KB), so P_b goes over block b's rope slot, the same [64, 64] 16-bit tile,
which nobody reads once its owner has retired S_b. ``empty`` is then not needed: the slot is refilled only after
``kv_free``'s two arrivals, and the other warpgroup arrives there only after retiring the P·V that read P_b and
after loading b's statistics; the owner writes its statistics again for its next block, b + 2, which with 2 slots
(asserted) is the block that refills b's slot, so only after that arrival. ``full[w]``'s phases cannot run ahead
either: warpgroup w publishes b + 2 only once b + 2 has landed, after the other's fold of b.

Split frees (``SPLIT_FREE``, the ``-f`` configs, with ``HALF_READY``): a slot is freed by halves instead of
once both warpgroups are done with all of it. Warpgroup 0's reads of the low 256 latent channels of every block
end with its P·V over them (its own block's or its fold of the other's), warpgroup 1's of the high channels
likewise, so each warpgroup frees its own half of a slot (``kv_free`` [2·STAGES]: warpgroup w's at w·STAGES + s),
one arrival each; the rope channels are read by the owner's scores and, with P in the rope slots, by the folder's
P·V, so they are refilled last, after both halves' waits. The owner's score wgmmas read the other half too; they have
retired before it publishes, which comes before the other's fold and so before the other's release. The loader
fills the owner's half of a block first (warpgroup 1 scores the high half first), then the other half and the
rope channels. Why: with 2 slots of 64 keys a whole slot came free only after the other warpgroup's fold, and the
next block's gather then waited for it in full (the 64-key forms ran level with the 32-key ones, whose score
wgmmas read 1.5x the shared memory per product); FlashMLA's sparse kernel frees and refills the halves apart.
The statistics and P reasoning above holds half by half: the owner's next block in a slot needs both halves, so
its hand-off still waits for the other's release.

Lazy rescale (``LAZY_RESCALE``, the ``-l`` configs): each O rescale is a [64, 256] fp32 multiply, 128 FMULs a
thread, twice per block and warpgroup (its own block and the other's fold), on the path from one P·V to the
next. With ``softmax_tile``'s ``SLACK`` a row's m moves only when a block's maximum exceeds it by more than
``RESCALE_SLACK`` (P <= 2^8 otherwise: exact in 16 bits up to the usual rounding, l and O in fp32), so after the
first blocks the factor is 1 in every row. With m_b the publisher hands over one byte per warp (did one of its 16
rows' m move: a max within the warp, no barrier), in a buffer of its own; both warpgroups read the 4 bytes as one
32-bit word and skip the multiply while it is 0 (in the fold, the P·V wgmma then issues behind the scores in flight:
ptxas waited for them before the multiply). The other's fold needs nothing more: the receiver's m before the fold is
the m the publisher started block b from (its own last hand-off), so the flag says exactly whether the fold's factor
is 1. Measured (H100, docs/perf/attn-mla.md): DSA 4-9 % faster on items of >= 32 tiles, MLA decode 1-3.5 %.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from attnops.attn_mla.latent_ws import HALF, HEADS, p_in_rope_slots, softmax_tile
from attnops.kernel_utils.gluon_fns import RESCALE_SLACK, release, rescaled, ring_barriers

# [2, HEADS] fp32 per publisher: row 0 the running max m_b, row 1 the row sums of P_b of its last hand-off; with the
# lazy rescale also [WARPS] int8, per warp of the publisher whether one of its 16 rows' m moved (an allocation of its
# own: as another row of the statistics it cost one more warpgroup barrier per hand-off, membar ordering the row
# stores of one buffer)
STATS_LAYOUT = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))
WARPS = gl.constexpr(4)  # a consumer warpgroup's warps: 16 query heads (rows of the wgmma tiles) each
# the 4 flag bytes read back as one 32-bit word by every thread: nonzero if some warp's rows moved (one register, no
# barrier)
WORD_LAYOUT = gl.constexpr(gl.BlockedLayout([1], [32], [WARPS.value], [0]))


@gluon.jit
def handoff_buffers(kpe_smem, BLOCK_N: gl.constexpr, ROPE: gl.constexpr, LAZY_RESCALE: gl.constexpr):
    """The two warpgroups' hand-off slots for ``consume_blocks``, ``(p0, p1, st0, st1, full, empty)``: P buffers
    [64, BLOCK_N] of their own (a wgmma operand in place) or, where ``p_in_rope_slots``, the rope ring ``kpe_smem``
    itself for both (P_b in block b's slot); each publisher's statistics as a pair (row maxima / sums [2, 64], its
    per-warp rescale flags [4] int8: ``LAZY_RESCALE`` only, else the first again); the barriers [publisher] (``empty``:
    unused with P in the rope slots). Separate allocations per publisher (module docstring)."""
    if p_in_rope_slots(BLOCK_N, ROPE):
        p0 = kpe_smem
        p1 = kpe_smem
    else:
        p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEADS, BLOCK_N], kpe_smem.dtype)
        p0 = gl.allocate_shared_memory(kpe_smem.dtype, [HEADS, BLOCK_N], p_layout)
        p1 = gl.allocate_shared_memory(kpe_smem.dtype, [HEADS, BLOCK_N], p_layout)
    st0 = gl.allocate_shared_memory(gl.float32, [2, HEADS], STATS_LAYOUT)
    st1 = gl.allocate_shared_memory(gl.float32, [2, HEADS], STATS_LAYOUT)
    flag0 = st0
    flag1 = st1
    if LAZY_RESCALE:
        flag0 = gl.allocate_shared_memory(gl.int8, [WARPS], STATS_LAYOUT)
        flag1 = gl.allocate_shared_memory(gl.int8, [WARPS], STATS_LAYOUT)
    full, empty = ring_barriers(2, 1, 1)  # one publisher, one reader per slot
    return p0, p1, (st0, flag0), (st1, flag1), full, empty


@gluon.jit
def _p_slot(p_buf, r, STAGES: gl.constexpr):
    """Where P of the block at ring position r is handed over: its slot when ``p_buf`` is the rope ring
    [STAGES, 64, 64], else ``p_buf`` (the publisher's own buffer)."""
    slot = p_buf
    if p_buf.rank == 3:
        slot = p_buf.index(r % STAGES)
    return slot


@gluon.jit
def _queries(q_lo, q_hi, qpe_smem, opaque_zero):
    """The query operands, one-slot buffers [1, 64, W], through ``opaque_zero``: a runtime index that is always 0
    but that no compiler can prove so. Why: with 2 ring slots each warpgroup's blocks always sit in the same slot,
    so every operand of the 36 score wgmmas is loop-invariant; their descriptors were hoisted out of the loop and
    consumer 0 kept them in per-thread registers and spilled 708 B in its loop (MLA, docs/perf/attn-mla.md, 64-key
    seesaw). Computed in the loop from the index, they stay there."""
    return q_lo.index(opaque_zero), q_hi.index(opaque_zero), qpe_smem.index(opaque_zero)


@gluon.jit
def _score_order(q_lo, q_hi, k_lo, k_hi, WG: gl.constexpr, SPLIT_FREE: gl.constexpr):
    """(first query half, second, first key half, second) of a block's scores: with split frees warpgroup 1's blocks
    have their high half filled first (module docstring), so it scores that half first."""
    if SPLIT_FREE and WG == 1:
        return q_hi, q_lo, k_hi, k_lo
    return q_lo, q_hi, k_lo, k_hi


@gluon.jit
def _block_scores(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_ready, r, s_layout: gl.constexpr,
                  BLOCK_N: gl.constexpr, STAGES: gl.constexpr, HAS_PE: gl.constexpr, GENERIC_COPIES: gl.constexpr,
                  HALF_READY: gl.constexpr):
    """Issue S = Q·Kᵀ over every channel (async) once the key block at ring position r has landed.
    ``GENERIC_COPIES``: the block came by cp.async (the generic proxy): a proxy fence orders it before the wgmma
    (the async proxy) reads it. ``HALF_READY``: the slot has two ready barriers (``k_ready`` [2·STAGES]: the low
    latent half, then the high half with the rope channels); the low half's product is issued once it has landed,
    while the rest of the block may still be on its way."""
    slot = r % STAGES
    phase = (r // STAGES) & 1
    mbarrier.wait(k_ready.index(slot), phase)
    if GENERIC_COPIES:
        fence_async_shared()
    zero_s = gl.zeros([HEADS, BLOCK_N], gl.float32, layout=s_layout)  # (made here: not held across the loop)
    s = warpgroup_mma(q_lo, k_lo.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if HALF_READY:
        mbarrier.wait(k_ready.index(STAGES + slot), phase)
        if GENERIC_COPIES:
            fence_async_shared()
    s = warpgroup_mma(q_hi, k_hi.index(slot).permute((1, 0)), s, is_async=True)
    if HAS_PE:
        s = warpgroup_mma(qpe_smem, kpe_smem.index(slot).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _moved_per_warp(m_new, m_old):
    """[WARPS]: whether the step from ``m_old`` to ``m_new`` moved one of rows 16w .. 16w + 15 (warp w's rows in the
    wgmma layouts, so the max stays within each warp: shuffles, no barrier; sm_90 SASS checked)."""
    moved = (m_new > m_old).to(gl.int32)
    return gl.max(gl.reshape(moved, [WARPS, HEADS // WARPS]), axis=1).to(gl.int8)


@gluon.jit
def _any_moved(flag):
    """Whether some row of the hand-off behind ``flag`` moved its m (nonzero; a scalar every thread holds)."""
    return gl.max(flag._reinterpret(gl.int32, [1], STATS_LAYOUT).load(WORD_LAYOUT), axis=0)


@gluon.jit
def _publish(p_op, m_b, row_sum, m_before, p_buf, st_slot, full, empty, r, h, STAGES: gl.constexpr,
             LAZY_RESCALE: gl.constexpr):
    """Hand-off number h of this warpgroup: its P_b, m_b and row sums of the block at ring position r (and,
    ``LAZY_RESCALE``, per warp whether m moved from ``m_before``), to the other, once the other has retired the P·V
    that read the slot's previous contents (a buffer of its own: its ``empty``; the rope slot: ``kv_free`` ordered it
    before block b landed); store, order the stores before the other's wgmma (async proxy) and loads, arrive."""
    if p_buf.rank == 2:
        mbarrier.wait(empty, (h & 1) ^ 1)  # use h of the slot; a fresh barrier passes parity 1
    stats, flag = st_slot
    _p_slot(p_buf, r, STAGES).store(p_op)
    stats.index(0).store(m_b)
    stats.index(1).store(row_sum)
    if LAZY_RESCALE:
        flag.store(_moved_per_warp(m_b, m_before))
    fence_async_shared()
    gl.thread_barrier()  # every thread's stores done before the single arrival releases them
    mbarrier.arrive(full, count=1)


@gluon.jit
def _receive(st_slot, full, h, row_layout: gl.constexpr, LAZY_RESCALE: gl.constexpr):
    """Wait for the other warpgroup's hand-off number h (its block b): (m_b, row sums of P_b, its ``moved`` flag:
    1 without the lazy rescale). Its wait for block b's keys happened before it published: they have landed."""
    mbarrier.wait(full, h & 1)
    stats, flag = st_slot
    moved = 1
    if LAZY_RESCALE:
        moved = _any_moved(flag)
    return stats.index(0).load(row_layout), stats.index(1).load(row_layout), moved


@gluon.jit
def _fold_theirs(acc, m_i, l_i, m_b, row_sum, moved, p_theirs, k_half, r, o_layout: gl.constexpr,
                 STAGES: gl.constexpr, LAZY_RESCALE: gl.constexpr):
    """Issue O = O·2^(m - m_b) + P_b·V_b for the other's block b at ring position r (async, P_b read where it was
    handed over); returns (the wgmma, m_b, l). ``moved`` == 0 (lazy rescale): m_b == m in every row."""
    alpha = gl.exp2(m_i - m_b)  # 0 before this warpgroup's first block (m = -inf); m_b is finite
    scale = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
    acc = rescaled(acc, scale, moved, LAZY_RESCALE)
    acc = warpgroup_mma(_p_slot(p_theirs, r, STAGES), k_half.index(r % STAGES), acc, is_async=True)
    return acc, m_b, l_i * alpha + row_sum


@gluon.jit
def _release_theirs(p_theirs, empty, kv_free, r, FREE0: gl.constexpr, STAGES: gl.constexpr,
                    THREAD_RELEASE: gl.constexpr):
    """After the fold of the other's block at ring position r has retired: its P buffer back to the other (when P
    has a buffer of its own) and this warpgroup's hold on the block's slot back to the loader
    (``gluon_fns.release``; ``FREE0``: where this warpgroup's free barriers start, ``consume_blocks``)."""
    if p_theirs.rank == 2:
        mbarrier.arrive(empty, count=1)
    release(kv_free.index(FREE0 + r % STAGES), THREAD_RELEASE)


@gluon.jit
def _release_queries(q_free, RELEASE_Q: gl.constexpr):
    """This warpgroup's last read of the queries has retired: one arrival on ``q_free`` (``RELEASE_Q``; once an item:
    a per-thread release there made ptxas spill in DSA's consumer 0)."""
    if RELEASE_Q:
        mbarrier.arrive(q_free.index(0), count=1)


@gluon.jit
def consume_blocks(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_half, p_mine, p_theirs, st_mine, st_theirs, full,
                   empty, k_ready, kv_free, q_free, n0, end, n_tiles, r0, h_mine, h_theirs, qk_scale,
                   WG: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, HAS_PE: gl.constexpr,
                   s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                   GENERIC_COPIES: gl.constexpr, RELEASE_Q: gl.constexpr, HALF_READY: gl.constexpr,
                   THREAD_RELEASE: gl.constexpr, LAZY_RESCALE: gl.constexpr, SPLIT_FREE: gl.constexpr):
    """Warpgroup WG's part of ``n_tiles`` >= 1 key blocks of the ring (keys n0, n0 + 1, ...; those >= end masked;
    ``qk_scale`` > 0): it scores blocks WG, WG + 2, ... and folds every block into its output columns (``k_half``: its
    latent half of the ring, the values). Returns (O [64, 256] f32 unnormalized, m, l in base 2), the same m and l
    in both warpgroups. ``q_lo`` / ``q_hi`` / ``qpe_smem``: the queries as one-slot buffers [1, 64, W]
    (``_queries``); ``p_mine`` / ``p_theirs`` and ``st_mine`` / ``st_theirs``: the two hand-off slots (this
    warpgroup's, the other's; ``handoff_buffers``: P buffers [64, BLOCK_N], or both the rope ring; the statistics
    pairs);
    ``full`` / ``empty`` [2]: their barriers, index = the publisher; ``GENERIC_COPIES``: the ring is filled by
    cp.async; ``HALF_READY``: ``k_ready`` holds two barriers a slot (``_block_scores``); ``THREAD_RELEASE``:
    ``kv_free`` takes one arrival per thread (``gluon_fns.release``). The rows of a block past its
    request's keys must hold zeros (the TMA descriptor's or the gather's fill): P's zeros multiply them.

    A persistent program calls this once per work item, the barriers' phases carried on: block b sits at ring
    position r0 + b, and ``h_mine`` / ``h_theirs`` hand-offs were published by this warpgroup / the other before
    (0, 0, 0 for a program's only item). With P in the rope slots only r0 = 0 is valid (the slot reasoning in the
    module docstring needs each warpgroup's blocks on the same slot parity). ``RELEASE_Q``: arrive once on
    ``q_free`` [1] as soon as this warpgroup's last score wgmma has retired (or at once, with no block of its own),
    so that a persistent loader can load the next item's queries during the last blocks' softmax, hand-offs and
    P·V (an item's last block-time earlier than after the return). ``LAZY_RESCALE``: the lazy rescale (module
    docstring); the returned m is then the rows' reference, not their maximum (m + log2 l is the same).
    ``SPLIT_FREE``: ``kv_free`` holds a barrier per slot and warpgroup (module docstring, "Split frees")."""
    gl.static_assert(STAGES >= 2, "warpgroup 0 waits for block b's keys before it frees block b - 1's slot")
    gl.static_assert(p_mine.rank == 2 or STAGES == 2,
                     "P in the rope slots: kv_free guards the statistics only if a warpgroup's next block refills "
                     "the slot of its last one")
    gl.static_assert(HALF_READY or not SPLIT_FREE, "split frees: the loader fills a slot by halves")
    # where this warpgroup's free barriers start: with split frees every release below is of its own half
    FREE0: gl.constexpr = WG * STAGES if SPLIT_FREE else 0
    OTHER: gl.constexpr = 1 - WG
    SLACK: gl.constexpr = RESCALE_SLACK if LAZY_RESCALE else 0.0
    dtype: gl.constexpr = q_lo.dtype
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([HEADS], float("-inf"), gl.float32, layout=row_layout)
    l_i = gl.full([HEADS], 0.0, gl.float32, layout=row_layout)
    acc = gl.zeros([HEADS, HALF], gl.float32, layout=o_layout)
    last = n_tiles - 1
    first = 0
    if WG == 1:
        if n_tiles == 1:  # no block of its own: it never reads the queries
            _release_queries(q_free, RELEASE_Q)
    if WG == 0:  # block 0 has no block before it
        first = 1
        q_lo_0, q_hi_0, qpe_0 = _queries(q_lo, q_hi, qpe_smem, 0)
        s = _block_scores(q_lo_0, q_hi_0, qpe_0, k_lo, k_hi, kpe_smem, k_ready, r0, s_layout, BLOCK_N, STAGES,
                          HAS_PE, GENERIC_COPIES, HALF_READY)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        if n_tiles <= 2:  # block 0 was this warpgroup's only one
            _release_queries(q_free, RELEASE_Q)
        p_op, alpha, m_i, l_i, row_sum = softmax_tile(s, n0, end, m_i, l_i, qk_scale, BLOCK_N, s_layout, p_layout,
                                                      o_layout, dtype, SLACK)
        # (from m = -inf every row moves)
        _publish(p_op, m_i, row_sum, gl.full_like(m_i, float("-inf")), p_mine, st_mine, full.index(WG),
                 empty.index(WG), r0, h_mine, STAGES, LAZY_RESCALE)
        acc = warpgroup_mma(p_op, k_half.index(r0 % STAGES), acc * alpha[:, None], is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
        release(kv_free.index(FREE0 + r0 % STAGES), THREAD_RELEASE)
    for i in range(first, (n_tiles - WG + 1) // 2):
        b = WG + 2 * i  # this warpgroup's block (its hand-off i of the item); b - 1 is the other's
        r = r0 + b
        # index 0: qk_scale > 0 (softmax_tile's row max needs it), and a float argument has no range the compiler
        # knows (``end >> 31`` did not do: in DSA, inside ``count > 0``, LLVM folded it and 836 B spilled)
        q_lo_i, q_hi_i, qpe_i = _queries(q_lo, q_hi, qpe_smem, i * (qk_scale < 0).to(gl.int32))
        q_a, q_b, k_a, k_b = _score_order(q_lo_i, q_hi_i, k_lo, k_hi, WG, SPLIT_FREE)
        s = _block_scores(q_a, q_b, qpe_i, k_a, k_b, kpe_smem, k_ready, r, s_layout, BLOCK_N, STAGES, HAS_PE,
                          GENERIC_COPIES, HALF_READY)
        m_b, row_sum, moved_b = _receive(st_theirs, full.index(OTHER), h_theirs + (b - 1) // 2, row_layout,
                                         LAZY_RESCALE)
        acc, m_i, l_i = _fold_theirs(acc, m_i, l_i, m_b, row_sum, moved_b, p_theirs, k_half, r - 1, o_layout, STAGES,
                                     LAZY_RESCALE)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))  # S_b (its rope slot read); the other's P·V runs on
        if b + 2 > last:  # this warpgroup's last block
            _release_queries(q_free, RELEASE_Q)
        n_b = n0 + b * BLOCK_N
        m_before = m_i
        p_op, alpha, m_i, l_i, row_sum = softmax_tile(s, n_b, end, m_i, l_i, qk_scale, BLOCK_N, s_layout, p_layout,
                                                      o_layout, dtype, SLACK)
        _publish(p_op, m_i, row_sum, m_before, p_mine, st_mine, full.index(WG), empty.index(WG), r, h_mine + i, STAGES,
                 LAZY_RESCALE)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        # (the other's statistics were loaded before _publish's thread barrier: keep the release after _publish)
        _release_theirs(p_theirs, empty.index(OTHER), kv_free, r - 1, FREE0, STAGES, THREAD_RELEASE)
        moved = 1
        if LAZY_RESCALE:  # (its own flags, read after the barriers above: no barrier of its own)
            moved = _any_moved(st_mine[1])
        acc = rescaled(acc, alpha, moved, LAZY_RESCALE)
        acc = warpgroup_mma(p_op, k_half.index(r % STAGES), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
        release(kv_free.index(FREE0 + r % STAGES), THREAD_RELEASE)
    if last % 2 == OTHER:  # the last block is the other's: fold it in too
        m_b, row_sum, moved_b = _receive(st_theirs, full.index(OTHER), h_theirs + last // 2, row_layout, LAZY_RESCALE)
        acc, m_i, l_i = _fold_theirs(acc, m_i, l_i, m_b, row_sum, moved_b, p_theirs, k_half, r0 + last, o_layout,
                                     STAGES, LAZY_RESCALE)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        _release_theirs(p_theirs, empty.index(OTHER), kv_free, r0 + last, FREE0, STAGES, THREAD_RELEASE)
    return acc, m_i, l_i
