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

With ``REDUCE_DQ`` (``deterministic=False``) the kernel also forms dQ_i and adds it to a zeroed fp32 ``[B·S_q,
H·D]`` buffer by the TMA unit's reduce-add (scaled and cast after): five products per pair in one kernel instead of
four here and three in a dQ kernel that recomputes Sᵀ and dPᵀ. dSᵀ goes through shared memory (dQ_iᵀ = Kᵀ·dSᵀ with
dSᵀ as the B operand: wgmma needs 64 rows of M, the pair has 32), dQ_iᵀ through fp32 [query rows, 64] staging
tiles. ``REDUCE_DQ`` = 1: each consumer adds its 64 keys' share of every column (two reductions per element and
128 keys); 2 (D = 128): the consumers share their dSᵀ halves and each adds 64 columns over all 128 keys (one).
(The consumers' own reductions, 4- or 16-byte, ran the long rows 2x slower than the dQ kernel beside the dK / dV
kernel: they wait for the L2. H200, 2026-12-04, docs/perf/attn-core.md.)

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
    tma_reduce_add,
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
def _probs(s_t, rows, lse, keys, S_q, S_kv, qk_scale, IS_CAUSAL: gl.constexpr, REDUCE_DQ: gl.constexpr):
    """Pᵀ = 2^(Sᵀ·c − lse), pairs above the causal diagonal 0 (only blocks that cross it have any; the select is
    cheap beside exp2). With ``REDUCE_DQ`` keys past S_kv too (non-causal: the causal mask drops them already):
    their K rows are other rows of the view, which dK / dV never store but dQ would add."""
    p_t = gl.exp2(s_t * qk_scale - lse[None, :])
    if IS_CAUSAL:  # query row i (position S_kv − S_q + i) sees key j iff j <= its position
        p_t = gl.where(keys[:, None] <= (S_kv - S_q + rows)[None, :], p_t, 0.0)
    elif REDUCE_DQ:
        p_t = gl.where((keys < S_kv)[:, None], p_t, 0.0)
    return p_t


@gluon.jit
def _dv_ds(p_t, delta, dv, v_tile, do_tile, zero_s, dtype: gl.constexpr, op_layout: gl.constexpr):
    """dV += Pᵀ·dO_i and dPᵀ = V_w·dO_iᵀ (both waited for), then dSᵀ = Pᵀ ⊙ (dPᵀ − Δ) in 16 bits (the score
    layout) and as dK's register operand.
    dV's product goes first: S's registers are free before dPᵀ's are taken (at D = 128, 64-row pairs, both score
    tiles in flight beside dK and dV spilled 268-696 B offline, this order 192-320 B: ws_launch gives D = 128
    32-row pairs)."""
    p_op = gl.convert_layout(p_t.to(dtype), op_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    dp_t = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    # the operands' registers are read asynchronously: live until the wait
    done = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dp_t, p_op))
    ds_t = (p_t * (done[1] - delta[None, :])).to(dtype)
    return done[0], ds_t, gl.convert_layout(ds_t, op_layout)


@gluon.jit
def _dq_chunk(ds_buf, k_tile, chunk: gl.constexpr, BLOCK_M: gl.constexpr):
    """Head-dim rows [64·chunk, +64) of dQ_iᵀ = K_wᵀ·dSᵀ, issued (not waited for)."""
    zero = gl.zeros([KEYS_PER_CONSUMER, BLOCK_M], gl.float32, layout=wgmma_acc_layout(BLOCK_M))
    return warpgroup_mma(k_tile.slice(chunk * KEYS_PER_CONSUMER, KEYS_PER_CONSUMER, 1).permute((1, 0)), ds_buf, zero,
                         use_acc=False, is_async=True)


@gluon.jit
def _issue_dq(ds_t, ds_buf, k_tile, BLOCK_M: gl.constexpr):
    """dSᵀ into this warpgroup's buffer (the last products that read it have retired: each pair waits for its own
    before staging), then dQ_iᵀ's first 64 head-dim rows issued (``_reduce_dq`` does the rest one chunk at a time,
    so at most one [64, rows] fp32 tile is live: both at once spilled in an earlier build, offline sm_90)."""
    ds_buf.store(ds_t)
    fence_async_shared()  # this thread's stores visible to the async proxy (wgmma) ...
    gl.thread_barrier()  # ... and every thread of the warpgroup done before the wgmma reads the buffer
    return _dq_chunk(ds_buf, k_tile, 0, BLOCK_M)


@gluon.jit
def _reduce_dq(dq_0, ds_buf, k_tile, dq_stage, dq_desc, idx, row, col, WG: gl.constexpr, DQ_CHUNKS: gl.constexpr,
               BLOCK_M: gl.constexpr):
    """Pair ``idx``'s dQ_iᵀ ([64 head-dim rows, query rows] per chunk; ``dq_0``: the first, issued) waited for, stored
    transposed to this warpgroup's staging buffer idx % 2 and handed to the TMA reduce-add at (``row``: the pair's
    first token row of the ``[B·S_q, H·D]`` view, ``col``: its head's first column). Query rows past S_q carry
    zeros (lse +inf there: P = dS = 0), so the box may cover other rows of the view or run past its end (clipped).
    The buffer's last reductions (pair idx − 2) must have read it first: the groups of pair idx − 1 may still run."""
    tma.store_wait(DQ_CHUNKS)
    gl.thread_barrier()  # (only the issuing thread waited)
    first = (WG * 2 + idx % 2) * DQ_CHUNKS
    dq_0 = warpgroup_mma_wait(num_outstanding=0, deps=(dq_0, ))
    dq_stage.index(first).store(gl.permute(dq_0, (1, 0)))
    for c in gl.static_range(1, DQ_CHUNKS):
        dq_c = warpgroup_mma_wait(num_outstanding=0, deps=(_dq_chunk(ds_buf, k_tile, c, BLOCK_M), ))
        dq_stage.index(first + c).store(gl.permute(dq_c, (1, 0)))
    fence_async_shared()  # this thread's stores visible to the async proxy (TMA) ...
    gl.thread_barrier()  # ... and every thread's done before the reduce-add is issued
    for c in gl.static_range(DQ_CHUNKS):
        tma_reduce_add(dq_desc, [row, col + c * KEYS_PER_CONSUMER], dq_stage.index(first + c))


@gluon.jit
def _share_ds(ds_t, ds_smem, ds_full, ds_empty, idx, WG: gl.constexpr):
    """(``REDUCE_DQ`` = 2) this consumer's half of pair ``idx``'s dSᵀ into the shared [128 keys, rows] buffer idx % 2,
    once both consumers' products of pair idx − 2 have read it."""
    par = idx % 2
    mbarrier.wait(ds_empty.index(par), ((idx // 2) & 1) ^ 1)  # a fresh barrier passes parity 1
    ds_smem.index(par).slice(WG * KEYS_PER_CONSUMER, KEYS_PER_CONSUMER).store(ds_t)
    fence_async_shared()  # this thread's stores visible to the async proxy (wgmma) ...
    gl.thread_barrier()  # ... and every thread's done before the partition's arrival
    mbarrier.arrive(ds_full.index(par), count=1)


@gluon.jit
def _reduce_dq_split(k_tiles, ds_smem, ds_full, ds_empty, dq_stage, dq_desc, idx, row, col, WG: gl.constexpr,
                     BLOCK_M: gl.constexpr):
    """(``REDUCE_DQ`` = 2) head-dim columns [64·WG, +64) of pair ``idx``'s dQ_iᵀ over both consumers' keys (once both
    dSᵀ halves are in), staged in this warpgroup's buffer idx % 2 and handed to the TMA reduce-add at (``row``,
    ``col`` + 64·WG) (``_reduce_dq``'s coordinates)."""
    par = idx % 2
    mbarrier.wait(ds_full.index(par), (idx // 2) & 1)
    ds = ds_smem.index(par)
    zero = gl.zeros([KEYS_PER_CONSUMER, BLOCK_M], gl.float32, layout=wgmma_acc_layout(BLOCK_M))
    dq = warpgroup_mma(k_tiles.index(0).slice(WG * KEYS_PER_CONSUMER, KEYS_PER_CONSUMER, 1).permute((1, 0)),
                       ds.slice(0, KEYS_PER_CONSUMER), zero, use_acc=False, is_async=True)
    dq = warpgroup_mma(k_tiles.index(1).slice(WG * KEYS_PER_CONSUMER, KEYS_PER_CONSUMER, 1).permute((1, 0)),
                       ds.slice(KEYS_PER_CONSUMER, KEYS_PER_CONSUMER), dq, is_async=True)
    tma.store_wait(1)  # this warpgroup's reduce-add of pair idx − 2 (the same staging buffer) has read it
    gl.thread_barrier()  # (only the issuing thread waited)
    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
    mbarrier.arrive(ds_empty.index(par), count=1)
    stage = dq_stage.index(WG * 2 + par)
    stage.store(gl.permute(dq, (1, 0)))
    fence_async_shared()  # this thread's stores visible to the async proxy (TMA) ...
    gl.thread_barrier()  # ... and every thread's done before the reduce-add is issued
    tma_reduce_add(dq_desc, [row, col + WG * KEYS_PER_CONSUMER], stage)


@gluon.jit
def _dq_begin(ds_t, ds_smem, k_tile, ds_full, ds_empty, idx, WG: gl.constexpr, BLOCK_M: gl.constexpr,
              REDUCE_DQ: gl.constexpr):
    """Pair ``idx``'s dSᵀ handed on right after its dK product is issued: with ``REDUCE_DQ`` = 1 the first dQ chunk
    issued (returned), with 2 this consumer's dSᵀ half shared (returns a placeholder)."""
    if REDUCE_DQ == 1:
        return _issue_dq(ds_t, ds_smem.index(WG), k_tile, BLOCK_M)
    else:
        _share_ds(ds_t, ds_smem, ds_full, ds_empty, idx, WG)
        return gl.zeros([KEYS_PER_CONSUMER, BLOCK_M], gl.float32, layout=wgmma_acc_layout(BLOCK_M))


@gluon.jit
def _dq_end(dq_0, ds_smem, k_tile, k_tiles, ds_full, ds_empty, dq_stage, dq_desc, idx, row, col, WG: gl.constexpr,
            HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, REDUCE_DQ: gl.constexpr):
    """Pair ``idx``'s dQ finished (after its slot is released) and handed to the TMA reduce-add."""
    if REDUCE_DQ == 1:
        _reduce_dq(dq_0, ds_smem.index(WG), k_tile, dq_stage, dq_desc, idx, row, col, WG,
                   HEAD_DIM // KEYS_PER_CONSUMER, BLOCK_M)
    else:
        _reduce_dq_split(k_tiles, ds_smem, ds_full, ds_empty, dq_stage, dq_desc, idx, row, col, WG, BLOCK_M)


@gluon.jit
def _consumer(k_tiles, v_tiles, q_smem, do_smem, ds_smem, ds_full, ds_empty, dq_stage, dq_desc, kv_ready, kv_free,
              ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, n_tiles, S_q, S_kv, H_kv, G, GS, qk_scale,
              sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
              WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
              IS_CAUSAL: gl.constexpr, PARTIAL: gl.constexpr, PERSISTENT: gl.constexpr, REDUCE_DQ: gl.constexpr):
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
                v_tiles.index(WG), k_tiles, q_smem, do_smem, ds_smem, ds_full, ds_empty, dq_stage, dq_desc,
                kv_ready.index(0),
                kv_free.index(0), ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, S_q, S_kv, H_kv, G, GS,
                qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh, stride_dvb,
                stride_dvt, stride_dvh, WG, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PARTIAL, True, REDUCE_DQ)
    else:
        _consume_tile(gl.program_id(0), gl.num_programs(0), 0, 0, k_tiles.index(WG), v_tiles.index(WG), k_tiles,
                      q_smem, do_smem, ds_smem, ds_full, ds_empty, dq_stage, dq_desc, kv_ready.index(0),
                      kv_free.index(0), ready,
                      free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, S_q, S_kv, H_kv, G, GS, qk_scale,
                      sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt,
                      stride_dvh, WG, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PARTIAL, False, REDUCE_DQ)
    if REDUCE_DQ:  # the staged tiles stay in place until the TMA unit has read them
        tma.store_wait(0)


@gluon.jit
def _consume_tile(tile, n_tiles, pairs_before, kv_phase, k_tile, v_tile, k_tiles, q_smem, do_smem, ds_smem, ds_full,
                  ds_empty, dq_stage, dq_desc, kv_bar, kv_free_bar, ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                  part_ptr, S_q, S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt,
                  stride_dkh, stride_dvb, stride_dvt, stride_dvh, WG: gl.constexpr, HEAD_DIM: gl.constexpr,
                  BLOCK_M: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, PARTIAL: gl.constexpr,
                  RELEASE_KV: gl.constexpr, REDUCE_DQ: gl.constexpr):
    """Keys [n0 + 64·WG, +64) of tile ``tile`` over every pair, then their dK / dV; returns the tile's pair count.
    Its pairs are the ring's fills ``pairs_before`` on; ``RELEASE_KV``: arrive on ``kv_free_bar`` once K / V are no
    longer read. Software-pipelined (attn-core 0.3.18): Sᵀ of pair t + 1 is
    issued before dK of pair t and waited for with dK still in flight, so the next pair's exponentials run beside
    dK's product; the serial form before it (each product waited for in turn) was 7-27 % slower than the Triton
    dK / dV role (H200, 2026-12-02). ``REDUCE_DQ``: pair t's first dQ product goes after its dK product, is
    waited for after the slot is released, and its reduce-add is left to the TMA unit while pair t + 1 runs."""
    R: gl.constexpr = KEYS_PER_CONSUMER
    s_layout: gl.constexpr = wgmma_acc_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_acc_layout(HEAD_DIM)
    op_layout: gl.constexpr = wgmma_lhs_layout(HEAD_DIM)
    dtype: gl.constexpr = q_smem.dtype
    DQ_GROUPS: gl.constexpr = 1 if REDUCE_DQ == 1 else 0  # wgmma groups behind a pair's dK: its first dQ chunk
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
        p_t = _probs(s_t, rows, lse, keys, S_q, S_kv, qk_scale, IS_CAUSAL, REDUCE_DQ)
    for t in range(n - 1):
        slot = (pairs_before + t) % STAGES
        dv, ds_t, ds_op = _dv_ds(p_t, delta, dv, v_tile, do_smem.index(slot), zero_s, dtype, op_layout)
        nxt = (pairs_before + t + 1) % STAGES
        mbarrier.wait(ready.index(nxt), ((pairs_before + t + 1) // STAGES) & 1)
        s_t = warpgroup_mma(k_tile, q_smem.index(nxt).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dk = warpgroup_mma(ds_op, q_smem.index(slot), dk, is_async=True)
        if REDUCE_DQ:
            dq_0 = _dq_begin(ds_t, ds_smem, k_tile, ds_full, ds_empty, pairs_before + t, WG, BLOCK_M, REDUCE_DQ)
        rows, lse, delta = _pair_rows(t + 1, b, h0, m_lo, n_m, lse_ptr, delta_ptr, S_q, H_kv * G, stride_lb,
                                      stride_lh, s_layout, BLOCK_M)
        # Sᵀ of t + 1 (issued first); dK (and dQ) may run
        s_t = warpgroup_mma_wait(num_outstanding=1 + DQ_GROUPS, deps=(s_t, ))
        p_t = _probs(s_t, rows, lse, keys, S_q, S_kv, qk_scale, IS_CAUSAL, REDUCE_DQ)
        dk = warpgroup_mma_wait(num_outstanding=DQ_GROUPS, deps=(dk, ds_op))[0]
        mbarrier.arrive(free.index(slot), count=1)
        if REDUCE_DQ:
            _dq_end(dq_0, ds_smem, k_tile, k_tiles, ds_full, ds_empty, dq_stage, dq_desc, pairs_before + t,
                    b * S_q + m_lo + (t % n_m) * BLOCK_M, (h0 + t // n_m) * HEAD_DIM, WG, HEAD_DIM, BLOCK_M,
                    REDUCE_DQ)
    if n > 0:  # the last pair: nothing after it to overlap
        slot = (pairs_before + n - 1) % STAGES
        dv, ds_t, ds_op = _dv_ds(p_t, delta, dv, v_tile, do_smem.index(slot), zero_s, dtype, op_layout)
        dk = warpgroup_mma(ds_op, q_smem.index(slot), dk, is_async=True)
        if REDUCE_DQ:
            dq_0 = _dq_begin(ds_t, ds_smem, k_tile, ds_full, ds_empty, pairs_before + n - 1, WG, BLOCK_M, REDUCE_DQ)
        dk = warpgroup_mma_wait(num_outstanding=DQ_GROUPS, deps=(dk, ds_op))[0]
        mbarrier.arrive(free.index(slot), count=1)
        if REDUCE_DQ:
            _dq_end(dq_0, ds_smem, k_tile, k_tiles, ds_full, ds_empty, dq_stage, dq_desc, pairs_before + n - 1,
                    b * S_q + m_lo + ((n - 1) % n_m) * BLOCK_M, (h0 + (n - 1) // n_m) * HEAD_DIM, WG, HEAD_DIM,
                    BLOCK_M, REDUCE_DQ)
            # the other consumer's last dQ product reads this one's K: retired before K goes back
            if REDUCE_DQ == 2 and RELEASE_KV:
                mbarrier.wait(ds_empty.index((pairs_before + n - 1) % 2), ((pairs_before + n - 1) // 2) & 1)
    if RELEASE_KV:  # every product reading K / V has retired: they may be refilled while dK / dV are stored
        mbarrier.arrive(kv_free_bar, count=1)

    out_keys = n0 + WG * R + gl.arange(0, R, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    ok = (out_keys < S_kv)[:, None]
    t64 = out_keys.to(gl.int64)[:, None]
    if PARTIAL:  # unscaled fp32 sums of this subgroup's heads: [2, G / GS, B·H_kv, S_kv, D] (the head-sum kernel)
        subgroup_rows = n_tiles // gl.cdiv(S_kv, 2 * R)  # (G / GS)·B·H_kv: one of dK's / dV's halves
        row = sg * (subgroup_rows // (G // GS)) + b * H_kv + kvh
        part = part_ptr + (row.to(gl.int64) * S_kv + t64) * HEAD_DIM + cols[None, :]
        gl.store(part, dk, mask=ok)
        gl.store(part + subgroup_rows.to(gl.int64) * S_kv * HEAD_DIM, dv, mask=ok)
    else:
        gl.store(dk_ptr + b.to(gl.int64) * stride_dkb + kvh * stride_dkh + t64 * stride_dkt + cols[None, :],
                 (dk * sm_scale).to(dtype), mask=ok)
        gl.store(dv_ptr + b.to(gl.int64) * stride_dvb + kvh * stride_dvh + t64 * stride_dvt + cols[None, :],
                 dv.to(dtype), mask=ok)
    return n


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
def gqa_bwd_dkdv_ws_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr,
                           n_tiles, S_q, S_kv, H_kv, G, GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb,
                           stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh, HEAD_DIM: gl.constexpr,
                           BLOCK_M: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                           PARTIAL: gl.constexpr, PERSISTENT: gl.constexpr, REDUCE_DQ: gl.constexpr):
    """``n_tiles`` = cdiv(S_kv, 128) · B · H_kv · G / GS tiles, key block slowest; the grid is one program per tile,
    or with ``PERSISTENT`` fewer (``ws_launch``: one per SM at most), each walking one tile per round
    (``_walked_tile``), so a tile's K / V and first pairs load while the tile before it stores dK / dV. num_warps = 4
    (consumer 0), plus the worker partitions (consumer 1: 4 warps, loader: 1 warp). ``qk_scale`` = sm_scale · log2
    e; dK is scaled by ``sm_scale`` once at the end. ``BLOCK_M``: query rows per pair (the descriptors' box rows for
    q / dO). Each tile sums over ``GS`` of the G query heads: with ``PARTIAL`` (GS < G, ``launch.head_splits``) it
    stores unscaled fp32 sums to ``part_ptr`` for ``gqa_bwd_head_sum_kernel``; else dK and dV themselves.
    ``REDUCE_DQ``: unscaled dQ added through ``dq_desc`` (fp32 ``[B·S_q, H·D]``, zeroed; boxes of [BLOCK_M, 64]) as
    well; without, ``dq_desc`` is not read."""
    dtype: gl.constexpr = q_desc.dtype
    k_tiles = gl.allocate_shared_memory(dtype, [2, KEYS_PER_CONSUMER, HEAD_DIM], k_desc.layout)  # [consumer]
    v_tiles = gl.allocate_shared_memory(dtype, [2, KEYS_PER_CONSUMER, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    # with REDUCE_DQ: dSᵀ as dQ's B operand; [consumer, buffer(, 64-column chunk)] fp32 dQ tiles staged for the TMA
    # reduce-add (dq_desc's box); without, placeholders
    ds_rows: gl.constexpr = REDUCE_DQ * KEYS_PER_CONSUMER if REDUCE_DQ else 8  # [consumer] or [pair parity]
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ds_rows, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, ds_rows, BLOCK_M], ds_layout)
    if REDUCE_DQ == 2:  # both consumers fill a dSᵀ buffer, both read it
        ds_full, ds_empty = ring_barriers(2, 2, 2)
    else:
        ds_full = ds_smem  # (placeholders: not used)
        ds_empty = ds_smem
    stage_tiles: gl.constexpr = (4 * (HEAD_DIM // KEYS_PER_CONSUMER) if REDUCE_DQ == 1 else 4) if REDUCE_DQ else 1
    stage_rows: gl.constexpr = BLOCK_M if REDUCE_DQ else 1
    stage_cols: gl.constexpr = KEYS_PER_CONSUMER if REDUCE_DQ else 1
    stage_layout: gl.constexpr = dq_desc.layout if REDUCE_DQ else gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    dq_stage = gl.allocate_shared_memory(gl.float32, [stage_tiles, stage_rows, stage_cols], stage_layout)
    if PERSISTENT:  # K / V are ready after one TMA expect, free after both consumers' last product of the tile
        kv_ready, kv_free = ring_barriers(1, 1, 2)
    else:
        kv_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_ready.index(0), count=1)
        kv_free = kv_ready  # (unused: one tile per program)
    ready, free = ring_barriers(STAGES, 1, 2)  # one TMA expect per fill; both consumers release a slot
    fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
    gl.warp_specialize([
        (_consumer, (k_tiles, v_tiles, q_smem, do_smem, ds_smem, ds_full, ds_empty, dq_stage, dq_desc, kv_ready,
                     kv_free, ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, n_tiles, S_q, S_kv, H_kv, G,
                     GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh, stride_dvb,
                     stride_dvt, stride_dvh, 0, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PARTIAL, PERSISTENT, REDUCE_DQ)),
        (_consumer, (k_tiles, v_tiles, q_smem, do_smem, ds_smem, ds_full, ds_empty, dq_stage, dq_desc, kv_ready,
                     kv_free, ready, free, lse_ptr, delta_ptr, dk_ptr, dv_ptr, part_ptr, n_tiles, S_q, S_kv, H_kv, G,
                     GS, qk_scale, sm_scale, stride_lb, stride_lh, stride_dkb, stride_dkt, stride_dkh, stride_dvb,
                     stride_dvt, stride_dvh, 1, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PARTIAL, PERSISTENT, REDUCE_DQ)),
        (_loader, (q_desc, do_desc, k_desc, v_desc, k_tiles, v_tiles, q_smem, do_smem, kv_ready, kv_free, ready, free,
                   n_tiles, S_q, S_kv, H_kv, G, GS, HEAD_DIM, BLOCK_M, STAGES, IS_CAUSAL, PERSISTENT)),
    ], [4, 1], [240, 24])
    if REDUCE_DQ == 2:
        invalidate_ring(ds_full, ds_empty, 2)
    if PERSISTENT:
        invalidate_ring(kv_ready, kv_free, 1)
    else:
        mbarrier.invalidate(kv_ready.index(0))
    invalidate_ring(ready, free, STAGES)
