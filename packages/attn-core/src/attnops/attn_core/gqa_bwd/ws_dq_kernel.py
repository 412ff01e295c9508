"""GQABwd's dQ role, warp-specialized for Hopper in Gluon (beside ``ws_kernel.py``'s dK / dV role).

One program owns 128 query rows of one query head of one batch element (two 64-row halves, one per consumer
warpgroup), as the forward's Gluon kernel does: a 1-warp loader partition copies the rows' Q and dO once by TMA,
then K and V of every 64-key tile the rows see into a ring of ``STAGES`` slots; each consumer keeps dQ ([64, D]
fp32) in registers and per key tile runs S = Q·Kᵀ and dP = dO·Vᵀ (wgmma from shared memory), P = 2^(S·c − lse),
dS = P ⊙ (dP − Δ), dQ += dS·K (dS as the register operand). dQ is scaled by ``sm_scale`` at the end; every
program writes its own rows once, so dQ stays deterministic (no atomics). The two consumers work on different
rows: one's exponentials run while the other's products hold the tensor cores.

Query blocks from the last (under the causal mask they see the most keys: the heaviest first). Keys past S_kv
in the last tile are other rows of the view or TMA's zeros: masked (P = 0), and their K rows meet only P = 0.
Query rows past S_q are computed from other rows of the view and not stored. Causal mask bottom-right: query row
i (position S_kv − S_q + i) sees key j iff j <= its position.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from attnops.kernel_utils.gluon_fns import (
    invalidate_ring,
    ring_barriers,
    store_layout,
    to_store_layout,
    warpgroup_partition,
    wgmma_acc_layout,
    wgmma_lhs_layout,
)

from .ws_kernel import lse_delta_rows

ROWS = gl.constexpr(64)  # query rows per consumer (one warpgroup's wgmma M)
BLOCK_N = gl.constexpr(64)  # keys per tile


@gluon.jit
def _block(S_q, S_kv, H, IS_CAUSAL: gl.constexpr, AT_LEAST_ONE: gl.constexpr):
    """(b, head, first query row m0, key tiles it visits) of this program: query blocks of 128 from the last. With
    ``AT_LEAST_ONE`` a block that would see no key (only under a causal mask with S_q > S_kv, which the op refuses)
    still visits tile 0, all of it masked (its dQ stays 0): the early form issues its first scores without a branch
    (an in-flight wgmma result cannot leave an ``if``), and that wait must not hang."""
    pid = gl.program_id(0)
    n_m = gl.cdiv(S_q, 2 * ROWS)
    bh = pid % (gl.num_programs(0) // n_m)
    m0 = (n_m - 1 - pid // (gl.num_programs(0) // n_m)) * (2 * ROWS)
    if IS_CAUSAL:  # the block's last row (position S_kv − S_q + its index) sees keys up to its position
        hi = gl.minimum(gl.maximum(S_kv - S_q + gl.minimum(m0 + 2 * ROWS, S_q), 0), S_kv)
    else:
        hi = S_kv
    n_tiles = gl.cdiv(hi, BLOCK_N)
    if AT_LEAST_ONE:
        n_tiles = gl.maximum(n_tiles, 1)
    return bh // H, bh % H, m0, n_tiles


@gluon.jit
def _scores(q_tile, do_tile, k_smem, v_smem, ready, j, zero_s, STAGES: gl.constexpr):
    """Issue S = Q·Kᵀ and dP = dO·Vᵀ of key tile j once its slot is loaded (not waited for)."""
    slot = j % STAGES
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    dp = warpgroup_mma(do_tile, v_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    return s, dp


@gluon.jit
def _ds_operand(s, dp, j, rows, lse, delta, S_q, S_kv, qk_scale, s_layout: gl.constexpr, op_layout: gl.constexpr,
                dtype: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """dS = P ⊙ (dP − Δ) of key tile j as dQ's register operand, P = 2^(S·c − lse) masked."""
    p = gl.exp2(s * qk_scale - lse[:, None])
    keys = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if IS_CAUSAL:
        p = gl.where(keys[None, :] <= (S_kv - S_q + rows)[:, None], p, 0.0)
    else:
        p = gl.where((keys < S_kv)[None, :], p, 0.0)
    return gl.convert_layout((p * (dp - delta[:, None])).to(dtype), op_layout)


@gluon.jit
def _consumer(q_tiles, do_tiles, k_smem, v_smem, qd_ready, ready, free, lse_ptr, delta_ptr, dq_ptr, S_q, S_kv, H, G,
              qk_scale, sm_scale, stride_lb, stride_lh, stride_dqb, stride_dqt, stride_dqh, WG: gl.constexpr,
              HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, EARLY_SCORES: gl.constexpr):
    """Query rows [m0 + 64·WG, +64) over every visible key tile, then their dQ."""
    q_tile = q_tiles.index(WG)
    do_tile = do_tiles.index(WG)
    s_layout: gl.constexpr = wgmma_acc_layout(BLOCK_N)
    acc_layout: gl.constexpr = wgmma_acc_layout(HEAD_DIM)
    op_layout: gl.constexpr = wgmma_lhs_layout(HEAD_DIM)
    dtype: gl.constexpr = q_tile.dtype
    b, head, m0, n_tiles = _block(S_q, S_kv, H, IS_CAUSAL, EARLY_SCORES)
    rows = m0 + WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    lse, delta = lse_delta_rows(lse_ptr, delta_ptr, b, head, H, rows, S_q, stride_lb, stride_lh)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    dq = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=acc_layout)
    mbarrier.wait(qd_ready.index(0), 0)
    if EARLY_SCORES:  # tile j + 1's S / dP issued first, so they run while tile j's dS is formed
        s, dp = _scores(q_tile, do_tile, k_smem, v_smem, ready, 0, zero_s, STAGES)
        s, dp = warpgroup_mma_wait(num_outstanding=0, deps=(s, dp))
        for j in range(n_tiles - 1):
            s_next, dp_next = _scores(q_tile, do_tile, k_smem, v_smem, ready, j + 1, zero_s, STAGES)
            ds_op = _ds_operand(s, dp, j, rows, lse, delta, S_q, S_kv, qk_scale, s_layout, op_layout, dtype,
                                IS_CAUSAL)
            dq = warpgroup_mma(ds_op, k_smem.index(j % STAGES), dq, is_async=True)
            s, dp = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, dp_next))  # dQ of tile j may run on
            dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ds_op))[0]
            mbarrier.arrive(free.index(j % STAGES), count=1)
        ds_op = _ds_operand(s, dp, n_tiles - 1, rows, lse, delta, S_q, S_kv, qk_scale, s_layout, op_layout, dtype,
                            IS_CAUSAL)
        dq = warpgroup_mma(ds_op, k_smem.index((n_tiles - 1) % STAGES), dq, is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ds_op))[0]
        mbarrier.arrive(free.index((n_tiles - 1) % STAGES), count=1)
    else:
        for j in range(n_tiles):
            slot = j % STAGES
            s, dp = _scores(q_tile, do_tile, k_smem, v_smem, ready, j, zero_s, STAGES)
            s, dp = warpgroup_mma_wait(num_outstanding=0, deps=(s, dp))
            ds_op = _ds_operand(s, dp, j, rows, lse, delta, S_q, S_kv, qk_scale, s_layout, op_layout, dtype,
                                IS_CAUSAL)
            dq = warpgroup_mma(ds_op, k_smem.index(slot), dq, is_async=True)
            dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ds_op))[0]  # ds_op's registers: live until here
            mbarrier.arrive(free.index(slot), count=1)

    # dQ leaves the accumulator layout for 16-byte pieces along the rows first (``gluon_fns.store_layout``, warp
    # shuffles): 8 ``STG.E.128`` a thread at D = 128 instead of 32 4-byte ``STG.E``
    out_layout: gl.constexpr = store_layout(HEAD_DIM, dtype.primitive_bitwidth)
    vals = to_store_layout((dq * sm_scale).to(dtype))
    out_rows = m0 + WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, out_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, out_layout))
    gl.store(dq_ptr + b.to(gl.int64) * stride_dqb + head.to(gl.int64) * stride_dqh
             + out_rows.to(gl.int64)[:, None] * stride_dqt + cols[None, :], vals, mask=(out_rows < S_q)[:, None])


@gluon.jit
def _loader(q_desc, do_desc, k_desc, v_desc, q_tiles, do_tiles, k_smem, v_smem, qd_ready, ready, free, S_q, S_kv, H,
            G, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, EARLY_SCORES: gl.constexpr):
    """TMA producer: the block's Q and dO once, then K / V of every visible key tile (``_block``)."""
    b, head, m0, n_tiles = _block(S_q, S_kv, H, IS_CAUSAL, EARLY_SCORES)
    q_row = b * S_q + m0
    bar = qd_ready.index(0)
    mbarrier.expect(bar, 2 * q_desc.block_type.nbytes + 2 * do_desc.block_type.nbytes)
    for w in gl.static_range(2):
        tma.async_copy_global_to_shared(q_desc, [q_row + w * ROWS, head * HEAD_DIM], bar, q_tiles.index(w))
        tma.async_copy_global_to_shared(do_desc, [q_row + w * ROWS, head * HEAD_DIM], bar, do_tiles.index(w))
    kv_col = (head // G) * HEAD_DIM
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(free.index(slot), ((j // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        tile_bar = ready.index(slot)
        mbarrier.expect(tile_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b * S_kv + j * BLOCK_N, kv_col], tile_bar, k_smem.index(slot))
        tma.async_copy_global_to_shared(v_desc, [b * S_kv + j * BLOCK_N, kv_col], tile_bar, v_smem.index(slot))


@gluon.jit
def gqa_bwd_dq_ws_kernel(q_desc, do_desc, k_desc, v_desc, lse_ptr, delta_ptr, dq_ptr, S_q, S_kv, H, G, qk_scale,
                         sm_scale, stride_lb, stride_lh, stride_dqb, stride_dqt, stride_dqh, HEAD_DIM: gl.constexpr,
                         STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, EARLY_SCORES: gl.constexpr):
    """Grid: (cdiv(S_q, 128) · B · H,), query block slowest (from the last). Descriptors: q / dO over
    ``[B·S_q, H·D]`` in [64, D] boxes, k / v over ``[B·S_kv, H_kv·D]`` in [64, D] boxes. num_warps = 4
    (consumer 0), plus the worker partitions (consumer 1: 4 warps, loader: 1 warp). ``EARLY_SCORES``: a consumer
    issues the next key tile's S / dP right behind the tile's dQ product, before waiting for it (the default waits,
    then issues them)."""
    dtype: gl.constexpr = q_desc.dtype
    q_tiles = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], q_desc.layout)  # [consumer]
    do_tiles = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    qd_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(qd_ready.index(0), count=1)
    ready, free = ring_barriers(STAGES, 1, 2)  # one TMA expect per fill; both consumers release a slot
    fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
    consumer_args = (q_tiles, do_tiles, k_smem, v_smem, qd_ready, ready, free, lse_ptr, delta_ptr, dq_ptr, S_q, S_kv,
                     H, G, qk_scale, sm_scale, stride_lb, stride_lh, stride_dqb, stride_dqt, stride_dqh)
    consumer_flags: gl.constexpr = (HEAD_DIM, STAGES, IS_CAUSAL, EARLY_SCORES)
    gl.warp_specialize([
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
        (_loader, (q_desc, do_desc, k_desc, v_desc, q_tiles, do_tiles, k_smem, v_smem, qd_ready, ready, free, S_q,
                   S_kv, H, G, HEAD_DIM, STAGES, IS_CAUSAL, EARLY_SCORES)),
    ], [4, 1], [240, 24])
    mbarrier.invalidate(qd_ready.index(0))
    invalidate_ring(ready, free, STAGES)
