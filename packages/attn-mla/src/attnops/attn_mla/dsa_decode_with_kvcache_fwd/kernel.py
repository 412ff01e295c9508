"""DeepSeek sparse attention over selected KV rows.

``dsa_prepare_indices_kernel`` (one program per query row and KV head) turns a row of selected slots into
the set the attention reads: slots outside ``[0, S_kv)`` or in the causal future become a sentinel, the
row is sorted, repeats are dropped, and the distinct valid keys are packed to the front (ascending, which
also gives the gathers locality) with their count.

``dsa_decode_kernel`` (one program per query row and block of BLOCK_H heads of a KV head) gathers
BLOCK_N selected rows per step — ``[BLOCK_N, D]`` (keys and values) plus the ``[BLOCK_N, TAIL]`` rope
tail — and runs the same online-softmax loop as MLA decode on tensor cores, over ``count`` keys only.
"""

import triton
import triton.language as tl


@triton.jit
def dsa_prepare_indices_kernel(
    idx_ptr, clean_ptr, count_ptr,
    S, H_kv, S_kv, K, q_start, stride_kv,
    stride_ib, stride_is, stride_ih,
    BLOCK_K: tl.constexpr,  # next power of two >= K
    CAUSAL: tl.constexpr,
):
    row = tl.program_id(0)
    g = row % H_kv
    bs = row // H_kv
    s = bs % S
    b = bs // S
    slots = tl.arange(0, BLOCK_K)
    idx = tl.load(idx_ptr + b.to(tl.int64) * stride_ib + s.to(tl.int64) * stride_is + g * stride_ih + slots,
                  mask=slots < K, other=-1)
    valid = (idx >= 0) & (idx < S_kv)
    if CAUSAL:
        # KV row j summarizes tokens [j·stride, (j+1)·stride): visible once its last token is <= Q_s.
        valid = valid & ((idx.to(tl.int64) + 1) * stride_kv - 1 <= q_start + s)
    ranked = tl.sort(tl.where(valid, idx, 2147483647))  # invalid slots sort last (int32 max)
    prev = tl.gather(ranked, tl.maximum(slots - 1, 0), 0)
    keep = (ranked != 2147483647) & ((slots == 0) | (ranked != prev))
    dest = tl.cumsum(keep.to(tl.int32), axis=0) - 1
    tl.store(clean_ptr + row.to(tl.int64) * BLOCK_K + dest, ranked, mask=keep)
    tl.store(count_ptr + row, tl.sum(keep.to(tl.int32), axis=0))


@triton.jit
def dsa_decode_kernel(
    q_ptr, kv_ptr, clean_ptr, count_ptr, out_ptr,
    S, H_kv, group_size, head_blocks_per_kv, qk_scale,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_ob, stride_os, stride_oh,
    D: tl.constexpr,  # value width (512): also the first D key channels
    TAIL: tl.constexpr,  # rope tail of the keys (64, or 0)
    BLOCK_K: tl.constexpr,  # row pitch of the cleaned index rows
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    hb = tl.program_id(0)
    row = tl.program_id(1)  # (b, s, kv head)
    g = row % H_kv
    bs = row // H_kv
    s = (bs % S).to(tl.int64)
    b = (bs // S).to(tl.int64)
    local = (hb % head_blocks_per_kv) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = local < group_size
    heads = (g * group_size + local).to(tl.int64)
    d = tl.arange(0, D)
    q_row = q_ptr + b * stride_qb + s * stride_qs + heads[:, None] * stride_qh
    q = tl.load(q_row + d[None, :], mask=head_ok[:, None], other=0.0)
    if TAIL > 0:
        e = tl.arange(0, TAIL)
        q_tail = tl.load(q_row + D + e[None, :], mask=head_ok[:, None], other=0.0)
    kv_base = kv_ptr + b * stride_kb + g * stride_kh
    count = tl.load(count_ptr + row)
    idx_row = clean_ptr + row.to(tl.int64) * BLOCK_K

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    for j0 in tl.range(0, count, BLOCK_N, num_stages=NUM_STAGES):
        j = j0 + tl.arange(0, BLOCK_N)
        sel = j < count
        key_rows = kv_base + tl.load(idx_row + j, mask=sel, other=0).to(tl.int64) * stride_kt
        k = tl.load(key_rows[:, None] + d[None, :], mask=sel[:, None], other=0.0)
        # Scores once per key tile. Triton gives a dot whose result feeds another dot warpsPerCTA
        # [num_warps, 1]: on a 64-row tile both warpgroups would compute all of it (1.53 issued MMA per
        # useful FLOP). Each score dot's result therefore goes through the ragged-tile branch below (the
        # forward slice ends at the branch's yield): the dots get [4, 2], each warpgroup computes half the
        # keys, and the rope dot's result is already in the latent dot's accumulator layout.
        ragged = j0 + BLOCK_N > count
        if TAIL > 0:
            k_tail = tl.load(key_rows[:, None] + D + e[None, :], mask=sel[:, None], other=0.0)
            s_tail = tl.dot(q_tail, tl.trans(k_tail))
            if ragged:
                s_tail = tl.where(sel[None, :], s_tail, float("-inf"))
            s_ij = tl.dot(q, tl.trans(k), s_tail)
        else:
            s_ij = tl.dot(q, tl.trans(k))
        if ragged:  # (with a tail: already -inf, the branch is what matters)
            s_ij = tl.where(sel[None, :], s_ij, float("-inf"))
        m_new = tl.maximum(m, tl.max(s_ij, axis=1) * qk_scale)
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s_ij * qk_scale - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(k.dtype), k, acc * alpha[:, None])
        m = m_new

    out = acc / tl.where(l > 0, l, 1.0)[:, None]  # no valid slot: acc = 0, zeros
    tl.store(out_ptr + b * stride_ob + s * stride_os + heads[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
