"""GQABwd kernels: the preprocess ``Δ = rowsum(o ⊙ dO)`` and one backward launch with two program roles.

Math (spec attn-core.md GQABwd), per batch b and query head h (KV head ``h // G``), with raw dot products
``qk = q·kᵀ`` and the forward's base-2 lse: ``P = 2^(qk·scale·log2 e − lse2)`` (one FMA + exp2 per score,
the scale folded in), ``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dS = P ⊙ (dP − Δ)``, ``dQ = scale · dS K``,
``dK = scale · dSᵀ Q``.

``gqa_bwd_kernel`` runs two kinds of programs in one grid (so the short dQ programs fill the SMs the
long dK/dV programs leave idle; each kind is ordered longest-first under the causal mask):

* **dK/dV** (the first ``num_dkdv`` programs): one ``BLOCK_N`` block of keys of one KV head of one batch
  element keeps K, V and the fp32 accumulators dK, dV in registers and walks the query blocks that see it,
  for each of the G query heads of the KV head in turn. The GQA sum over heads therefore happens in
  registers, and dK / dV are written once (no atomics, no second pass). Scores are formed transposed
  (``k·qᵀ``: ``[BLOCK_N, BLOCK_M]``) so Pᵀ and dSᵀ are directly the left operands of their products.
* **dQ** (the rest): one block of ``BLOCK_M`` *packed* query rows (row r = token ``r // G``, head
  ``kv_head·G + r % G``, as in the forward) walks its key range and accumulates dQ in registers. QKᵀ and
  dP are recomputed here (7 matmuls in all instead of 5), which keeps dQ deterministic without atomics.

Both roles split their block range into masked edges and an unmasked middle (causal block skipping: a
block never visits tiles that are fully masked; see ``attention_fns.kv_block_range``, which the dK/dV role
calls with the roles of queries and keys swapped). Offsets are int64. Only portable Triton is used (no
TMA, no warp specialization): the interpreter runs every path.
"""

import triton
import triton.language as tl

from attnops.kernel_utils.attention_fns import kv_block_range, mma, visible


@triton.jit
def gqa_bwd_preprocess_kernel(
    o_ptr, do_ptr, delta_ptr,
    S_q, H,
    stride_ob, stride_ot, stride_oh,
    stride_dob, stride_dot, stride_doh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Grid ``(cdiv(S_q, BLOCK_M), B·H)``: ``delta[b, h, i] = Σ_d o[b, i, h, d]·do[b, i, h, d]`` (fp32,
    ``[B, H, S_q]`` contiguous)."""
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows < S_q)[:, None] & (offs_d < HEAD_DIM)[None, :]
    r64 = rows.to(tl.int64)[:, None]
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + r64 * stride_ot + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + r64 * stride_dot + offs_d[None, :], mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(delta_ptr + bh.to(tl.int64) * S_q + rows, delta, mask=rows < S_q)


@triton.jit
def _load(ptrs, mask, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(ptrs, mask=mask, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _visible_t(k_pos, q_pos, WL, WR):
    """``[BLOCK_N, BLOCK_M]``: the transpose of ``attention_fns.visible`` without its key bound (the dK/dV
    role discards rows of keys past S_kv): key ``k_pos[n]`` is visible from query position ``q_pos[m]``."""
    kp = k_pos[:, None]
    qp = q_pos[None, :]
    return (kp >= qp - WL) & (kp <= qp + WR)


@triton.jit
def _dkdv_tiles(
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qt, stride_dot,
    k_pos, offs_d, d_mask, S_q, q_off, WL, WR, scale_log2, lo, hi,
    BLOCK_M: tl.constexpr, EVEN_D: tl.constexpr, MASKED: tl.constexpr, EXACT_DOT: tl.constexpr,
):
    """Query rows ``[lo, hi)`` of one head into the key block's dK, dV (``[BLOCK_N, BLOCK_D]`` fp32).
    Unmasked calls only get rows that are all < S_q and see every key of the block.

    Rows past S_q load q = dO = 0 and lse = +inf, so their P (and dS) is exactly 0."""
    offs_m = tl.arange(0, BLOCK_M)
    NEED_MASK: tl.constexpr = MASKED or not EVEN_D
    for start in range(lo, hi, BLOCK_M):
        m = start + offs_m
        m64 = m.to(tl.int64)
        if MASKED:
            m_mask = m < S_q
        else:
            m_mask = m >= 0  # all true
        qT = _load(q_base + m64[None, :] * stride_qt + offs_d[:, None], d_mask[:, None] & m_mask[None, :],
                   NEED_MASK)  # [BLOCK_D, BLOCK_M]
        if MASKED:
            lse = tl.load(lse_base + m64, mask=m_mask, other=float("inf"))
            delta = tl.load(delta_base + m64, mask=m_mask, other=0.0)
        else:
            lse = tl.load(lse_base + m64)
            delta = tl.load(delta_base + m64)
        qkT = mma(k, qT, None, EXACT_DOT)  # [BLOCK_N, BLOCK_M]
        pT = tl.math.exp2(qkT * scale_log2 - lse[None, :])
        if MASKED:
            pT = tl.where(_visible_t(k_pos, m + q_off, WL, WR), pT, 0.0)
        do = _load(do_base + m64[:, None] * stride_dot + offs_d[None, :], m_mask[:, None] & d_mask[None, :],
                   NEED_MASK)  # [BLOCK_M, BLOCK_D]
        dv = mma(pT.to(do.dtype), do, dv, EXACT_DOT)
        dpT = mma(v, tl.trans(do), None, EXACT_DOT)  # [BLOCK_N, BLOCK_M]
        dsT = pT * (dpT - delta[None, :])
        dk = mma(dsT.to(qT.dtype), tl.trans(qT), dk, EXACT_DOT)
    return dk, dv


@triton.jit
def _dq_tiles(
    dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt,
    offs_d, d_mask, S_kv, WL, WR, scale_log2, lo, hi,
    BLOCK_N: tl.constexpr, EVEN_D: tl.constexpr, MASKED: tl.constexpr, EXACT_DOT: tl.constexpr,
):
    """Keys ``[lo, hi)`` into the packed query block's dQ (``[BLOCK_M, BLOCK_D]`` fp32). Unmasked calls
    only get keys that are all < S_kv and visible from every row."""
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
            p = tl.where(visible(q_pos, k_pos, S_kv, WL, WR), p, 0.0)
        dp = mma(do, vT, None, EXACT_DOT)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(kT.dtype), tl.trans(kT), dq, EXACT_DOT)
    return dq


@triton.jit
def gqa_bwd_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr,
    S_q, S_kv, H, H_kv, G, num_dkdv, num_q_blocks, BH_kv,
    scale_log2, sm_scale, WL, WR,
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
    EXACT_DOT: tl.constexpr,
):
    """1-D grid of ``num_dkdv + num_q_blocks·B·H_kv`` programs (``BH_kv = B·H_kv``).

    Programs ``[0, num_dkdv)``: key block ``pid // BH_kv`` (block 0 first: under the causal mask it sees
    the most queries), tiles ``BLOCK_N1`` keys × ``BLOCK_M1`` queries. The rest: packed query block
    ``num_q_blocks − 1 − p // BH_kv`` (last first), tiles ``BLOCK_M2`` rows × ``BLOCK_N2`` keys.
    ``lse``: ``[B, H, S_q]`` f32 base 2 (strides ``stride_l*``, last dim contiguous); ``delta``:
    ``[B, H, S_q]`` f32 contiguous. ``(WL, WR)`` from ``attention_fns.window_bounds``; query i sits at key
    position ``i + S_kv − S_q``. ``EXACT_DOT``: interpreter only (fp32 operands, same products)."""
    pid = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    q_off = S_kv - S_q
    if pid < num_dkdv:
        # ---------------------------------------------------------------- dK / dV of one key block
        blk = pid // BH_kv
        rem = pid % BH_kv
        b64 = (rem // H_kv).to(tl.int64)
        kv_head = rem % H_kv
        n0 = blk * BLOCK_N1
        k_pos = n0 + tl.arange(0, BLOCK_N1)
        n64 = k_pos.to(tl.int64)
        n_mask = k_pos < S_kv
        kv_mask = n_mask[:, None] & d_mask[None, :]
        kvh64 = kv_head.to(tl.int64)
        k = tl.load(k_ptr + b64 * stride_kb + kvh64 * stride_kh + n64[:, None] * stride_kt + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b64 * stride_vb + kvh64 * stride_vh + n64[:, None] * stride_vt + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        # Query rows that see this block: key j is visible from row i iff j − WR <= i + q_off <= j + WL, i.e.
        # kv_block_range with queries and keys swapped (and WL, WR swapped).
        k_last = tl.minimum(n0 + BLOCK_N1, S_kv) - 1
        m_lo, full_lo, full_hi, m_hi = kv_block_range(n0 - q_off, k_last - q_off, S_q, WR, WL, BLOCK_M1)
        dk = tl.zeros([BLOCK_N1, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N1, BLOCK_D], tl.float32)
        for g in range(G):
            head = (kv_head * G + g).to(tl.int64)
            q_base = q_ptr + b64 * stride_qb + head * stride_qh
            do_base = do_ptr + b64 * stride_dob + head * stride_doh
            lse_base = lse_ptr + b64 * stride_lb + head * stride_lh
            delta_base = delta_ptr + (b64 * H + head) * S_q
            dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qt, stride_dot,
                                 k_pos, offs_d, d_mask, S_q, q_off, WL, WR, scale_log2, m_lo, full_lo,
                                 BLOCK_M1, EVEN_D, True, EXACT_DOT)
            dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qt, stride_dot,
                                 k_pos, offs_d, d_mask, S_q, q_off, WL, WR, scale_log2, full_lo, full_hi,
                                 BLOCK_M1, EVEN_D, False, EXACT_DOT)
            dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qt, stride_dot,
                                 k_pos, offs_d, d_mask, S_q, q_off, WL, WR, scale_log2, full_hi, m_hi,
                                 BLOCK_M1, EVEN_D, True, EXACT_DOT)
        dk = dk * sm_scale
        tl.store(dk_ptr + b64 * stride_dkb + kvh64 * stride_dkh + n64[:, None] * stride_dkt + offs_d[None, :],
                 dk.to(dk_ptr.dtype.element_ty), mask=kv_mask)
        tl.store(dv_ptr + b64 * stride_dvb + kvh64 * stride_dvh + n64[:, None] * stride_dvt + offs_d[None, :],
                 dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)
    else:
        # ---------------------------------------------------------------- dQ of one packed query block
        p2 = pid - num_dkdv
        blk = num_q_blocks - 1 - p2 // BH_kv
        rem = p2 % BH_kv
        b64 = (rem // H_kv).to(tl.int64)
        kv_head = rem % H_kv
        num_rows = S_q * G
        m_start = blk * BLOCK_M2
        rows = m_start + tl.arange(0, BLOCK_M2)
        row_mask = rows < num_rows
        t = rows // G
        head = (kv_head * G + rows % G).to(tl.int64)
        t64 = t.to(tl.int64)
        mask = row_mask[:, None] & d_mask[None, :]
        q = tl.load(q_ptr + (b64 * stride_qb + t64 * stride_qt + head * stride_qh)[:, None] + offs_d[None, :],
                    mask=mask, other=0.0)
        do = tl.load(do_ptr + (b64 * stride_dob + t64 * stride_dot + head * stride_doh)[:, None] + offs_d[None, :],
                     mask=mask, other=0.0)
        lse = tl.load(lse_ptr + b64 * stride_lb + head * stride_lh + t64, mask=row_mask, other=float("inf"))
        delta = tl.load(delta_ptr + (b64 * H + head) * S_q + t64, mask=row_mask, other=0.0)
        q_pos = t + q_off
        last_row = tl.minimum(m_start + BLOCK_M2, num_rows) - 1
        n_lo, full_lo, full_hi, n_hi = kv_block_range(m_start // G + q_off, last_row // G + q_off, S_kv, WL, WR,
                                                      BLOCK_N2)
        kvh64 = kv_head.to(tl.int64)
        k_base = k_ptr + b64 * stride_kb + kvh64 * stride_kh
        v_base = v_ptr + b64 * stride_vb + kvh64 * stride_vh
        dq = tl.zeros([BLOCK_M2, BLOCK_D], tl.float32)
        dq = _dq_tiles(dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt, offs_d, d_mask, S_kv,
                       WL, WR, scale_log2, n_lo, full_lo, BLOCK_N2, EVEN_D, True, EXACT_DOT)
        dq = _dq_tiles(dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt, offs_d, d_mask, S_kv,
                       WL, WR, scale_log2, full_lo, full_hi, BLOCK_N2, EVEN_D, False, EXACT_DOT)
        dq = _dq_tiles(dq, q, do, lse, delta, q_pos, k_base, v_base, stride_kt, stride_vt, offs_d, d_mask, S_kv,
                       WL, WR, scale_log2, full_hi, n_hi, BLOCK_N2, EVEN_D, True, EXACT_DOT)
        dq = dq * sm_scale
        tl.store(dq_ptr + (b64 * stride_dqb + t64 * stride_dqt + head * stride_dqh)[:, None] + offs_d[None, :],
                 dq.to(dq_ptr.dtype.element_ty), mask=mask)
