"""Selected-block sparse attention: one program = NT packed tokens x the G query heads of one KV head, so
every selected K/V block is loaded once for the whole group. With NT = 1 each iteration gathers KB selected blocks
(KB·BS key rows, contiguous inside a block) into one [KB·BS, D] tile: more loads in flight per step and a
wider QK^T / PV product than one block at a time.

``NT`` > 1 (KB = 1): one loop runs through the selected blocks of NT consecutive tokens, so the software
pipeline keeps loading across token boundaries (the next token's first block is in flight while this token's
last one is computed) and the per-token prologue (ids, counts, positions) is NT vector loads per program. The
softmax state restarts at each token's first block and the output is stored after its last; a token with no
block takes one keyless step that stores its zeros.

``TMA`` (KB = 1; head dim a power of two, heads packed in a row, 16-byte aligned rows): each selected block
is one TMA box, copied asynchronously without the per-row addresses, masks and cp.async instructions of the
pointer gather. TMA = 1: boxes of the host descriptors ``k_desc`` / ``v_desc`` over the 2-D view
``[T, H_kv·D]``; rows outside the tensor arrive as zeros, rows inside it but outside this token's keys are
masked in registers (V too: 0 · inf would not be 0). TMA = 2 (NT = 1): descriptors built per program over
exactly this token's visible rows ``[0, end)`` of its KV head, so every other row arrives as zeros and V needs
no mask.

``INT32_ROWS`` (pointer gather): the visible-row mask as one int32 compare against a per-block row count, and
row offsets inside a block in int32 (op.py bounds the strides): offline sm_90, 464 instead of 592 instructions
per step at D 64 on one warp. The other form is the one the 2026-12-01 sweeps measured."""

import triton
import triton.language as tl

NEG_BIG: tl.constexpr = tl.constexpr(-1.0e30)


@triton.jit
def _gather_blocks(k_base, v_base, k_desc, v_desc, blk, bos, end, g, num_tokens, stride_kt, stride_vt, j, d, d_ok,
                   D: tl.constexpr, BS: tl.constexpr, TMA: tl.constexpr, INT32_ROWS: tl.constexpr):
    """K^T [BD, KB·BS] and V [KB·BS, BD] of the blocks ``blk`` (one id per key row; negative: none) of the token
    whose sequence starts at packed row ``bos`` and whose keys end at ``end``, and the rows it sees."""
    if INT32_ROWS:
        first = blk * BS  # the block's first key position inside the sequence
        row_in_blk = j % BS
        # rows of the block the token sees: none for a negative id, else the part below `end`: one int32
        # compare per element (the mask is rebuilt in each of its three layouts) where three int64 ones stood;
        # row offsets inside a block in int32 (op.py bounds the strides), which Triton hoists out of the loop
        seen_rows = tl.where(blk >= 0, tl.minimum(tl.maximum(end - first, 0), BS), 0).to(tl.int32)
        ok = row_in_blk < seen_rows
        k_tile = k_base + first * stride_kt + row_in_blk * stride_kt  # row pointers, [KB·BS]
        v_tile = v_base + first * stride_vt + row_in_blk * stride_vt
    else:  # the form the 2026-12-01 sweeps measured
        r = blk * BS + (j % BS)  # key position inside the sequence
        ok = (blk >= 0) & (r < end) & (r >= -bos)
    if TMA == 2:
        row = tl.minimum(tl.maximum(tl.max(blk) * BS, -BS), end).to(tl.int32)  # outside [0, end): zeros
        kt = k_desc.load([row, 0]).T
        vt = v_desc.load([row, 0])
    else:
        if TMA == 0:
            if INT32_ROWS:
                kt = tl.load(k_tile[None, :] + d[:, None], mask=ok[None, :] & d_ok[:, None], other=0.0)
            else:
                kt = tl.load(k_base + r[None, :] * stride_kt + d[:, None], mask=ok[None, :] & d_ok[:, None],
                             other=0.0)
        else:
            # the box's first packed row, clamped into [-BS, T] (a block outside the tensor stays outside
            # it); its rows outside this token's keys get -inf scores. The id comes from a prefetched vector,
            # all lanes equal at KB 1: a fresh id load here made the box depend on a load of the same step and
            # Triton 3.6 did not pipeline it (offline sm_90)
            row = tl.minimum(tl.maximum(bos + tl.max(blk) * BS, -BS), num_tokens).to(tl.int32)
            col = (g * D).to(tl.int32)
            kt = k_desc.load([row, col]).T
        if TMA == 1:
            vt = tl.where(ok[:, None], v_desc.load([row, col]), 0.0)  # p = 0 there; 0 * inf would not be 0
        else:
            # V is gathered with K (not after the softmax), both in flight together (H200 benchmark, two
            # runs: 2x4k 38.4 -> 36.9 us, the other rows within 2 %); masked rows load as zeros
            if INT32_ROWS:
                vt = tl.load(v_tile[:, None] + d[None, :], mask=ok[:, None] & d_ok[None, :], other=0.0)
            else:
                vt = tl.load(v_base + r[:, None] * stride_vt + d[None, :], mask=ok[:, None] & d_ok[None, :],
                             other=0.0)
    return kt, vt, ok


@triton.jit
def _attend(q, kt, vt, ok, m, l, acc, qk_scale, keep):
    """One online-softmax step over the gathered keys; ``keep`` = 0 drops the running state (a new token)."""
    s = tl.dot(q, kt) * qk_scale
    s = tl.where(ok[None, :], s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.math.exp2(m - m_new) * keep
    p = tl.math.exp2(s - m_new[:, None])
    l = l * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
    return m_new, l, acc


@triton.jit
def _normalized(acc, l):
    seen = l > 0
    return acc * tl.where(seen, 1.0 / tl.where(seen, l, 1.0), 0.0)[:, None]


@triton.jit
def nsa_varlen_fwd_kernel(
    q_ptr, k_ptr, v_ptr, k_desc, v_desc, o_ptr, bi_ptr, bc_ptr, offsets_ptr, tok_ptr,
    num_tokens, qk_scale,  # qk_scale = scale * log2(e)
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_bit, stride_bih, stride_bct, stride_bch,
    G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
    BS: tl.constexpr,  # selection block size (power of two)
    SEL: tl.constexpr,  # slots per (token, KV head)
    SELP: tl.constexpr,  # SEL rounded up to a power of two
    CAUSAL: tl.constexpr,
    NT: tl.constexpr,  # packed tokens per program
    KB: tl.constexpr,  # selected blocks gathered per iteration (NT = 1)
    TMA: tl.constexpr,  # 0: pointer gather; 1: boxes of k_desc / v_desc; 2: per-program boxes (NT = 1)
    INT32_ROWS: tl.constexpr,  # int32 masks and in-block row offsets (fewer instructions per step, more registers)
):
    g = tl.program_id(1).to(tl.int64)
    hg = tl.arange(0, GP)
    head = g * G + hg
    h_ok = hg < G
    d = tl.arange(0, BD)
    d_ok = d < D
    qo_mask = h_ok[:, None] & d_ok[None, :]
    m = tl.full([GP], NEG_BIG, dtype=tl.float32)
    l = tl.zeros([GP], dtype=tl.float32)
    acc = tl.zeros([GP, BD], dtype=tl.float32)
    j = tl.arange(0, KB * BS)
    k_head = k_ptr + g * stride_kh
    v_head = v_ptr + g * stride_vh
    if NT == 1:
        t = tl.program_id(0).to(tl.int64)
        seq = tl.load(tok_ptr + t * 2)
        pos = tl.load(tok_ptr + t * 2 + 1)
        bos = t - pos  # = offsets[seq] (op.py checks that token_indices agrees with offsets)
        if CAUSAL:
            end = pos + 1
        else:
            end = tl.load(offsets_ptr + seq + 1) - bos
        end = tl.minimum(end, num_tokens - bos)  # never read past the packed tensors
        count = tl.load(bc_ptr + t * stride_bct + g * stride_bch)
        count = tl.minimum(tl.maximum(count, 0), SEL)
        q = tl.load(q_ptr + t * stride_qt + head[:, None] * stride_qh + d[None, :], mask=qo_mask, other=0.0)
        bi_row = bi_ptr + t * stride_bit + g * stride_bih
        k_base = k_head + bos * stride_kt
        v_base = v_head + bos * stride_vt
        if TMA == 2:
            k_desc = tl.make_tensor_descriptor(k_base, shape=[end.to(tl.int32), D], strides=[stride_kt, 1],
                                               block_shape=[BS, BD])
            v_desc = tl.make_tensor_descriptor(v_base, shape=[end.to(tl.int32), D], strides=[stride_vt, 1],
                                               block_shape=[BS, BD])
        # Block ids of the first KB slots are fetched before block_counts arrives (masked by SEL, not by the
        # count), and each iteration prefetches the next KB: the id load is off the count -> id -> K/V chain.
        slot = j // BS
        blk_next = tl.load(bi_row + slot, mask=slot < SEL, other=-1)
        for s0 in range(0, count, KB):
            blk = tl.where(s0 + slot < count, blk_next, -1).to(tl.int64)
            blk_next = tl.load(bi_row + s0 + KB + slot, mask=s0 + KB + slot < SEL, other=-1)
            kt, vt, ok = _gather_blocks(k_base, v_base, k_desc, v_desc, blk, bos, end, g, num_tokens, stride_kt,
                                        stride_vt, j, d, d_ok, D, BS, TMA, INT32_ROWS)
            m, l, acc = _attend(q, kt, vt, ok, m, l, acc, qk_scale, 1.0)
        tl.store(o_ptr + t * stride_ot + head[:, None] * stride_oh + d[None, :],
                 _normalized(acc, l).to(o_ptr.dtype.element_ty), mask=qo_mask)
    else:
        # The program's tokens, their keys' range and block counts, and every block id, as vectors loaded
        # once; each step picks its token's entries out of them (a few warp reductions), so no load of the
        # loop waits on another load.
        tn = tl.arange(0, NT)
        tt = tl.program_id(0).to(tl.int64) * NT + tn
        t_ok = tt < num_tokens
        pos_v = tl.load(tok_ptr + tt * 2 + 1, mask=t_ok, other=0)
        bos_v = tt - pos_v
        if CAUSAL:
            end_v = pos_v + 1
        else:
            seq_v = tl.load(tok_ptr + tt * 2, mask=t_ok, other=0)
            end_v = tl.load(offsets_ptr + seq_v + 1, mask=t_ok, other=0) - bos_v
        end_v = tl.minimum(end_v, num_tokens - bos_v)
        cnt_v = tl.load(bc_ptr + tt * stride_bct + g * stride_bch, mask=t_ok, other=0)
        cnt_v = tl.minimum(tl.maximum(cnt_v, 0), SEL)
        steps_v = tl.where(t_ok, tl.maximum(cnt_v, 1), 0)  # an empty selection: one keyless step stores zeros
        stop_v = tl.cumsum(steps_v, 0)  # the program's step after each token's last
        start_v = stop_v - steps_v
        ns = tl.arange(0, NT * SELP)  # (token, slot) of the program, slot fastest
        ns_tok = tl.program_id(0).to(tl.int64) * NT + ns // SELP
        ids_v = tl.load(bi_ptr + ns_tok * stride_bit + g * stride_bih + ns % SELP,
                        mask=(ns % SELP < SEL) & (ns_tok < num_tokens), other=-1)
        for i in range(0, tl.sum(steps_v)):
            ti = tl.sum((stop_v <= i).to(tl.int32))  # this step's token, counted inside the program
            this = tn == ti
            slot = i - tl.sum(tl.where(this, start_v, 0))
            count = tl.sum(tl.where(this, cnt_v, 0))
            bos = tl.sum(tl.where(this, bos_v, 0))
            end = tl.sum(tl.where(this, end_v, 0))
            blk = tl.sum(tl.where(ns == ti * SELP + slot, ids_v, 0))
            blk = tl.where(slot < count, blk, -1).to(tl.int64) + tl.zeros_like(j)  # one id per key row (KB = 1)
            t = tl.program_id(0).to(tl.int64) * NT + ti
            # q is read at every step (from L2: a quarter of the step's bytes) rather than carried: a select of
            # the carried tile costs as many instructions as the load, and the load needs no state
            q = tl.load(q_ptr + t * stride_qt + head[:, None] * stride_qh + d[None, :], mask=qo_mask, other=0.0)
            kt, vt, ok = _gather_blocks(k_head + bos * stride_kt, v_head + bos * stride_vt, k_desc, v_desc, blk,
                                        bos, end, g, num_tokens, stride_kt, stride_vt, j, d, d_ok, D, BS, TMA,
                                        INT32_ROWS)
            fresh = slot == 0
            m = tl.where(fresh, NEG_BIG, m)
            m, l, acc = _attend(q, kt, vt, ok, m, l, acc, qk_scale, tl.where(fresh, 0.0, 1.0))
            last = slot == tl.maximum(count, 1) - 1
            tl.store(o_ptr + t * stride_ot + head[:, None] * stride_oh + d[None, :],
                     _normalized(acc, l).to(o_ptr.dtype.element_ty), mask=qo_mask & last)
