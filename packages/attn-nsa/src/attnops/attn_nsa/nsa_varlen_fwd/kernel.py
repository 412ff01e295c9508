"""Selected-block sparse attention: one program = BT consecutive packed tokens x the G query heads of one KV
head, so every selected K/V block is loaded once for the whole group. Each step gathers KB selected blocks
(KB·BS key rows, contiguous inside a block) into one [KB·BS, D] tile.

The (token, step) pairs of the program run as one flat loop of BT·NSTEP iterations with a constant trip count,
so Triton's software pipeliner issues the q / K / V loads (cp.async) of the next iterations while the current
one computes: one (token, KV head) costs two tiny MMAs, and without that overlap every token pays the full
id -> K/V -> MMA -> store latency chain on its own (v1: 19-46 % SOL). Per-token metadata (position, sequence
end, block count) is read once per program as [BT] vectors, so the only load in front of the K/V gather is
the block-id row (an L1 hit for neighbouring tokens)."""

import triton
import triton.language as tl

NEG_BIG: tl.constexpr = tl.constexpr(-1.0e30)


@triton.jit
def nsa_varlen_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, bi_ptr, bc_ptr, offsets_ptr, tok_ptr,
    num_tokens, qk_scale,  # qk_scale = scale * log2(e)
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_bit, stride_bih, stride_bct, stride_bch,
    tune_bucket,  # autotune key only
    G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
    BS: tl.constexpr,  # selection block size (power of two)
    SEL: tl.constexpr,  # slots per (token, KV head)
    CAUSAL: tl.constexpr,
    KB: tl.constexpr,  # selected blocks gathered per step
    BT: tl.constexpr,  # packed tokens per program (power of two)
):
    # steps per token (slots past block_counts are masked); SEL = 0 still takes one step, which stores the zeros
    NSTEP: tl.constexpr = (SEL + KB - 1) // KB if SEL > 0 else 1
    t0 = tl.program_id(0).to(tl.int64) * BT
    g = tl.program_id(1).to(tl.int64)

    # Per-token metadata of the program's BT tokens, loaded once, off the per-step load chain.
    bt = tl.arange(0, BT)
    tv = t0 + bt
    tv_ok = tv < num_tokens
    pos_v = tl.load(tok_ptr + tv * 2 + 1, mask=tv_ok, other=0)
    bos_v = tv - pos_v  # = offsets[seq] (op.py checks that token_indices agrees with offsets)
    if CAUSAL:
        end_v = pos_v + 1
    else:
        seq_v = tl.load(tok_ptr + tv * 2, mask=tv_ok, other=0)
        end_v = tl.load(offsets_ptr + seq_v + 1, mask=tv_ok, other=0) - bos_v
    end_v = tl.minimum(end_v, num_tokens - bos_v)  # never read past the packed tensors
    cnt_v = tl.load(bc_ptr + tv * stride_bct + g * stride_bch, mask=tv_ok, other=0)
    cnt_v = tl.minimum(tl.maximum(cnt_v, 0), SEL)

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
    slot = j // BS
    for i in range(0, BT * NSTEP):
        it = i // NSTEP
        st = i % NSTEP
        sel_t = bt == it
        t_ok = (t0 + it) < num_tokens
        t = tl.minimum(t0 + it, num_tokens - 1)  # clamped: a tail token's loads stay in bounds (masked anyway)
        bos = tl.sum(tl.where(sel_t, bos_v, 0))
        end = tl.sum(tl.where(sel_t, end_v, 0))
        count = tl.sum(tl.where(sel_t, cnt_v, 0))
        sl = st * KB + slot
        blk = tl.load(bi_ptr + t * stride_bit + g * stride_bih + sl, mask=sl < SEL, other=-1)
        blk = tl.where(sl < count, blk, -1).to(tl.int64)
        r = blk * BS + (j % BS)  # key position inside the sequence
        ok = (blk >= 0) & (r < end) & (r >= -bos)
        q = tl.load(q_ptr + t * stride_qt + head[:, None] * stride_qh + d[None, :], mask=qo_mask, other=0.0)
        kt = tl.load(k_ptr + (bos + r[None, :]) * stride_kt + g * stride_kh + d[:, None],
                     mask=ok[None, :] & d_ok[:, None], other=0.0)
        s = tl.dot(q, kt) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        first = st == 0  # a new token: restart the running softmax
        m = tl.where(first, NEG_BIG, m)
        l = tl.where(first, 0.0, l)
        acc = tl.where(first, 0.0, acc)
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.math.exp2(m - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        vt = tl.load(v_ptr + (bos + r[:, None]) * stride_vt + g * stride_vh + d[None, :],
                     mask=ok[:, None] & d_ok[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m = m_new
        seen = l > 0
        o = acc * tl.where(seen, 1.0 / tl.where(seen, l, 1.0), 0.0)[:, None]
        tl.store(o_ptr + t * stride_ot + head[:, None] * stride_oh + d[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=qo_mask & t_ok & (st == NSTEP - 1))
