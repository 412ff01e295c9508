"""Attention over closed compressed chunks: one program = BT consecutive packed tokens x the G query heads of
one KV head, i.e. an [BT*GP, D] query tile that shares every k_cmp / v_cmp tile it loads, for one sequence: a
tile that a sequence start falls inside of is served by one program per sequence it holds."""

import triton
import triton.language as tl

# Running-max start: finite so that a row that sees no key keeps alpha = exp2(0) = 1 and p = exp2(-inf) = 0.
NEG_BIG: tl.constexpr = tl.constexpr(-1.0e30)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)


@triton.jit
def _sequence_pass(q, seq, pos, row_ok, n, k_ptr, v_ptr, chunk_offsets_ptr, g, qk_scale,
                   stride_kc, stride_kh, stride_vc, stride_vh, dk, dv,
                   BM: tl.constexpr, BDV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BS: tl.constexpr,
                   BC: tl.constexpr):
    """Softmax state of the tile's rows of sequence n over that sequence's closed chunks; returns it with the
    rows of sequence n and their closed-chunk counts. Rows of other sequences see no chunk (their p is 0)
    and are never stored by this program."""
    boc = tl.load(chunk_offsets_ptr + n).to(tl.int64)
    rows_n = tl.load(chunk_offsets_ptr + n + 1) - boc  # storage rows of sequence n
    in_seq = row_ok & (seq == n)
    nc = tl.where(in_seq, tl.minimum((pos + 1) // BS, rows_n), 0)  # closed chunks per row
    nc_max = tl.max(nc, axis=0)
    m = tl.full([BM], NEG_BIG, dtype=tl.float32)
    l = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, BDV], dtype=tl.float32)
    k_base = k_ptr + boc * stride_kc + g * stride_kh
    v_base = v_ptr + boc * stride_vc + g * stride_vh
    for c0 in range(0, nc_max, BC):
        c = c0 + tl.arange(0, BC)
        c_ok = c < nc_max
        kt = tl.load(k_base + c[None, :].to(tl.int64) * stride_kc + dk[:, None],
                     mask=c_ok[None, :] & (dk < DK)[:, None], other=0.0)
        s = tl.dot(q, kt) * qk_scale
        s = tl.where(c[None, :] < nc[:, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.math.exp2(m - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        vt = tl.load(v_base + c[:, None].to(tl.int64) * stride_vc + dv[None, :],
                     mask=c_ok[:, None] & (dv < DV)[None, :], other=0.0)
        acc = tl.dot(p.to(vt.dtype), vt, acc * alpha[:, None])
        m = m_new
    return m, l, acc, in_seq, nc


@triton.jit
def _store_rows(o_tile, lse_tile, o_rows, l_rows, m, l, acc, in_seq, nc, dv, DV: tl.constexpr):
    # A row with no closed chunk outputs exactly 0 (its p is 0, but 0 · NaN of a chunk other rows see is not).
    seen = (l != 0) & (nc > 0)  # l >= 0, or NaN (a NaN score or value): NaN must reach o and lse
    inv = tl.where(seen, 1.0 / tl.where(seen, l, 1.0), 0.0)
    o = tl.where(seen[:, None], acc * inv[:, None], 0.0)
    lse = tl.where(seen, (m + tl.math.log2(tl.where(seen, l, 1.0))) * LN2, 0.0)
    tl.store(o_tile + o_rows[:, None] + dv[None, :], o.to(o_tile.dtype.element_ty),
             mask=in_seq[:, None] & (dv < DV)[None, :])
    tl.store(lse_tile + l_rows, lse.to(lse_tile.dtype.element_ty), mask=in_seq)


@triton.jit
def nsa_compressed_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, offsets_ptr, chunk_offsets_ptr, tok_ptr,
    num_tokens, num_seqs, qk_scale,  # qk_scale = scale * log2(e): scores in base-2 units
    stride_qt, stride_qh, stride_kc, stride_kh, stride_vc, stride_vh, stride_ot, stride_oh, stride_lt,
    G: tl.constexpr,  # query heads per KV head
    GP: tl.constexpr,  # G rounded up to a power of two (padding heads are masked)
    DK: tl.constexpr, DV: tl.constexpr, BDK: tl.constexpr, BDV: tl.constexpr,
    BS: tl.constexpr,  # compression block size
    BM: tl.constexpr,  # query rows per program (BT = BM // GP tokens)
    BC: tl.constexpr,  # compressed chunks per inner iteration
):
    """Token tile t = packed tokens [t·BT, t·BT + BT); grid (tiles + N − 1) x H_kv. Program p < tiles serves
    tile (tiles − 1 − p) for the sequence of its first token; program tiles + j serves, for sequence j + 1,
    the tile its first token falls inside of (when that is not a tile start, and the sequence is not empty).
    Every (tile, sequence) pair is thus one program with one pass: no loop over sequences and no state restart,
    which kept q and the softmax state live around the chunk loop (sm_90, G 16 / D 128, 4 warps: BM 64 / BC 32
    156 registers instead of 214, 3 CTAs per SM, not 2; BC 16 112, 4 CTAs)."""
    BT: tl.constexpr = BM // GP
    g = tl.program_id(1)
    num_tiles = tl.cdiv(num_tokens, BT)
    p = tl.program_id(0)
    if p < num_tiles:
        tile = num_tiles - 1 - p  # late tokens see the most chunks: start them first
        n = tl.minimum(tl.maximum(tl.load(tok_ptr + (tile * BT).to(tl.int64) * 2), 0), num_seqs - 1)
        serve = True
    else:
        n = p - num_tiles + 1
        start = tl.load(offsets_ptr + n)
        tile = start // BT
        serve = (start % BT != 0) & (start < tl.load(offsets_ptr + n + 1))
    if serve:
        t_first = tile * BT
        rows = tl.arange(0, BM)
        tok = t_first + rows // GP
        hg = rows % GP
        row_ok = (tok < num_tokens) & (hg < G)
        seq = tl.load(tok_ptr + tok.to(tl.int64) * 2, mask=row_ok, other=-1)
        pos = tl.load(tok_ptr + tok.to(tl.int64) * 2 + 1, mask=row_ok, other=0)
        # int64 tile bases, int32 offsets inside the tile (op.py bounds BT * strides below 2^31): a [BM, D]
        # tensor of 64-bit addresses would cost ~128 registers per thread at the store.
        tile_t = t_first.to(tl.int64)
        tile_h = (g * G).to(tl.int64)
        q_rows = (rows // GP) * stride_qt + hg * stride_qh
        o_rows = (rows // GP) * stride_ot + hg * stride_oh
        l_rows = (rows // GP) * stride_lt + hg
        dk = tl.arange(0, BDK)
        dv = tl.arange(0, BDV)
        q_tile = q_ptr + tile_t * stride_qt + tile_h * stride_qh
        q = tl.load(q_tile + q_rows[:, None] + dk[None, :], mask=row_ok[:, None] & (dk < DK)[None, :], other=0.0)
        m, l, acc, in_seq, nc = _sequence_pass(q, seq, pos, row_ok, n, k_ptr, v_ptr, chunk_offsets_ptr, g,
                                               qk_scale, stride_kc, stride_kh, stride_vc, stride_vh, dk, dv,
                                               BM, BDV, DK, DV, BS, BC)
        o_tile = o_ptr + tile_t * stride_ot + tile_h * stride_oh
        lse_tile = lse_ptr + tile_t * stride_lt + tile_h
        _store_rows(o_tile, lse_tile, o_rows, l_rows, m, l, acc, in_seq, nc, dv, DV)
