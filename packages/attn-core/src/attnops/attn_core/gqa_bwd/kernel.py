"""GQABwd kernels: the preprocess ``Δ = rowsum(o ⊙ dO)`` and one backward launch with two program roles.

Math (spec attn-core.md GQABwd), per batch b and query head h (KV head ``h // G``), with raw dot products
``qk = q·kᵀ`` and the forward's base-2 lse: ``P = 2^(qk·scale·log2 e − lse2)`` (one FMA + exp2 per score,
the scale folded in), ``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P ⊙ (dP − Δ)``, ``dQ = scale · dS K``,
``dK = scale · dSᵀ Q``.

``gqa_bwd_kernel`` runs two kinds of programs in one grid (so the short dQ programs fill the SMs the
long dK/dV programs leave idle; each kind is ordered longest-first under the causal mask):

* **dK/dV** (in each chunk of (batch, KV head) pairs, see ``gqa_bwd_kernel``, before its dQ programs): one
  ``BLOCK_N1`` block of keys of one KV head of one batch element keeps K, V and the fp32 accumulators dK, dV in
  registers and walks the query blocks that see it for all G query heads of the KV head, so the GQA sum happens
  in registers and dK / dV are written once (no atomics, no second pass). Where that leaves too few, too long programs (few (batch, KV head) pairs, large
  G), ``head_splits`` programs share a key block, each over G / head_splits heads, and a small
  ``gqa_bwd_head_sum_kernel`` adds their fp32 partial sums in a fixed order (still deterministic). The (head,
  query block) pairs are one flat loop, not a loop over heads around a loop over blocks: nested loops made the
  sm_90 build spill registers. Scores are formed transposed (``k·qᵀ``: ``[BLOCK_N1, BLOCK_M1]``) so Pᵀ and dSᵀ
  are directly the left operands.
* **dQ** (after the chunk's dK/dV programs): one block of ``BLOCK_M2`` *packed* query rows (row r = token
  ``r // G``, head ``kv_head·G + r % G``, as in the forward: one K/V tile serves all G heads) walks its key range
  and accumulates dQ in registers. QKᵀ and dP are recomputed here (7 matmuls in all instead of 5), which keeps
  dQ deterministic without atomics.

With ``ATOMIC_DQ`` (the op's ``deterministic=False``) there are no dQ programs: each dK/dV step also forms
``dS·K`` for its query block and adds it to an fp32 ``[B, S_q, H, D]`` buffer with relaxed atomics (5
matmuls, as in FlashAttention 2 / 3); the preprocess zeroes that buffer and ``kernel_utils.cast.scaled_cast``
scales and casts it. The order of the adds varies between runs, so dQ is not bitwise reproducible.

Causal block skipping: each role walks an unmasked range (every pair visible, no mask, no bounds check)
and a masked range (the causal diagonal and/or the ragged tail); tiles above the diagonal are never
visited. Which masked loops exist is decided at compile time (``IS_CAUSAL``, ``EVEN_M1 = S_q % BLOCK_M1
== 0``, ``EVEN_N2 = S_kv % BLOCK_N2 == 0``), so a seed row compiles two loops per role. Offsets are int64.
Only portable Triton is used (no TMA, no warp specialization): the interpreter runs every path.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from attnops.kernel_utils.attention_fns import NO_WINDOW, kv_block_range, mma, visible

NO_WINDOW_C: tl.constexpr = tl.constexpr(NO_WINDOW)


@triton.jit
def gqa_bwd_preprocess_kernel(
    o_ptr, do_ptr, delta_ptr, dq_acc_ptr,
    S_q, H,
    stride_ob, stride_ot, stride_oh,
    stride_dob, stride_dot, stride_doh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, TOKENS: tl.constexpr, HEADS: tl.constexpr,
    ZERO_DQ: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr,
):
    """Grid ``(B · cdiv(S_q, TOKENS), cdiv(H, HEADS))``: ``delta[b, h, i] = Σ_d o[b, i, h, d]·do[b, i, h, d]`` (fp32,
    ``[B, H, S_q]`` contiguous) for TOKENS tokens x HEADS heads (HEADS a power of two: a program's rows come from
    shifts, not the 64-bit divisions of a flat row index, 14.9 -> 13.0 us on a 512-token row, H200 2026-12-04; on
    ``[B, S, H, D]`` tensors with HEADS >= H they are one contiguous span). ``ZERO_DQ``: also zero the same rows of
    the atomic dQ accumulator (fp32 ``[B, S_q, H, HEAD_DIM]`` contiguous), saving a memset launch.
    ``LAUNCH_DEPENDENTS``: let a kernel launched after it with programmatic dependent launch start at once (it
    waits in ``gdc_wait`` for this grid's writes before it reads Δ)."""
    if LAUNCH_DEPENDENTS:
        gdc_launch_dependents()
    n_tb = tl.cdiv(S_q, TOKENS)
    b = tl.program_id(0) // n_tb
    r = tl.arange(0, TOKENS * HEADS)
    i = ((tl.program_id(0) % n_tb) * TOKENS + r // HEADS).to(tl.int64)  # (i · stride: past 2^31 on long rows)
    h = (tl.program_id(1) * HEADS + r % HEADS).to(tl.int64)
    row_ok = (i < S_q) & (h < H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    b64 = b.to(tl.int64)
    o = tl.load(o_ptr + (b64 * stride_ob + i * stride_ot + h * stride_oh)[:, None] + offs_d[None, :], mask=mask,
                other=0.0)
    do = tl.load(do_ptr + (b64 * stride_dob + i * stride_dot + h * stride_doh)[:, None] + offs_d[None, :], mask=mask,
                 other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(delta_ptr + (b64 * H + h) * S_q + i, delta, mask=row_ok)
    if ZERO_DQ:
        tl.store(dq_acc_ptr + ((b64 * S_q + i) * H + h)[:, None] * HEAD_DIM + offs_d[None, :],
                 tl.zeros([TOKENS * HEADS, BLOCK_D], tl.float32), mask=mask)


@triton.jit
def _load(ptrs, mask, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(ptrs, mask=mask, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _dkdv_tiles(
    dk, dv, k, v, q_head0, do_head0, lse_head0, delta_head0, dq_acc_head0, stride_qh, stride_doh, stride_lh,
    S_q, stride_qt, stride_dot, stride_aqt, stride_aqh, k_pos, q_off, offs_d, d_mask, scale_log2, lo, hi, G,
    S_kv, BLOCK_M: tl.constexpr, EVEN_D: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
    ATOMIC_DQ: tl.constexpr, KEYS_RAGGED: tl.constexpr, EXACT_DOT: tl.constexpr,
):
    """Query rows ``[lo, hi)`` (``lo`` a multiple of BLOCK_M) of each of the G heads (``*_head0``: the
    group's first head; head g adds ``g·stride_*h``, delta rows are ``S_q`` apart) into the key block's
    dK, dV (``[BLOCK_N, BLOCK_D]`` fp32), as one flat loop over (head, block) pairs. Unmasked calls only get
    rows that are all < S_q and see every key of the block. Rows past S_q load q = dO = 0 and lse = +inf,
    so their P (and dS) is exactly 0. ``ATOMIC_DQ``: also add each step's unscaled ``dS·K`` to the fp32
    accumulator (``dq_acc_head0``, strides ``stride_aq*``). ``KEYS_RAGGED`` (with it, when S_kv is not a
    multiple of the key block): key rows past S_kv get P = 0. Their K rows are 0, so their scores are 0 and
    P = 2^-lse, not 0; without atomic dQ only their (unstored) dK / dV rows saw it, but in dS·K an overflowed
    dS times a zero K row is NaN."""
    offs_m = tl.arange(0, BLOCK_M)
    NEED_MASK: tl.constexpr = MASKED or not EVEN_D
    steps = (hi - lo + BLOCK_M - 1) // BLOCK_M
    # The divisor must never be 0, even when the loop runs no step: the pipeliner hoists the first steps'
    # ``it // steps`` above the loop (seen in the sm_90 TTGIR), where with S_q = S_kv = 1 it divides by 0 —
    # undefined behaviour. That build read out of bounds on the H200 (GPU fuzz seed 502019; memcheck: the
    # unmasked load of a zero-step loop). Our reading, not proven from the PTX: LLVM used the UB to drop the
    # guard. With this fix seeds 502000-502059 and every config at S = 1 passed on the H200 (docs/reliability.md).
    per_head = tl.maximum(steps, 1)
    for it in range(0, G * steps):
        g = it // per_head
        m = lo + (it - g * per_head) * BLOCK_M + offs_m
        m64 = m.to(tl.int64)
        g64 = g.to(tl.int64)
        if MASKED:
            m_mask = m < S_q
        else:
            m_mask = m >= 0  # all true
        q_ptrs = q_head0 + g64 * stride_qh + m64[None, :] * stride_qt + offs_d[:, None]
        qT = _load(q_ptrs, d_mask[:, None] & m_mask[None, :], NEED_MASK)  # [BLOCK_D, BLOCK_M]
        row = lse_head0 + g64 * stride_lh + m64
        drow = delta_head0 + g64 * S_q + m64
        if MASKED:
            lse = tl.load(row, mask=m_mask, other=float("inf"))
            delta = tl.load(drow, mask=m_mask, other=0.0)
        else:
            lse = tl.load(row)
            delta = tl.load(drow)
        qkT = mma(k, qT, None, EXACT_DOT)  # [BLOCK_N, BLOCK_M]
        pT = tl.math.exp2(qkT * scale_log2 - lse[None, :])
        if MASKED:
            if IS_CAUSAL:  # key j visible from row i iff j <= i + S_kv − S_q (bottom-right)
                pT = tl.where(k_pos[:, None] <= (m + q_off)[None, :], pT, 0.0)
        if KEYS_RAGGED:
            pT = tl.where((k_pos < S_kv)[:, None], pT, 0.0)
        do_ptrs = do_head0 + g64 * stride_doh + m64[:, None] * stride_dot + offs_d[None, :]
        do = _load(do_ptrs, m_mask[:, None] & d_mask[None, :], NEED_MASK)  # [BLOCK_M, BLOCK_D]
        dv = mma(pT.to(do.dtype), do, dv, EXACT_DOT)
        dpT = mma(v, tl.trans(do), None, EXACT_DOT)  # [BLOCK_N, BLOCK_M]
        dsT = (pT * (dpT - delta[None, :])).to(qT.dtype)
        dk = mma(dsT, tl.trans(qT), dk, EXACT_DOT)
        if ATOMIC_DQ:
            dq = mma(tl.trans(dsT), k, None, EXACT_DOT)  # [BLOCK_M, BLOCK_D]
            dq_ptrs = dq_acc_head0 + g64 * stride_aqh + m64[:, None] * stride_aqt + offs_d[None, :]
            if NEED_MASK:
                tl.atomic_add(dq_ptrs, dq, mask=m_mask[:, None] & d_mask[None, :], sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    return dk, dv


@triton.jit
def _dq_tiles(
    dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt,
    offs_d, d_mask, S_kv, WR, scale_log2, lo, hi,
    BLOCK_N: tl.constexpr, EVEN_D: tl.constexpr, MASKED: tl.constexpr, EXACT_DOT: tl.constexpr,
):
    """Keys ``[lo, hi)`` into the packed query block's dQ (``[BLOCK_M, BLOCK_D]`` fp32). Unmasked calls
    only get keys that are all < S_kv and visible from every row; masked calls apply
    ``attention_fns.visible`` (``WR = 0``: causal, ``NO_WINDOW``: only the key bound)."""
    offs_n = tl.arange(0, BLOCK_N)
    NEED_MASK: tl.constexpr = MASKED or not EVEN_D
    for start in range(lo, hi, BLOCK_N):
        k_pos = start + offs_n
        n64 = k_pos.to(tl.int64)
        if MASKED:
            n_mask = k_pos < S_kv
        else:
            n_mask = k_pos >= 0  # all true
        kv_mask = d_mask[:, None] & n_mask[None, :]
        kT = _load(k_base + n64[None, :] * stride_kt + offs_d[:, None], kv_mask, NEED_MASK)  # [BLOCK_D, BLOCK_N]
        vT = _load(v_base + n64[None, :] * stride_vt + offs_d[:, None], kv_mask, NEED_MASK)
        qk = mma(q, kT, None, EXACT_DOT)  # [BLOCK_M, BLOCK_N]
        p = tl.math.exp2(qk * scale_log2 - lse[:, None])
        if MASKED:
            p = tl.where(visible(q_pos, k_pos, S_kv, NO_WINDOW_C, WR), p, 0.0)
        dp = mma(do, vT, None, EXACT_DOT)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(kT.dtype), tl.trans(kT), dq, EXACT_DOT)
    return dq


@triton.jit
def _dkdv_program(
    blk, sub, rem, q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_acc_ptr, part_ptr, counter_ptr,
    S_q, S_kv, H, H_kv, G, head_splits, BH_kv, scale_log2, sm_scale,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_dob, stride_dot, stride_doh, stride_lb, stride_lh,
    stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, ATOMIC_DQ: tl.constexpr,
    PARTIAL: tl.constexpr, FUSED_SUM: tl.constexpr, EXACT_DOT: tl.constexpr, WAIT_PRIOR: tl.constexpr,
):
    """dK, dV of key block ``blk`` of (batch element, KV head) pair ``rem``, summed over subgroup ``sub`` of the
    ``head_splits`` equal subgroups of its G heads. ``PARTIAL`` (head_splits > 1): the unscaled fp32 sums go to
    ``part_ptr`` (``[2, head_splits, B·H_kv, S_kv, HEAD_DIM]``: dK then dV) for ``gqa_bwd_head_sum_kernel`` or,
    ``FUSED_SUM``, for the key block's last subgroup program to finish (its ``counter_ptr`` entry of
    ``[cdiv(S_kv, BLOCK_N), B·H_kv]`` int32 zeros, back to 0 after it); else dK, dV are stored."""
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    KEYS_RAGGED: tl.constexpr = ATOMIC_DQ and not EVEN_N
    q_off = S_kv - S_q
    b64 = (rem // H_kv).to(tl.int64)
    kv_head = rem % H_kv
    kvh64 = kv_head.to(tl.int64)
    n0 = blk * BLOCK_N
    k_pos = n0 + tl.arange(0, BLOCK_N)
    n64 = k_pos.to(tl.int64)
    kv_mask = (k_pos < S_kv)[:, None] & d_mask[None, :]
    k = tl.load(k_ptr + b64 * stride_kb + kvh64 * stride_kh + n64[:, None] * stride_kt + offs_d[None, :],
                mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b64 * stride_vb + kvh64 * stride_vh + n64[:, None] * stride_vt + offs_d[None, :],
                mask=kv_mask, other=0.0)
    if WAIT_PRIOR:  # (launched as a dependent of the preprocess: K and V are in flight, Δ is read below)
        gdc_wait()
    # Query blocks: [lo, mid) the causal diagonal (masked), [mid, end) every row sees every key of the
    # block, [end, S_q) the ragged tail (masked). Row i sees key j iff j <= i + q_off (causal).
    end = (S_q // BLOCK_M) * BLOCK_M
    if IS_CAUSAL:
        lo = (tl.maximum(n0 - q_off, 0) // BLOCK_M) * BLOCK_M
        k_last = tl.minimum(n0 + BLOCK_N, S_kv) - 1
        mid = tl.maximum(((tl.maximum(k_last - q_off, 0) + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, lo)
    else:
        lo = n0 * 0
        mid = lo
    heads = G // head_splits  # this program's subgroup: heads [head0, head0 + heads)
    head0 = (kv_head * G + sub * heads).to(tl.int64)
    q_head0 = q_ptr + b64 * stride_qb + head0 * stride_qh
    do_head0 = do_ptr + b64 * stride_dob + head0 * stride_doh
    lse_head0 = lse_ptr + b64 * stride_lb + head0 * stride_lh
    delta_head0 = delta_ptr + (b64 * H + head0) * S_q
    # The atomic dQ accumulator: fp32 [B, S_q, H, HEAD_DIM] contiguous.
    stride_aqh = HEAD_DIM
    stride_aqt = H * HEAD_DIM
    dq_acc_head0 = dq_acc_ptr + b64 * S_q * stride_aqt + head0 * stride_aqh
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    if IS_CAUSAL:
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_head0, do_head0, lse_head0, delta_head0, dq_acc_head0, stride_qh,
                             stride_doh, stride_lh, S_q, stride_qt, stride_dot, stride_aqt, stride_aqh, k_pos,
                             q_off, offs_d, d_mask, scale_log2,
                             lo, tl.minimum(mid, S_q), heads, S_kv, BLOCK_M, EVEN_D, True, IS_CAUSAL, ATOMIC_DQ,
                             KEYS_RAGGED, EXACT_DOT)
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_head0, do_head0, lse_head0, delta_head0, dq_acc_head0, stride_qh,
                         stride_doh, stride_lh, S_q, stride_qt, stride_dot, stride_aqt, stride_aqh, k_pos, q_off,
                         offs_d, d_mask, scale_log2,
                         mid, tl.maximum(end, mid), heads, S_kv, BLOCK_M, EVEN_D, False, IS_CAUSAL, ATOMIC_DQ,
                         KEYS_RAGGED, EXACT_DOT)
    if not EVEN_M:
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_head0, do_head0, lse_head0, delta_head0, dq_acc_head0, stride_qh,
                             stride_doh, stride_lh, S_q, stride_qt, stride_dot, stride_aqt, stride_aqh, k_pos,
                             q_off, offs_d, d_mask, scale_log2,
                             tl.maximum(end, mid), S_q, heads, S_kv, BLOCK_M, EVEN_D, True, IS_CAUSAL, ATOMIC_DQ,
                             KEYS_RAGGED, EXACT_DOT)
    if PARTIAL:
        split_elems = tl.cast(BH_kv, tl.int64) * S_kv * HEAD_DIM  # (an int argument of 1 arrives as a constexpr)
        part0 = part_ptr + (rem.to(tl.int64) * S_kv + n64)[:, None] * HEAD_DIM + offs_d[None, :]  # subgroup 0's
        tl.store(part0 + sub * split_elems, dk, mask=kv_mask)
        tl.store(part0 + (head_splits + sub) * split_elems, dv, mask=kv_mask)
        if FUSED_SUM:  # the key block's last subgroup to finish adds them all (no head-sum launch)
            tl.debug_barrier()  # every thread's partial is written before the arrival is released
            counter = counter_ptr + blk * BH_kv + rem
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == head_splits - 1:  # every other subgroup's partial is visible
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
                dk = _sum_subgroups(part0, split_elems, head_splits, kv_mask, BLOCK_N, BLOCK_D)
                dk_rows = b64 * stride_dkb + kvh64 * stride_dkh + n64 * stride_dkt
                tl.store(dk_ptr + dk_rows[:, None] + offs_d[None, :], (dk * sm_scale).to(dk_ptr.dtype.element_ty),
                         mask=kv_mask)
                dv = _sum_subgroups(part0 + head_splits * split_elems, split_elems, head_splits, kv_mask, BLOCK_N,
                                    BLOCK_D)
                dv_rows = b64 * stride_dvb + kvh64 * stride_dvh + n64 * stride_dvt
                tl.store(dv_ptr + dv_rows[:, None] + offs_d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)
    else:
        dk = dk * sm_scale
        tl.store(dk_ptr + b64 * stride_dkb + kvh64 * stride_dkh + n64[:, None] * stride_dkt + offs_d[None, :],
                 dk.to(dk_ptr.dtype.element_ty), mask=kv_mask)
        tl.store(dv_ptr + b64 * stride_dvb + kvh64 * stride_dvh + n64[:, None] * stride_dvt + offs_d[None, :],
                 dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def _sum_subgroups(part, split_elems, head_splits, mask, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """The unscaled fp32 partial sums of ``head_splits`` subgroups added in subgroup order (the same rounding
    whoever adds them): ``part`` points at subgroup 0's rows, subgroup j's are ``j·split_elems`` further. (dK and
    dV one after the other: both at once spilled in the dK/dV program's epilogue.)"""
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for sub in range(head_splits):
        acc += tl.load(part + sub * split_elems, mask=mask, other=0.0)
    return acc


@triton.jit
def gqa_bwd_head_sum_kernel(
    part_ptr, dk_ptr, dv_ptr, S_kv, H_kv, BH_kv, head_splits, sm_scale,
    stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """Grid ``(cdiv(S_kv, BLOCK_R), B·H_kv)``: dK = sm_scale·Σ and dV = Σ over the ``head_splits`` partial sums
    of the dK/dV programs (``part_ptr``: ``[2, head_splits, B·H_kv, S_kv, HEAD_DIM]`` fp32), in subgroup order
    (deterministic), cast and stored."""
    rem = tl.program_id(1)
    b64 = (rem // H_kv).to(tl.int64)
    kvh64 = (rem % H_kv).to(tl.int64)
    n = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    n64 = n.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (n < S_kv)[:, None] & (offs_d < HEAD_DIM)[None, :]
    part = part_ptr + (rem.to(tl.int64) * S_kv + n64)[:, None] * HEAD_DIM + offs_d[None, :]
    split_elems = tl.cast(BH_kv, tl.int64) * S_kv * HEAD_DIM  # (an int argument of 1 arrives as a constexpr)
    dk = _sum_subgroups(part, split_elems, head_splits, mask, BLOCK_R, BLOCK_D)
    tl.store(dk_ptr + b64 * stride_dkb + kvh64 * stride_dkh + n64[:, None] * stride_dkt + offs_d[None, :],
             (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=mask)
    dv = _sum_subgroups(part + head_splits * split_elems, split_elems, head_splits, mask, BLOCK_R, BLOCK_D)
    tl.store(dv_ptr + b64 * stride_dvb + kvh64 * stride_dvh + n64[:, None] * stride_dvt + offs_d[None, :],
             dv.to(dv_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dq_program(
    blk, rem, q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    S_q, S_kv, H, H_kv, G, scale_log2, sm_scale,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_dob, stride_dot, stride_doh, stride_lb, stride_lh, stride_dqb, stride_dqt, stride_dqh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, EXACT_DOT: tl.constexpr, WAIT_PRIOR: tl.constexpr,
):
    """dQ of packed query block ``blk`` of (batch element, KV head) pair ``rem``."""
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    q_off = S_kv - S_q
    b64 = (rem // H_kv).to(tl.int64)
    kv_head = rem % H_kv
    kvh64 = kv_head.to(tl.int64)
    num_rows = S_q * G
    m_start = blk * BLOCK_M
    rows = m_start + tl.arange(0, BLOCK_M)
    row_mask = rows < num_rows
    t = rows // G
    t64 = t.to(tl.int64)
    head = (kv_head * G + rows % G).to(tl.int64)
    mask = row_mask[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + (b64 * stride_qb + t64 * stride_qt + head * stride_qh)[:, None] + offs_d[None, :],
                mask=mask, other=0.0)
    do = tl.load(do_ptr + (b64 * stride_dob + t64 * stride_dot + head * stride_doh)[:, None] + offs_d[None, :],
                 mask=mask, other=0.0)
    lse = tl.load(lse_ptr + b64 * stride_lb + head * stride_lh + t64, mask=row_mask, other=float("inf"))
    if WAIT_PRIOR:
        gdc_wait()
    delta = tl.load(delta_ptr + (b64 * H + head) * S_q + t64, mask=row_mask, other=0.0)
    q_pos = t + q_off
    WR: tl.constexpr = 0 if IS_CAUSAL else NO_WINDOW_C
    last_row = tl.minimum(m_start + BLOCK_M, num_rows) - 1
    # Without a left window the masked left edge of kv_block_range is always empty: [0, full_hi) is
    # unmasked, [full_hi, hi) holds the causal diagonal and/or the ragged tail.
    _lo, _full_lo, full_hi, hi = kv_block_range(m_start // G + q_off, last_row // G + q_off, S_kv, NO_WINDOW_C,
                                                WR, BLOCK_N)
    k_base = k_ptr + b64 * stride_kb + kvh64 * stride_kh
    v_base = v_ptr + b64 * stride_vb + kvh64 * stride_vh
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dq = _dq_tiles(dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt, offs_d, d_mask, S_kv,
                   WR, scale_log2, 0, full_hi, BLOCK_N, EVEN_D, False, EXACT_DOT)
    if IS_CAUSAL or not EVEN_N:
        dq = _dq_tiles(dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt, offs_d, d_mask, S_kv,
                       WR, scale_log2, full_hi, hi, BLOCK_N, EVEN_D, True, EXACT_DOT)
    dq = dq * sm_scale
    tl.store(dq_ptr + (b64 * stride_dqb + t64 * stride_dqt + head * stride_dqh)[:, None] + offs_d[None, :],
             dq.to(dq_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gqa_bwd_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, dq_acc_ptr, part_ptr, counter_ptr,
    S_q, S_kv, H, H_kv, G, head_splits, key_blocks, num_q_blocks, BH_kv, group,
    scale_log2, sm_scale,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_dob, stride_dot, stride_doh,
    stride_lb, stride_lh,
    stride_dqb, stride_dqt, stride_dqh,
    stride_dkb, stride_dkt, stride_dkh,
    stride_dvb, stride_dvt, stride_dvh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
    IS_CAUSAL: tl.constexpr, EVEN_M1: tl.constexpr, EVEN_N1: tl.constexpr, EVEN_N2: tl.constexpr,
    ATOMIC_DQ: tl.constexpr, PARTIAL: tl.constexpr, FUSED_SUM: tl.constexpr, EXACT_DOT: tl.constexpr,
    WAIT_PRIOR: tl.constexpr, CHUNKED: tl.constexpr,
):
    """1-D grid of ``BH_kv · (key_blocks · head_splits + num_q_blocks)`` programs (``BH_kv = B·H_kv`` pairs of
    (batch element, KV head); no dQ programs with ``ATOMIC_DQ``, no dK/dV programs with ``key_blocks = 0``).

    Order: the pairs in chunks of ``group`` (the last may be shorter). A chunk's dK/dV programs come first: key
    block 0 of each of its pairs (under the causal mask it sees the most queries), then block 1, ..., over one of
    ``head_splits`` subgroups of the G heads each, tiles ``BLOCK_N1`` keys × ``BLOCK_M1`` queries; ``PARTIAL``
    (head_splits > 1): fp32 partial sums into ``part_ptr``, summed by ``gqa_bwd_head_sum_kernel`` or
    (``FUSED_SUM``, counters at ``counter_ptr``) by the last subgroup to finish. Then the chunk's dQ programs:
    packed query block ``num_q_blocks − 1`` of each of its pairs (the longest), down to block 0, tiles ``BLOCK_M2``
    rows × ``BLOCK_N2`` keys. With ``group = BH_kv`` (one chunk; ``CHUNKED`` False, which compiles the one-chunk
    arithmetic alone: several chunks cost the 8-warp tiles' ragged builds up to 24 B of register spill on sm_90) every
    dK/dV program precedes every dQ program.
    Why chunks: the programs resident at one time then stream Q / dO (dK/dV role) and K / V (dQ role) of the
    chunk's pairs only; with one chunk they stream those of every pair, which may not stay in L2 between waves.
    ``lse``: ``[B, H, S_q]`` f32 base 2 (strides ``stride_l*``, last dim contiguous); ``delta``:
    ``[B, H, S_q]`` f32 contiguous. Causal is bottom-right: query i sits at key position
    ``i + S_kv − S_q``. ``EVEN_M1 = S_q % BLOCK_M1 == 0``, ``EVEN_N1 = S_kv % BLOCK_N1 == 0``,
    ``EVEN_N2 = S_kv % BLOCK_N2 == 0``.
    ``ATOMIC_DQ``: the dK/dV programs add dQ into ``dq_acc_ptr`` (``dq_ptr`` is not written). ``EXACT_DOT``:
    interpreter only (fp32 operands, same products). ``WAIT_PRIOR``: launched with programmatic dependent launch
    after the preprocess: each program loads its first inputs, then waits for the preprocess's Δ (and zeroed
    atomic accumulator) in ``gdc_wait``."""
    pid = tl.program_id(0)
    dkdv_per_pair = key_blocks * head_splits
    if CHUNKED:
        per_pair = dkdv_per_pair if ATOMIC_DQ else dkdv_per_pair + num_q_blocks
        chunk = pid // (group * per_pair)
        first = chunk * group
        pairs = tl.minimum(BH_kv - first, group)
        w = pid - first * per_pair  # the program's place in its chunk
    else:
        first = 0
        pairs = BH_kv
        w = pid
    if w < dkdv_per_pair * pairs:
        _dkdv_program(
            w // (head_splits * pairs), (w // pairs) % head_splits, first + w % pairs,
            q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_acc_ptr, part_ptr, counter_ptr,
            S_q, S_kv, H, H_kv, G, head_splits, BH_kv, scale_log2, sm_scale,
            stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
            stride_dob, stride_dot, stride_doh, stride_lb, stride_lh,
            stride_dkb, stride_dkt, stride_dkh, stride_dvb, stride_dvt, stride_dvh,
            HEAD_DIM, BLOCK_D, BLOCK_M1, BLOCK_N1, IS_CAUSAL, EVEN_M1, EVEN_N1, ATOMIC_DQ, PARTIAL, FUSED_SUM,
            EXACT_DOT, WAIT_PRIOR,
        )
    elif not ATOMIC_DQ:
        w -= dkdv_per_pair * pairs
        _dq_program(
            num_q_blocks - 1 - w // pairs, first + w % pairs,
            q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
            S_q, S_kv, H, H_kv, G, scale_log2, sm_scale,
            stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
            stride_dob, stride_dot, stride_doh, stride_lb, stride_lh, stride_dqb, stride_dqt, stride_dqh,
            HEAD_DIM, BLOCK_D, BLOCK_M2, BLOCK_N2, IS_CAUSAL, EVEN_N2, EXACT_DOT, WAIT_PRIOR,
        )
