"""GQABwd's dK / dV role, warp-specialized for Hopper in Gluon (the dQ role stays the Triton kernel's).

Why: the Triton backward issues its products serially (0.65-0.80x cuDNN, docs/perf/attn-core.md). Here one
program owns a 128-key block of one KV head of one batch element, as the Triton dK/dV role does, split FA3's way:

* a 1-warp loader partition copies the block's K and V once by TMA (two [64, D] tiles each, one per consumer),
  then for every (query head of the group, query block) pair that sees the keys, Q_i and dO_i into
  a ring of ``STAGES`` slots (``ready`` counts the bytes; a slot is refilled after both consumers released it);
* two 4-warp consumer partitions own 64 keys each, with dK and dV ([64, D] fp32) in registers. Per pair:
  Sᵀ = K_w·Q_iᵀ (wgmma from shared memory), Pᵀ = 2^(Sᵀ·c − lse), then dV += Pᵀ·dO_i with dPᵀ = V_w·dO_iᵀ
  behind it, dSᵀ = Pᵀ ⊙ (dPᵀ − Δ), dK += dSᵀ·Q_i (Pᵀ / dSᵀ as register operands). The two
  warpgroups are independent (different keys), so one's exponentials run while the other's products hold the
  tensor cores.

Shapes: dense ``[B, S, H, D]`` q / dO read through ``[B·S_q, H·D]`` row views, k / v through ``[B·S_kv,
H_kv·D]``; D 64 or 128, fp16 / bf16; causal (bottom-right) or not. Query rows past S_q in a block are other rows
of the view (or TMA's zeros): their lse loads as +inf (P = 0) and Δ as 0, so they add nothing. Key rows past
S_kv are computed and not stored. lse is the forward's, base 2; Δ = rowsum(o ⊙ dO) (the preprocess kernel).
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

KEYS_PER_CONSUMER = gl.constexpr(64)  # one warpgroup's wgmma M


@gluon.jit
def _block(tile, n_tiles, S_q, S_kv, H_kv, G, GS, BLOCK_M: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """Tile ``tile``'s (b, KV head, first key n0, first visible query block m_lo, query blocks it visits, first
    query head h0, head subgroup sg) of ``n_tiles``: key blocks of 128 from the first (under the causal mask they
    see the most queries: the heaviest first), then (batch, KV head), then the subgroup of ``GS`` of the G query
    heads (the subgroups of one key block side by side: they read the same K / V)."""
    pid = tile
    n_blocks = gl.cdiv(S_kv, 2 * KEYS_PER_CONSUMER)
    per_block = n_tiles // n_blocks
    splits = G // GS
    bkv = (pid % per_block) // splits
    sg = pid % splits
    n0 = (pid // per_block) * (2 * KEYS_PER_CONSUMER)
    if IS_CAUSAL:  # query row i (position S_kv − S_q + i) sees key j iff j <= its position
        first = gl.maximum(n0 - (S_kv - S_q), 0)
    else:
        first = n0 * 0
    m_lo = (first // BLOCK_M) * BLOCK_M
    n_m = gl.cdiv(gl.maximum(S_q - m_lo, 0), BLOCK_M)
    kvh = bkv % H_kv
    return bkv // H_kv, kvh, n0, m_lo, n_m, kvh * G + sg * GS, sg


@gluon.jit
def _walked_tile(v, n_tiles):
    """The tile a persistent program takes at its step ``v`` (``range(program_id, n_tiles, num_programs)``: round r =
    v // num_programs): round r's tiles in program order, every other round in reverse (the last round reversed
    over the tiles it has), so the heaviest-first tiles even out (H200's 132 programs over llama-8b-long's 256
    tiles: the busiest program 1.03x the mean this way, 1.46x round-robin; 1.03x / 1.09x over the long MHA rows'
    1024)."""
    nprog = gl.num_programs(0)
    first = (v // nprog) * nprog  # the round's first tile
    if (v // nprog) % 2 == 1:
        v = first + gl.minimum(nprog, n_tiles - first) - 1 - (v - first)
    return v


@gluon.jit
def lse_delta_rows(lse_ptr, delta_ptr, b, head, n_heads, rows, S_q, stride_lb, stride_lh):
    """Query ``rows`` of (b, head): the forward's base-2 lse (+inf past S_q: P = 0) and Δ (``[B, H, S_q]``; 0 past
    S_q). Both Gluon backward kernels (dK / dV here, ``ws_dq_kernel``) load them so."""
    row_ok = rows < S_q
    lse = gl.load(lse_ptr + b.to(gl.int64) * stride_lb + head.to(gl.int64) * stride_lh + rows, mask=row_ok,
                  other=float("inf"))
    delta = gl.load(delta_ptr + (b * n_heads + head).to(gl.int64) * S_q + rows, mask=row_ok, other=0.0)
    return lse, delta


@gluon.jit
def _pair_rows(t, b, h0, m_lo, n_m, lse_ptr, delta_ptr, S_q, H, stride_lb, stride_lh, s_layout: gl.constexpr,
               BLOCK_M: gl.constexpr):
    """Pair t's query rows, their lse and Δ (``lse_delta_rows``)."""
    rows = m_lo + (t % n_m) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    lse, delta = lse_delta_rows(lse_ptr, delta_ptr, b, h0 + t // n_m, H, rows, S_q, stride_lb, stride_lh)
    return rows, lse, delta


@gluon.jit
def _probs(s_t, rows, lse, keys, S_q, S_kv, qk_scale, IS_CAUSAL: gl.constexpr):
    """Pᵀ = 2^(Sᵀ·c − lse), pairs above the causal diagonal 0 (only blocks that cross it have any; the select is
    cheap beside exp2)."""
    p_t = gl.exp2(s_t * qk_scale - lse[None, :])
    if IS_CAUSAL:  # query row i (position S_kv − S_q + i) sees key j iff j <= its position
        p_t = gl.where(keys[:, None] <= (S_kv - S_q + rows)[None, :], p_t, 0.0)
    return p_t


@gluon.jit
def _dv_dp(p_t, dv, v_tile, do_tile, zero_s, dtype: gl.constexpr, op_layout: gl.constexpr):
    """Issue dV += Pᵀ·dO_i and dPᵀ = V_w·dO_iᵀ (not waited for); returns dV, dPᵀ and Pᵀ's register operand, which
    the wgmma reads asynchronously (a dependency of the wait). dV's product goes first: S's registers are free
    before dPᵀ's are taken (at D = 128, 64-row pairs, both score tiles in flight beside dK and dV spilled 268-696 B
    offline, this order 192-320 B: ws_launch gives D = 128 32-row pairs)."""
    p_op = gl.convert_layout(p_t.to(dtype), op_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    dp_t = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    return dv, dp_t, p_op


@gluon.jit
def _dv_ds(p_t, delta, dv, v_tile, do_tile, zero_s, dtype: gl.constexpr, op_layout: gl.constexpr):
    """``_dv_dp``, both waited for, then dSᵀ = Pᵀ ⊙ (dPᵀ − Δ) as dK's register operand."""
    dv, dp_t, p_op = _dv_dp(p_t, dv, v_tile, do_tile, zero_s, dtype, op_layout)
    done = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dp_t, p_op))
    return done[0], _ds_operand(p_t, done[1], delta, dtype, op_layout)


@gluon.jit
def _ds_operand(p_t, dp_t, delta, dtype: gl.constexpr, op_layout: gl.constexpr):
    """dSᵀ = Pᵀ ⊙ (dPᵀ − Δ) as dK's register operand."""
    return gl.convert_layout((p_t * (dp_t - delta[None, :])).to(dtype), op_layout)


@gluon.jit
def _next_scores(k_tile, q_smem, ready, fill, zero_s, STAGES: gl.constexpr):
    """Issue Sᵀ = K_w·Q_iᵀ of the ring's fill ``fill`` once its slot is loaded (not waited for)."""
    mbarrier.wait(ready.index(fill % STAGES), (fill // STAGES) & 1)
    return warpgroup_mma(k_tile, q_smem.index(fill % STAGES).permute((1, 0)), zero_s, use_acc=False, is_async=True)


@gluon.jit
def _consumer(k_tiles, v_tiles, q_smem, do_smem, kv_ready, kv_free, ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
              part_ptr, n_tiles, S_q, S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb,
              stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh, WG: gl.constexpr, HEAD_DIM: gl.constexpr,
              BLOCK_M: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, PARTIAL: gl.constexpr,
              PERSISTENT: gl.constexpr, EARLY_SCORES: gl.constexpr):
    """Consumer ``WG``'s 64 keys of each tile the program owns: its own tile, or with ``PERSISTENT`` one per round
    (``_walked_tile``; the ring's slots count on across tiles). There K / V are handed back
    (``kv_free``) as soon as the tile's last product that reads them retires, so the loader refills them while the
    tile's dK / dV are stored. (Two K / V buffers picked per tile made the K / V operands' addresses dynamic: 140 B
    of spills in the sm_90 build.)"""
    if PERSISTENT:
        pairs_before = 0
        for v in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
            pairs_before += _consume_tile(
                _walked_tile(v, n_tiles), n_tiles, pairs_before, (v // gl.num_programs(0)) & 1, k_tiles.index(WG),
                v_tiles.index(WG), q_smem, do_smem,
                kv_ready.index(0), kv_free.index(0), ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, S_q,
                S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh,
                stride_dvb, stride_dvt, stride_dvh, WG, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PARTIAL, True,
                EARLY_SCORES)
    else:
        _consume_tile(gl.program_id(0), gl.num_programs(0), 0, 0, k_tiles.index(WG), v_tiles.index(WG), q_smem,
                      do_smem, kv_ready.index(0), kv_free.index(0), ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                      part_ptr, S_q, S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb,
                      stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh, WG, HEAD_DIM, BLOCK_M, STAGES,
                      IS_CAUSAL, PARTIAL, False, EARLY_SCORES)


@gluon.jit
def _consume_tile(tile, n_tiles, pairs_before, kv_phase, k_tile, v_tile, q_smem, do_smem, kv_bar, kv_free_bar, ready,
                  free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, S_q, S_kv, H_kv, G, GS, qk_scale, sm_scale,
                  stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
                  WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                  IS_CAUSAL: gl.constexpr, PARTIAL: gl.constexpr, RELEASE_KV: gl.constexpr,
                  EARLY_SCORES: gl.constexpr):
    """Keys [n0 + 64·WG, +64) of tile ``tile`` over every pair, then their dK / dV; returns the tile's pair count.
    Its pairs are the ring's fills ``pairs_before`` on; ``RELEASE_KV``: arrive on ``kv_free_bar`` once K / V are no
    longer read. Software-pipelined (attn-core 0.3.18): Sᵀ of pair t + 1 is
    issued before dK of pair t and waited for with dK still in flight, so the next pair's exponentials run beside
    dK's product; the serial form before it (each product waited for in turn) was 7-27 % slower than the Triton
    dK / dV role (H200, 2026-12-02)."""
    R: gl.constexpr = KEYS_PER_CONSUMER
    s_layout: gl.constexpr = wgmma_acc_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_acc_layout(HEAD_DIM)
    op_layout: gl.constexpr = wgmma_lhs_layout(HEAD_DIM)
    dtype: gl.constexpr = q_smem.dtype
    b, kvh, n0, m_lo, n_m, h0, sg = _block(tile, n_tiles, S_q, S_kv, H_kv, G, GS, BLOCK_M, IS_CAUSAL)
    keys = n0 + WG * R + gl.arange(0, R, layout=gl.SliceLayout(1, s_layout))
    zero_s = gl.zeros([R, BLOCK_M], gl.float32, layout=s_layout)
    dk = gl.zeros([R, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([R, HEAD_DIM], gl.float32, layout=acc_layout)
    n = GS * n_m
    p_t = zero_s
    rows, lse, delta = _pair_rows(0, b, h0, m_lo, n_m, lse_ptr, delta_ptr, S_q, H_kv * G, stride_lb, stride_lh,
                                  s_layout, BLOCK_M)
    mbarrier.wait(kv_bar, kv_phase)
    if n > 0:
        first = pairs_before % STAGES
        mbarrier.wait(ready.index(first), (pairs_before // STAGES) & 1)
        s_t = warpgroup_mma(k_tile, q_smem.index(first).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t, ))
        p_t = _probs(s_t, rows, lse, keys, S_q, S_kv, qk_scale, IS_CAUSAL)
    for t in range(n - 1):
        slot = (pairs_before + t) % STAGES
        if EARLY_SCORES:  # Sᵀ of t + 1 queued behind dV / dPᵀ: the tensor pipe has it while dSᵀ is formed
            dv, dp_t, p_op = _dv_dp(p_t, dv, v_tile, do_smem.index(slot), zero_s, dtype, op_layout)
            s_t = _next_scores(k_tile, q_smem, ready, pairs_before + t + 1, zero_s, STAGES)
            done = warpgroup_mma_wait(num_outstanding=1, deps=(dv, dp_t, p_op))
            dv = done[0]
            ds_op = _ds_operand(p_t, done[1], delta, dtype, op_layout)
        else:
            dv, ds_op = _dv_ds(p_t, delta, dv, v_tile, do_smem.index(slot), zero_s, dtype, op_layout)
            s_t = _next_scores(k_tile, q_smem, ready, pairs_before + t + 1, zero_s, STAGES)
        dk = warpgroup_mma(ds_op, q_smem.index(slot), dk, is_async=True)
        rows, lse, delta = _pair_rows(t + 1, b, h0, m_lo, n_m, lse_ptr, delta_ptr, S_q, H_kv * G, stride_lb,
                                      stride_lh, s_layout, BLOCK_M)
        s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t, ))  # Sᵀ of t + 1 (issued first); dK may run
        p_t = _probs(s_t, rows, lse, keys, S_q, S_kv, qk_scale, IS_CAUSAL)
        dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk, ds_op))[0]
        mbarrier.arrive(free.index(slot), count=1)
    if n > 0:  # the last pair: nothing after it to overlap
        slot = (pairs_before + n - 1) % STAGES
        dv, ds_op = _dv_ds(p_t, delta, dv, v_tile, do_smem.index(slot), zero_s, dtype, op_layout)
        dk = warpgroup_mma(ds_op, q_smem.index(slot), dk, is_async=True)
        dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk, ds_op))[0]
        mbarrier.arrive(free.index(slot), count=1)
    if RELEASE_KV:  # every product reading K / V has retired: they may be refilled while dK / dV are stored
        mbarrier.arrive(kv_free_bar, count=1)

    # dK / dV leave the accumulator layout for 16-byte pieces along the rows first (``gluon_fns.store_layout``,
    # warp shuffles): 8 ``STG.E.128`` a thread per 16-bit [64, 128] tile instead of 32 4-byte ``STG.E``, 16 instead
    # of 32 8-byte ``STG.E.64`` per fp32 partial tile (the measurement: gluon_fns, attn-mla's DSA stores). In the
    # persistent causal builds (ws-s3-p, ws-s3-p-e: the long MHA rows) ptxas then spills 8 B, one 4-byte value of
    # consumer 1 stored before the tile loop and reloaded once a tile (offline sm_90, 2026-12-04): kept, as that
    # build is the one whose epilogue the change is for (sm90_compile_bwd_ws allows it those 8 B).
    if PARTIAL:  # unscaled fp32 sums of this subgroup's heads: [2, G / GS, B·H_kv, S_kv, D] (the head-sum kernel)
        t64, cols, ok = _out_keys(n0, S_kv, store_layout(HEAD_DIM, 32), WG, HEAD_DIM)
        subgroup_rows = n_tiles // gl.cdiv(S_kv, 2 * R)  # (G / GS)·B·H_kv: one of dK's / dV's halves
        row = sg * (subgroup_rows // (G // GS)) + b * H_kv + kvh
        part = part_ptr + (row.to(gl.int64) * S_kv + t64) * HEAD_DIM + cols[None, :]
        gl.store(part, to_store_layout(dk), mask=ok)
        gl.store(part + subgroup_rows.to(gl.int64) * S_kv * HEAD_DIM, to_store_layout(dv), mask=ok)
    else:
        t64, cols, ok = _out_keys(n0, S_kv, store_layout(HEAD_DIM, dtype.primitive_bitwidth), WG, HEAD_DIM)
        dk_out = to_store_layout((dk * sm_scale).to(dtype))
        dv_out = to_store_layout(dv.to(dtype))
        gl.store(dk_ptr + b.to(gl.int64) * stride_dkb + kvh * stride_dkh + t64 * stride_dkt + cols[None, :], dk_out,
                 mask=ok)
        gl.store(dv_ptr + b.to(gl.int64) * stride_dvb + kvh * stride_dvh + t64 * stride_dvt + cols[None, :], dv_out,
                 mask=ok)
    return n


@gluon.jit
def _out_keys(n0, S_kv, layout: gl.constexpr, WG: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Consumer ``WG``'s key rows of the tile (64-bit, [64, 1]), the columns ([HEAD_DIM]) and which rows lie inside
    S_kv ([64, 1]), in slices of the 2-D store ``layout``."""
    keys = n0 + WG * KEYS_PER_CONSUMER + gl.arange(0, KEYS_PER_CONSUMER, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    return keys.to(gl.int64)[:, None], cols, (keys < S_kv)[:, None]


@gluon.jit
def _loader(q_desc, do_desc, k_desc, v_desc, k_tiles, v_tiles, q_smem, do_smem, kv_ready, kv_free, ready, free,
            n_tiles, S_q, S_kv, H_kv, G, GS, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
            IS_CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr):
    """TMA producer of the program's tiles (``_consumer``'s order): per tile its K / V once (with ``PERSISTENT``
    after both consumers handed the last tile's back), then Q_i and dO_i of every pair."""
    if PERSISTENT:
        pairs_before = 0
        for v in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
            mbarrier.wait(kv_free.index(0), ((v // gl.num_programs(0)) & 1) ^ 1)  # a fresh barrier passes parity 1
            pairs_before += _load_tile(_walked_tile(v, n_tiles), n_tiles, pairs_before, q_desc, do_desc, k_desc, v_desc,
                                       k_tiles.index(0), k_tiles.index(1), v_tiles.index(0), v_tiles.index(1), q_smem,
                                       do_smem, kv_ready.index(0), ready, free, S_q, S_kv, H_kv, G, GS, HEAD_DIM,
                                       BLOCK_M, STAGES, IS_CAUSAL)
    else:
        _load_tile(gl.program_id(0), gl.num_programs(0), 0, q_desc, do_desc, k_desc, v_desc, k_tiles.index(0),
                   k_tiles.index(1), v_tiles.index(0), v_tiles.index(1), q_smem, do_smem, kv_ready.index(0), ready,
                   free, S_q, S_kv, H_kv, G, GS, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL)


@gluon.jit
def _load_tile(tile, n_tiles, pairs_before, q_desc, do_desc, k_desc, v_desc, k_lo, k_hi, v_lo, v_hi, q_smem, do_smem,
               kv_bar, ready, free, S_q, S_kv, H_kv, G, GS, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
               STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """Tile ``tile``'s K / V (``k_lo`` / ``v_lo``: consumer 0's 64 keys, ``*_hi``: consumer 1's) and its pairs into
    the ring's fills ``pairs_before`` on; returns the tile's pair count."""
    b, kvh, n0, m_lo, n_m, h0, _ = _block(tile, n_tiles, S_q, S_kv, H_kv, G, GS, BLOCK_M, IS_CAUSAL)
    kv_row = b * S_kv + n0
    mbarrier.expect(kv_bar, 4 * k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row, kvh * HEAD_DIM], kv_bar, k_lo)
    tma.async_copy_global_to_shared(v_desc, [kv_row, kvh * HEAD_DIM], kv_bar, v_lo)
    tma.async_copy_global_to_shared(k_desc, [kv_row + KEYS_PER_CONSUMER, kvh * HEAD_DIM], kv_bar, k_hi)
    tma.async_copy_global_to_shared(v_desc, [kv_row + KEYS_PER_CONSUMER, kvh * HEAD_DIM], kv_bar, v_hi)
    n = GS * n_m
    for t in range(n):
        fill = pairs_before + t
        slot = fill % STAGES
        mbarrier.wait(free.index(slot), ((fill // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        head = h0 + t // n_m
        q_row = b * S_q + m_lo + (t % n_m) * BLOCK_M
        bar = ready.index(slot)
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, head * HEAD_DIM], bar, q_smem.index(slot))
        tma.async_copy_global_to_shared(do_desc, [q_row, head * HEAD_DIM], bar, do_smem.index(slot))
    return n


@gluon.jit
def gqa_bwd_dkdv_ws_kernel(q_desc, do_desc, k_desc, v_desc, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, n_tiles, S_q,
                           S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt,
                           stride_dkh, stride_dvb, stride_dvt, stride_dvh, HEAD_DIM: gl.constexpr,
                           BLOCK_M: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                           PARTIAL: gl.constexpr, PERSISTENT: gl.constexpr, EARLY_SCORES: gl.constexpr):
    """``n_tiles`` = cdiv(S_kv, 128) · B · H_kv · G / GS tiles, key block slowest; the grid is one program per tile,
    or with ``PERSISTENT`` fewer (``ws_launch``: one per SM at most), each walking one tile per round
    (``_walked_tile``), so a tile's K / V and first pairs load while the tile before it stores dK / dV. num_warps = 4
    (consumer 0), plus the worker partitions (consumer 1: 4 warps, loader: 1 warp). ``qk_scale`` = sm_scale · log2
    e; dK is scaled by ``sm_scale`` once at the end. ``BLOCK_M``: query rows per pair (the descriptors' box rows for
    q / dO). Each tile sums over ``GS`` of the G query heads: with ``PARTIAL`` (GS < G, ``launch.head_splits``) it
    stores unscaled fp32 sums to ``part_ptr`` for ``gqa_bwd_head_sum_kernel``; else dK and dV themselves.
    ``EARLY_SCORES``: a pair's next Sᵀ is issued behind its dV / dPᵀ, before they are waited for (the default issues
    it after dSᵀ is formed)."""
    dtype: gl.constexpr = q_desc.dtype
    k_tiles = gl.allocate_shared_memory(dtype, [2, KEYS_PER_CONSUMER, HEAD_DIM], k_desc.layout)  # [consumer]
    v_tiles = gl.allocate_shared_memory(dtype, [2, KEYS_PER_CONSUMER, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    if PERSISTENT:  # K / V are ready after one TMA expect, free after both consumers' last product of the tile
        kv_ready, kv_free = ring_barriers(1, 1, 2)
    else:
        kv_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_ready.index(0), count=1)
        kv_free = kv_ready  # (unused: one tile per program)
    ready, free = ring_barriers(STAGES, 1, 2)  # one TMA expect per fill; both consumers release a slot
    fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
    consumer_args = (k_tiles, v_tiles, q_smem, do_smem, kv_ready, kv_free, ready, free, lse_ptr, delta_ptr, dk_ptr,
                     dv_ptr, part_ptr, n_tiles, S_q, S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh,
                     stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh)
    consumer_flags: gl.constexpr = (HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PARTIAL, PERSISTENT, EARLY_SCORES)
    gl.warp_specialize([
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
        (_loader, (q_desc, do_desc, k_desc, v_desc, k_tiles, v_tiles, q_smem, do_smem, kv_ready, kv_free, ready, free,
                   n_tiles, S_q, S_kv, H_kv, G, GS, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PERSISTENT)),
    ], [4, 1], [240, 24])
    if PERSISTENT:
        invalidate_ring(kv_ready, kv_free, 1)
    else:
        mbarrier.invalidate(kv_ready.index(0))
    invalidate_ring(ready, free, STAGES)
