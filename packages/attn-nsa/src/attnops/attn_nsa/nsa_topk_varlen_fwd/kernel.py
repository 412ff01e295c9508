"""NSA top-k block selection: one program = BT consecutive packed tokens x the G query heads of one KV head.

Pass 1 computes each head's lse over the closed chunks; pass 2 recomputes the scores chunk tile by chunk
tile, turns them into per-token importances (sum over the group's heads, first / previous / current block
forced to G) and merges each tile into a running, descending top-SP list with bitonic networks on packed
int64 keys ``(importance bits << 31) | (2^31 - 1 - chunk)`` (< 2^62) (importance >= 0 orders like its bits; equal
importances prefer the smaller chunk; -1 = no candidate). Tiles whose tokens all have at most S candidates
skip the scores entirely: every candidate is selected.
"""

import triton
import triton.language as tl

from attnops.attn_nsa._triton_fns import merge_topk_desc, row_topk

NEG_BIG: tl.constexpr = tl.constexpr(-1.0e30)
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
LOW_MASK: tl.constexpr = tl.constexpr(0x7FFFFFFF)


@triton.jit
def nsa_topk_kernel(
    q_ptr, k_ptr, bi_ptr, offsets_ptr, chunk_offsets_ptr, tok_ptr,
    num_tokens, num_seqs, scale,
    stride_qt, stride_qh, stride_kc, stride_kh, stride_bt, stride_bh,
    G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
    BS: tl.constexpr,  # block (chunk) size
    S: tl.constexpr,  # selected_block_num
    SP: tl.constexpr,  # S rounded up to a power of two: running top-list width
    BM: tl.constexpr,  # query rows per program (BT = BM // GP tokens)
    BC: tl.constexpr,  # chunks per tile (>= SP)
):
    BT: tl.constexpr = BM // GP
    num_tiles = tl.cdiv(num_tokens, BT)
    tile = num_tiles - 1 - tl.program_id(0)  # late tokens have the most candidates: start them first
    g = tl.program_id(1)

    # query rows: token-major, GP heads per token
    rows = tl.arange(0, BM)
    tok_r = tile * BT + rows // GP
    hg = rows % GP
    row_ok = (tok_r < num_tokens) & (hg < G)
    seq_r = tl.load(tok_ptr + tok_r.to(tl.int64) * 2, mask=row_ok, other=-1)
    pos_r = tl.load(tok_ptr + tok_r.to(tl.int64) * 2 + 1, mask=row_ok, other=0)
    # the same tokens, one lane each
    tok_b = tile * BT + tl.arange(0, BT)
    tok_b_ok = tok_b < num_tokens
    seq_b = tl.load(tok_ptr + tok_b.to(tl.int64) * 2, mask=tok_b_ok, other=-1)
    pos_b = tl.load(tok_ptr + tok_b.to(tl.int64) * 2 + 1, mask=tok_b_ok, other=0)
    slots = tl.arange(0, SP)
    bi_rows = bi_ptr + tok_b.to(tl.int64)[:, None] * stride_bt + g * stride_bh + slots[None, :]

    t_first = tile * BT
    t_last = tl.minimum(t_first + BT, num_tokens) - 1
    n_first = tl.maximum(tl.load(tok_ptr + t_first.to(tl.int64) * 2), 0)
    n_last = tl.minimum(tl.load(tok_ptr + t_last.to(tl.int64) * 2), num_seqs - 1)
    for n in range(n_first, n_last + 1):
        boc = tl.load(chunk_offsets_ptr + n).to(tl.int64)
        rows_n = tl.load(chunk_offsets_ptr + n + 1) - boc
        in_r = row_ok & (seq_r == n)
        in_b = tok_b_ok & (seq_b == n)
        cur_b = tl.where(in_b, tl.minimum(pos_b // BS, rows_n - 1), -1)  # current chunk; -1: not this seq
        cur_max = tl.max(cur_b, axis=0)
        if cur_max + 1 <= S:
            # at most S candidates per token: all of them, ascending, then -1
            ids = tl.where(slots[None, :] <= cur_b[:, None], slots[None, :], -1)
            tl.store(bi_rows, ids.to(bi_ptr.dtype.element_ty), mask=in_b[:, None] & (slots < S)[None, :])
        else:
            dk = tl.arange(0, BD)
            # int64 tile base, int32 offsets inside the tile (op.py bounds BT * strides below 2^31)
            q_tile = q_ptr + (tile * BT).to(tl.int64) * stride_qt + (g * G).to(tl.int64) * stride_qh
            q_rows = (rows // GP) * stride_qt + hg * stride_qh
            q = tl.load(q_tile + q_rows[:, None] + dk[None, :], mask=in_r[:, None] & (dk < D)[None, :], other=0.0)
            q = (q * scale).to(q_ptr.dtype.element_ty)  # FLA rounds the scaled query to its dtype
            k_base = k_ptr + boc * stride_kc + g * stride_kh
            nc_r = tl.where(in_r, tl.minimum((pos_r + 1) // BS, rows_n), 0)
            cur_r = tl.where(in_r, tl.minimum(pos_r // BS, rows_n - 1), -1)
            # pass 1: lse (base 2) over the closed chunks
            m = tl.full([BM], NEG_BIG, dtype=tl.float32)
            l = tl.zeros([BM], dtype=tl.float32)
            nc_max = tl.max(nc_r, axis=0)
            for c0 in range(0, nc_max, BC):
                c = c0 + tl.arange(0, BC)
                kt = tl.load(k_base + c[None, :].to(tl.int64) * stride_kc + dk[:, None],
                             mask=(c < nc_max)[None, :] & (dk < D)[:, None], other=0.0)
                s = tl.dot(q, kt) * LOG2E
                s = tl.where(c[None, :] < nc_r[:, None], s, float("-inf"))
                m_new = tl.maximum(m, tl.max(s, axis=1))
                l = l * tl.math.exp2(m - m_new) + tl.sum(tl.math.exp2(s - m_new[:, None]), axis=1)
                m = m_new
            lse = tl.where(l > 0, m + tl.math.log2(tl.where(l > 0, l, 1.0)), 0.0)
            # pass 2: importances of chunks 0..cur, merged into the running top-SP
            top = tl.full([BT, SP], -1, dtype=tl.int64)
            for c0 in range(0, cur_max + 1, BC):
                c = c0 + tl.arange(0, BC)
                kt = tl.load(k_base + c[None, :].to(tl.int64) * stride_kc + dk[:, None],
                             mask=(c <= cur_max)[None, :] & (dk < D)[:, None], other=0.0)
                s = tl.dot(q, kt) * LOG2E
                p = tl.math.exp2(s - lse[:, None])
                p = tl.where(c[None, :] < cur_r[:, None], p, 0.0)  # padding heads / rows: cur_r = -1
                imp = tl.sum(tl.reshape(p, [BT, GP, BC]), axis=1)  # [BT, BC]
                cb = cur_b[:, None]
                forced = (c[None, :] == 0) | (c[None, :] == cb - 1) | (c[None, :] == cb)
                imp = tl.where(forced, G * 1.0, imp)
                bits = imp.to(tl.int32, bitcast=True).to(tl.int64)
                key = tl.where(c[None, :] <= cb, (bits << 31) | (LOW_MASK - c[None, :].to(tl.int64)), -1)
                new = row_topk(key, SP, 0)  # this tile's best SP, ascending
                top = merge_topk_desc(top, new)  # running best SP, descending
            best = tl.where(top >= 0, LOW_MASK - (top & LOW_MASK), -1)
            tl.store(bi_rows, best.to(bi_ptr.dtype.element_ty), mask=in_b[:, None] & (slots < S)[None, :])
