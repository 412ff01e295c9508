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
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from attnops.attn_mla.latent_ws import HALF, HEADS, softmax_tile

# [2, HEADS] fp32 per publisher: row 0 the running max m_b, row 1 the row sums of P_b of its last hand-off
STATS_LAYOUT = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))


@gluon.jit
def _block_scores(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_ready, b, s_layout: gl.constexpr,
                  BLOCK_N: gl.constexpr, STAGES: gl.constexpr, HAS_PE: gl.constexpr, GENERIC_COPIES: gl.constexpr):
    """Issue S_b = Q·K_bᵀ over every channel (async) once key block b has landed. ``GENERIC_COPIES``: the block
    came by cp.async (the generic proxy): a proxy fence orders it before the wgmma (the async proxy) reads it."""
    slot = b % STAGES
    mbarrier.wait(k_ready.index(slot), (b // STAGES) & 1)
    if GENERIC_COPIES:
        fence_async_shared()
    zero_s = gl.zeros([HEADS, BLOCK_N], gl.float32, layout=s_layout)  # (made here: not held across the loop)
    s = warpgroup_mma(q_lo, k_lo.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma(q_hi, k_hi.index(slot).permute((1, 0)), s, is_async=True)
    if HAS_PE:
        s = warpgroup_mma(qpe_smem, kpe_smem.index(slot).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _publish(p_op, m_b, row_sum, p_slot, st_slot, full, empty, use):
    """Hand this warpgroup's P_b, m_b and row sums to the other: once the other has retired the P·V that read the
    slot's previous contents, store, order the stores before the other's wgmma (async proxy) and loads, arrive."""
    mbarrier.wait(empty, (use & 1) ^ 1)  # a fresh barrier passes parity 1
    p_slot.store(p_op)
    st_slot.index(0).store(m_b)
    st_slot.index(1).store(row_sum)
    fence_async_shared()
    gl.thread_barrier()  # every thread's stores done before the single arrival releases them
    mbarrier.arrive(full, count=1)


@gluon.jit
def _receive(st_slot, full, b, row_layout: gl.constexpr):
    """Wait for the other warpgroup's hand-off of its block b: (m_b, row sums of P_b). Its wait for block b's
    keys happened before it published: they have landed."""
    mbarrier.wait(full, (b // 2) & 1)
    return st_slot.index(0).load(row_layout), st_slot.index(1).load(row_layout)


@gluon.jit
def _fold_theirs(acc, m_i, l_i, m_b, row_sum, p_slot, k_half, b, o_layout: gl.constexpr, STAGES: gl.constexpr):
    """Issue O = O·2^(m - m_b) + P_b·V_b for the other's block b (async, P_b read from its shared slot); returns
    (the wgmma, m_b, l)."""
    alpha = gl.exp2(m_i - m_b)  # 0 before this warpgroup's first block (m = -inf); m_b is finite
    scale = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
    acc = warpgroup_mma(p_slot, k_half.index(b % STAGES), acc * scale[:, None], is_async=True)
    return acc, m_b, l_i * alpha + row_sum


@gluon.jit
def consume_blocks(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_half, p_mine, p_theirs, st_mine, st_theirs, full,
                   empty, k_ready, kv_free, n0, end, n_tiles, qk_scale, WG: gl.constexpr, BLOCK_N: gl.constexpr,
                   STAGES: gl.constexpr, HAS_PE: gl.constexpr, s_layout: gl.constexpr, o_layout: gl.constexpr,
                   p_layout: gl.constexpr, GENERIC_COPIES: gl.constexpr):
    """Warpgroup WG's part of ``n_tiles`` >= 1 key blocks of the ring (keys n0, n0 + 1, ...; those >= end masked):
    it scores blocks WG, WG + 2, ... and folds every block into its output columns (``k_half``: its latent half
    of the ring, the values). Returns (O [64, 256] f32 unnormalized, m, l in base 2), the same m and l in both
    warpgroups. ``p_mine`` / ``p_theirs`` [64, BLOCK_N] and ``st_mine`` / ``st_theirs`` [2, 64]: the two hand-off
    slots (this warpgroup's, the other's); ``full`` / ``empty`` [2]: their barriers, index = the publisher;
    ``GENERIC_COPIES``: the ring is filled by cp.async. The rows of a block past its request's keys must hold
    zeros (the TMA descriptor's or the gather's fill): P's zeros multiply them."""
    gl.static_assert(STAGES >= 2, "warpgroup 0 waits for block b's keys before it frees block b - 1's slot")
    OTHER: gl.constexpr = 1 - WG
    dtype: gl.constexpr = q_lo.dtype
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([HEADS], float("-inf"), gl.float32, layout=row_layout)
    l_i = gl.full([HEADS], 0.0, gl.float32, layout=row_layout)
    acc = gl.zeros([HEADS, HALF], gl.float32, layout=o_layout)
    last = n_tiles - 1
    first = 0
    if WG == 0:  # block 0 has no block before it
        first = 1
        s = _block_scores(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_ready, 0, s_layout, BLOCK_N, STAGES,
                          HAS_PE, GENERIC_COPIES)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        p_op, alpha, m_i, l_i, row_sum = softmax_tile(s, n0, end, m_i, l_i, qk_scale, BLOCK_N, s_layout, p_layout,
                                                      o_layout, dtype)
        _publish(p_op, m_i, row_sum, p_mine, st_mine, full.index(WG), empty.index(WG), 0)
        acc = warpgroup_mma(p_op, k_half.index(0), acc * alpha[:, None], is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
        mbarrier.arrive(kv_free.index(0), count=1)
    for i in range(first, (n_tiles - WG + 1) // 2):
        b = WG + 2 * i  # this warpgroup's block; b - 1 is the other's
        s = _block_scores(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_ready, b, s_layout, BLOCK_N, STAGES,
                          HAS_PE, GENERIC_COPIES)
        m_b, row_sum = _receive(st_theirs, full.index(OTHER), b - 1, row_layout)
        acc, m_i, l_i = _fold_theirs(acc, m_i, l_i, m_b, row_sum, p_theirs, k_half, b - 1, o_layout, STAGES)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))  # S_b; the other's P·V runs on
        n_b = n0 + b * BLOCK_N
        p_op, alpha, m_i, l_i, row_sum = softmax_tile(s, n_b, end, m_i, l_i, qk_scale, BLOCK_N, s_layout, p_layout,
                                                      o_layout, dtype)
        _publish(p_op, m_i, row_sum, p_mine, st_mine, full.index(WG), empty.index(WG), b // 2)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        # the other's slot read (its stats loads precede this arrival through _publish's thread barrier: keep
        # the arrival after _publish)
        mbarrier.arrive(empty.index(OTHER), count=1)
        mbarrier.arrive(kv_free.index((b - 1) % STAGES), count=1)
        acc = warpgroup_mma(p_op, k_half.index(b % STAGES), acc * alpha[:, None], is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
        mbarrier.arrive(kv_free.index(b % STAGES), count=1)
    if last % 2 == OTHER:  # the last block is the other's: fold it in too
        m_b, row_sum = _receive(st_theirs, full.index(OTHER), last, row_layout)
        acc, m_i, l_i = _fold_theirs(acc, m_i, l_i, m_b, row_sum, p_theirs, k_half, last, o_layout, STAGES)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index(OTHER), count=1)
        mbarrier.arrive(kv_free.index(last % STAGES), count=1)
    return acc, m_i, l_i
