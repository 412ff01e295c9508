"""Paged attention forward (shared by the three paged ops of attn-core) and its split-KV combine.

One program = one work item of the host plan (request b, block of BLOCK_M packed query rows, KV split) ×
one KV head. Packed row r of a request is (token r // G, query head h_kv·G + r % G): the G query
heads of a KV head share every K/V tile a program loads, so a page is read once for all of them.

Keys come from up to two sources, visited in order:
  * the paged pool: logical keys [0, pool_len) through the block table (4-D pages or flat rows: both are
    given as page / token / head strides); optional RoPE as keys are read (GQAPagedFwd) and fp8 pools
    (raw e4m3 -> 16-bit is exact; the dequant scales are folded into the softmax scale and the output);
  * new rows (GQAPrefillPagedWithKVCacheFwd): the request's k_new / v_new rows, keys
    [pool_len, pool_len + q_len), optionally rotated at their positions.
Query i of a request with kv_len keys in total sits at position kv_len − q_len + i (bottom-right).

Each source's key range is walked in one loop; only tiles outside the all-visible middle
(``kv_block_range``: window edge, causal diagonal, ragged tail) pay for the mask. Splits of the pool range write normalized
partial outputs and base-2 lse to a workspace; ``paged_attention_combine_kernel`` merges them.
"""

import triton
import triton.language as tl

from attnops.kernel_utils.attention_fns import (
    LOG2E_C,
    add_sink,
    clamp_range,
    kv_block_range,
    merge_splits,
    mma,
    normalize_rows,
    online_softmax_step,
    restage_operand,
    rope_tile,
    row_lse2,
    softcap_scores,
    split_kv_range,
    visible,
)


@triton.jit
def _attend_source(
    acc, m_i, l_i, q, q_pos, pos_lo, pos_hi, split_lo, split_hi, kv_len, WL, WR, step_scale, cap_scale, cap_log2,
    k_base, v_base, table_row, num_pages, table_width, rope_rows, stride_kp, stride_kt, stride_vp, stride_vt,
    cos_ptr, sin_ptr, stride_cos, key_pos_shift,
    page_size, PAGED: tl.constexpr, ROPE_K: tl.constexpr, ROTARY_DIM: tl.constexpr,
    INTERLEAVED: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EXACT_DOT: tl.constexpr, TILE_IN_PAGE: tl.constexpr, PAGE_SHIFT: tl.constexpr,
):
    """Fold the keys of one source that rows at positions [pos_lo, pos_hi] see, restricted to
    [split_lo, split_hi), into (acc, m_i, l_i). One software-pipelined loop; only tiles outside the
    all-visible middle ``[full_lo, full_hi)`` (window edge, causal diagonal, ragged tail) apply the mask
    (a uniform branch per tile: separate masked / unmasked loops raise register pressure into spills on
    sm_90).

    PAGED: key j lives in page table_row[j // page_size] at slot j % page_size (columns past table_width and
    pages outside [0, num_pages) read as zeros, positions past rope_rows are not rotated: invalid lengths or
    tables that the host did not check never read outside the tensors); else key j is row j of k_base / v_base.
    ``key_pos_shift`` turns a key index into its RoPE position. ``TILE_IN_PAGE`` (page_size a multiple of
    BLOCK_N; tiles start at multiples of BLOCK_N): each tile lies in one page, so it reads one table entry and
    addresses its rows affinely instead of a per-key table gather with a division by page_size.
    ``PAGE_SHIFT`` >= 0 (page_size = 2^PAGE_SHIFT): the per-key page and slot by a shift and a mask instead of
    an integer division and remainder by the runtime page_size."""
    n_lo, full_lo, full_hi, n_hi = kv_block_range(pos_lo, pos_hi, kv_len, WL, WR, BLOCK_N)
    a = clamp_range(n_lo, split_lo, split_hi)
    b = clamp_range(n_hi, split_lo, split_hi)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    for n0 in range(a, b, BLOCK_N):
        k_pos = n0 + offs_n
        ok = k_pos < b
        if PAGED:
            if TILE_IN_PAGE:
                col = n0 // page_size
                page = tl.load(table_row + col, mask=col < table_width, other=-1)
                ok = ok & (page >= 0) & (page < num_pages)
                slot = (n0 - col * page_size + offs_n).to(tl.int64)
            else:
                if PAGE_SHIFT >= 0:
                    col = k_pos >> PAGE_SHIFT
                    slot = k_pos & ((1 << PAGE_SHIFT) - 1)
                else:
                    col = k_pos // page_size
                    slot = k_pos % page_size
                col_ok = ok & (col < table_width)
                page = tl.load(table_row + col, mask=col_ok, other=-1)
                ok = col_ok & (page >= 0) & (page < num_pages)
                slot = slot.to(tl.int64)
            page = page.to(tl.int64)
            k_row = page * stride_kp + slot * stride_kt
            v_row = page * stride_vp + slot * stride_vt
        else:
            k_row = k_pos.to(tl.int64) * stride_kt
            v_row = k_pos.to(tl.int64) * stride_vt
        k = tl.load(k_base + k_row[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        if ROPE_K:  # contiguous cos / sin rows: pipelined with K and V (rope_tile)
            k = rope_tile(k, k_base + k_row, ok[:, None], cos_ptr, sin_ptr, k_pos + key_pos_shift,
                          ok & (k_pos + key_pos_shift < rope_rows), stride_cos, ROTARY_DIM, INTERLEAVED)
        qk = mma(q, tl.trans(k.to(q.dtype)), None, EXACT_DOT)
        if SOFTCAP:
            qk = softcap_scores(qk, cap_scale, cap_log2)
        if (n0 < full_lo) | (n0 + BLOCK_N > full_hi):
            qk = tl.where(visible(q_pos, k_pos, kv_len, WL, WR), qk, float("-inf"))
        p, alpha, m_i, l_i = online_softmax_step(qk, m_i, l_i, step_scale)
        v = tl.load(v_base + v_row[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        acc = mma(p.to(q.dtype), v.to(q.dtype), acc * alpha[:, None], EXACT_DOT)
    return acc, m_i, l_i


@triton.jit
def paged_attention_kernel(
    q_ptr, k_ptr, v_ptr, kn_ptr, vn_ptr, o_ptr,
    table_ptr, cache_len_ptr, cu_q_ptr, items_ptr, part_o_ptr, part_lse_ptr, counter_ptr,
    q_scale_ptr, k_scale_ptr, v_scale_ptr, sinks_ptr, cos_ptr, sin_ptr,
    qk_scale, cap_scale, cap_log2, WL, WR, num_pages, table_width, rope_rows, num_kv_heads, group, page_size,
    q_uniform,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh,
    stride_knt, stride_knh, stride_vnt, stride_vnh,
    stride_tb, stride_cos, stride_qs_b, stride_ks_b, stride_ks_h,
    HAS_NEW: tl.constexpr, Q_FP8: tl.constexpr, KV_FP8: tl.constexpr, ROPE_Q: tl.constexpr, ROPE_POOL_K: tl.constexpr,
    ROPE_NEW_K: tl.constexpr, ROTARY_DIM: tl.constexpr, INTERLEAVED: tl.constexpr,
    SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EXACT_DOT: tl.constexpr,
    FUSED_COMBINE: tl.constexpr, TILE_IN_PAGE: tl.constexpr, PAGE_SHIFT: tl.constexpr,
):
    """Grid: (n_items · H_kv,); program → item pid // H_kv, KV head pid % H_kv (heavy items first).

    items[i] = (b, m_block, split, num_splits, slot). Query rows of request b: cu_q[b]..cu_q[b+1] (or
    b·q_uniform.. when q_uniform > 0). group = H / H_kv; page_size, group and q_uniform are runtime ints
    (fewer compiled variants; the integer divisions they cost are per tile row, not per element). cache_len[b]: pool keys; kv_len = cache_len (+ q_len with HAS_NEW).
    A split item (num_splits > 1) writes normalized partials to slot; otherwise the output. With
    ``FUSED_COMBINE`` the last split of a block to arrive (counter ``slot0·H_kv + h_kv``, int32 zeros, left
    at 0 again; CTA barrier then one acq_rel atomic at GPU scope, as the flash forward) merges the block's
    partials and writes the output: no combine launch."""
    pid = tl.program_id(0)
    item = pid // num_kv_heads
    h_kv = pid % num_kv_heads
    b = tl.load(items_ptr + item * 5 + 0)
    m_block = tl.load(items_ptr + item * 5 + 1)
    split = tl.load(items_ptr + item * 5 + 2)
    num_splits = tl.load(items_ptr + item * 5 + 3)
    slot = tl.load(items_ptr + item * 5 + 4)
    if q_uniform > 0:
        q_start = b * q_uniform
        q_len = b * 0 + q_uniform
    else:
        q_start = tl.load(cu_q_ptr + b)
        q_len = tl.load(cu_q_ptr + b + 1) - q_start
    pool_len = tl.load(cache_len_ptr + b)
    kv_len = pool_len
    if HAS_NEW:
        kv_len = pool_len + q_len
    offset = kv_len - q_len  # position of query 0

    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    tok = rows // group
    head = h_kv * group + rows % group
    row_ok = tok < q_len
    q_pos = offset + tok
    t_lo = (m_block * BLOCK_M) // group
    t_hi = tl.minimum(q_len, (m_block * BLOCK_M + BLOCK_M + group - 1) // group) - 1
    offs_d = tl.arange(0, BLOCK_D)

    # ---- the query tile (RoPE at the query positions; fp8 stays raw: its scale is folded below)
    q_row = (q_start + tok).to(tl.int64) * stride_qt + head.to(tl.int64) * stride_qh
    q = tl.load(q_ptr + q_row[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if ROPE_Q:
        q = rope_tile(q, q_ptr + q_row, row_ok[:, None], cos_ptr, sin_ptr, q_pos,
                      row_ok & (q_pos >= 0) & (q_pos < rope_rows), stride_cos, ROTARY_DIM, INTERLEAVED)
    q = q.to(o_ptr.dtype.element_ty)
    if ROPE_Q and BLOCK_M > 16 and BLOCK_D != 256:
        # Large (wgmma) tiles: through this block's own output rows (see restage_operand); D = 256 not
        # restaged (more spills offline, as in the flash kernel)
        o_row = (q_start + tok).to(tl.int64) * stride_ot + head.to(tl.int64) * stride_oh
        q = restage_operand(q, o_ptr + o_row[:, None] + offs_d[None, :], row_ok[:, None])

    # ---- scales: sm_scale·log2(e) with fp8 dequant multipliers folded in
    dq = 1.0
    if Q_FP8:
        dq = tl.load(q_scale_ptr + b * stride_qs_b + h_kv)
    dk_pool = 1.0
    dv_pool = 1.0
    if KV_FP8:
        dk_pool = tl.load(k_scale_ptr + b * stride_ks_b + h_kv * stride_ks_h)
        dv_pool = tl.load(v_scale_ptr + b * stride_ks_b + h_kv * stride_ks_h)
    step_pool = qk_scale * dq * dk_pool
    cap_pool = cap_scale * dq * dk_pool
    if SOFTCAP:
        step_pool = 1.0

    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)

    # ---- source 1: the paged pool, keys [0, pool_len); splits cut this range
    big = 1 << 30
    lo0, _f0, _f1, hi0 = kv_block_range(offset + t_lo, offset + t_hi, pool_len, WL, WR, BLOCK_N)
    s_lo, s_hi = split_kv_range(lo0, hi0, split, num_splits, BLOCK_N)
    if t_hi >= t_lo:
        acc, m_i, l_i = _attend_source(
            acc, m_i, l_i, q, q_pos, offset + t_lo, offset + t_hi, s_lo, s_hi, pool_len, WL, WR,
            step_pool, cap_pool, cap_log2,
            k_ptr + h_kv * stride_kh, v_ptr + h_kv * stride_vh, table_ptr + b.to(tl.int64) * stride_tb, num_pages,
            table_width, rope_rows,
            stride_kp, stride_kt, stride_vp, stride_vt, cos_ptr, sin_ptr, stride_cos, 0,
            page_size, True, ROPE_POOL_K, ROTARY_DIM, INTERLEAVED, SOFTCAP, BLOCK_N, BLOCK_D, EXACT_DOT,
            TILE_IN_PAGE, PAGE_SHIFT)
    if KV_FP8:
        acc = acc * dv_pool  # pool values were raw e4m3: scale the pool's contribution once
    # ---- source 2: this request's new rows, keys [pool_len, kv_len) (relative index i = key − pool_len)
    if HAS_NEW:
        if (split == num_splits - 1) & (t_hi >= t_lo):
            step_new = qk_scale * dq
            if SOFTCAP:
                step_new = 1.0
            acc, m_i, l_i = _attend_source(
                acc, m_i, l_i, q, tok, t_lo, t_hi, 0, big, q_len, WL, WR, step_new, cap_scale * dq, cap_log2,
                kn_ptr + q_start.to(tl.int64) * stride_knt + h_kv * stride_knh,
                vn_ptr + q_start.to(tl.int64) * stride_vnt + h_kv * stride_vnh, table_ptr, num_pages,
                table_width, rope_rows,
                0, stride_knt, 0, stride_vnt, cos_ptr, sin_ptr, stride_cos, pool_len,
                page_size, False, ROPE_NEW_K, ROTARY_DIM, INTERLEAVED, SOFTCAP, BLOCK_N, BLOCK_D, EXACT_DOT,
                False, -1)

    # ---- epilogue
    if num_splits == 1:
        _finish_rows(acc, m_i, l_i, sinks_ptr, head, row_ok, o_ptr, q_start, tok, stride_ot, stride_oh, offs_d,
                     HAS_SINKS)
    else:
        o = normalize_rows(acc, l_i)
        lse2 = row_lse2(m_i, l_i)
        part = (slot.to(tl.int64) * num_kv_heads + h_kv) * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(part_o_ptr + part[:, None] * BLOCK_D + offs_d[None, :], o, mask=row_ok[:, None])
        tl.store(part_lse_ptr + part, lse2, mask=row_ok)
        if FUSED_COMBINE:
            tl.debug_barrier()  # every thread's partial is written before the arrival is released
            slot0 = slot - split
            counter = counter_ptr + slot0 * num_kv_heads + h_kv
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == num_splits - 1:  # the block's last split: every other partial is visible
                part0 = (slot0.to(tl.int64) * num_kv_heads + h_kv) * BLOCK_M + tl.arange(0, BLOCK_M)
                acc, m_i, l_i = merge_splits(part_o_ptr, part_lse_ptr, part0, num_kv_heads * BLOCK_M, num_splits,
                                             row_ok, offs_d, offs_d < BLOCK_D, BLOCK_D)
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
                _finish_rows(acc, m_i, l_i, sinks_ptr, head, row_ok, o_ptr, q_start, tok, stride_ot, stride_oh,
                             offs_d, HAS_SINKS)


@triton.jit
def _finish_rows(acc, m_i, l_i, sinks_ptr, head, row_ok, o_ptr, q_start, tok, stride_ot, stride_oh, offs_d,
                 HAS_SINKS: tl.constexpr):
    """Whole rows (unsplit or merged): sink, normalize, store in o's dtype."""
    if HAS_SINKS:
        sink2 = tl.load(sinks_ptr + head, mask=row_ok, other=0.0) * LOG2E_C
        acc, m_i, l_i = add_sink(acc, m_i, l_i, sink2)
    o = normalize_rows(acc, l_i)
    o_row = (q_start + tok).to(tl.int64) * stride_ot + head.to(tl.int64) * stride_oh
    tl.store(o_ptr + o_row[:, None] + offs_d[None, :], o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def paged_attention_combine_kernel(
    o_ptr, cu_q_ptr, combine_ptr, part_o_ptr, part_lse_ptr, sinks_ptr,
    num_kv_heads, group, q_uniform, stride_ot, stride_oh,
    HAS_SINKS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid: (n_combine · H_kv · BLOCK_M / BLOCK_R,). combine[i] = (b, m_block, first slot, num_splits): merge
    the splits' normalized partials of BLOCK_R of the block's rows by their base-2 lse, add the sink,
    normalize, store (row chunks keep the fp32 tile small: no spills at D = 256)."""
    pid = tl.program_id(0)
    chunks = BLOCK_M // BLOCK_R
    item = pid // (num_kv_heads * chunks)
    h_kv = (pid // chunks) % num_kv_heads
    r0 = (pid % chunks) * BLOCK_R
    b = tl.load(combine_ptr + item * 4 + 0)
    m_block = tl.load(combine_ptr + item * 4 + 1)
    slot0 = tl.load(combine_ptr + item * 4 + 2)
    num_splits = tl.load(combine_ptr + item * 4 + 3)
    if q_uniform > 0:
        q_start = b * q_uniform
        q_len = b * 0 + q_uniform
    else:
        q_start = tl.load(cu_q_ptr + b)
        q_len = tl.load(cu_q_ptr + b + 1) - q_start
    rows = m_block * BLOCK_M + r0 + tl.arange(0, BLOCK_R)
    tok = rows // group
    head = h_kv * group + rows % group
    row_ok = tok < q_len
    offs_d = tl.arange(0, BLOCK_D)
    part0 = (slot0.to(tl.int64) * num_kv_heads + h_kv) * BLOCK_M + r0 + tl.arange(0, BLOCK_R)
    acc, m_i, l_i = merge_splits(part_o_ptr, part_lse_ptr, part0, num_kv_heads * BLOCK_M, num_splits, row_ok,
                                 offs_d, offs_d < BLOCK_D, BLOCK_D)
    _finish_rows(acc, m_i, l_i, sinks_ptr, head, row_ok, o_ptr, q_start, tok, stride_ot, stride_oh, offs_d,
                 HAS_SINKS)
