"""The flash-attention forward kernel behind GQADenseFwd and GQAVarlenFwd, and its split-KV combine.

One program = one block of ``BLOCK_M`` *packed* query rows of one request and one KV head (× one KV
split). Packed row ``r`` is query token ``r // G`` and query head ``kv_head·G + r % G``: the G query heads
that share a KV head are processed together, so each K/V tile is read once for all of them (decode with
S_q = 1 becomes a ``[G, D] × [D, BLOCK_N]`` product), and the causal diagonal costs fewer masked tiles.

The key range of a block (``attention_fns.kv_block_range``: causal and window block skipping) is walked
in one loop; only tiles on the window edges, the causal diagonal or the ragged tail apply the mask.
Scores stay fp32; the softmax is base 2 with ``sm_scale·log2 e`` (× fp8 dequant scales, constant per
program) folded into ``exp2``.
With ``SPLIT`` the program handles one of ``num_splits`` chunks of the key range and writes an fp32
partial (rows normalized by their own sum, plus base-2 lse) that ``kernel_utils.split_combine`` merges, or,
with ``FUSED_COMBINE``, that the last of the block's splits to finish merges itself (a per-block arrival
counter, as CUTLASS's serial split-K semaphore: CTA barrier, then one release/acquire atomic at GPU scope),
which saves the combine launch; the counter is reset to 0 by that program for the next call.

``TMA`` (Hopper configs, 16-bit K/V without RoPE, ``BLOCK_D == HEAD_DIM``): K and V tiles come through
TMA descriptors built per program over exactly this request's and KV head's ``[kv_len, HEAD_DIM]`` rows
(rows past ``kv_len`` read as zeros, so another request's values never enter a tile); Triton pipelines
the loop over mbarriers instead of cp.async. The interpreter runs this path too (descriptor loads with the
same zero fill). No warp specialization: Triton 3.6's Hopper pass does not apply it to this loop as written,
and a form it did specialize (one query head per program, q by descriptor, every tile masked) computed wrong
results on the H200 (docs/perf/attn-core.md, tenth session).
"""

import triton
import triton.language as tl

from attnops.kernel_utils.attention_fns import (
    LOG2E_C,
    add_sink,
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
def _to_compute(x, COMPUTE_BF16: tl.constexpr):
    if COMPUTE_BF16:
        return x.to(tl.bfloat16)
    else:
        return x.to(tl.float16)


@triton.jit
def _attn_tiles(
    acc, m_i, l_i, q, q_pos,
    k_base, v_base, stride_kt, stride_vt, offs_d, d_mask,
    kv_len, WL, WR, lo, hi, full_lo, full_hi, step_scale, cap_scale, cap_log2,
    cos_ptr, sin_ptr, stride_rope, k_desc, v_desc,
    BLOCK_N: tl.constexpr, SOFTCAP: tl.constexpr, ROPE_K: tl.constexpr, ROTARY_DIM: tl.constexpr,
    INTERLEAVED: tl.constexpr, UPCAST_K: tl.constexpr,
    UPCAST_V: tl.constexpr, COMPUTE_BF16: tl.constexpr, EXACT_DOT: tl.constexpr, FP8_QK: tl.constexpr,
    TMA: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """Keys ``[lo, hi)`` (``lo`` a multiple of BLOCK_N) into the running ``(acc, m, l)``. Tiles inside
    ``[full_lo, full_hi)`` are visible from every row and skip the mask (a uniform branch per tile).

    One loop, not separate masked / unmasked loops: on sm_90 each extra pipelined loop raised register
    pressure into spills (ptxas, every config of the table); with the branch no config spills.
    RoPE (``rope_tile``): the cos / sin rows are contiguous loads that pipeline with K and V.
    ``TMA``: K / V tiles from the descriptors ``k_desc`` / ``v_desc`` (row ``start`` of the request's
    rows, zeros past ``kv_len``); else pointer loads masked at ``kv_len``."""
    offs_n = tl.arange(0, BLOCK_N)
    for start in tl.range(lo, hi, BLOCK_N, num_stages=NUM_STAGES):
        k_pos = start + offs_n
        k_rows = k_pos.to(tl.int64)
        n_mask = k_pos < kv_len
        kv_mask = n_mask[:, None] & d_mask[None, :]
        if TMA:
            k = k_desc.load([start, 0])
        else:
            k = tl.load(k_base + k_rows[:, None] * stride_kt + offs_d[None, :], mask=kv_mask, other=0.0)
        if ROPE_K:
            k = rope_tile(k, k_base + k_rows * stride_kt, kv_mask, cos_ptr, sin_ptr, k_pos, n_mask, stride_rope,
                          ROTARY_DIM, INTERLEAVED)
            k = _to_compute(k, COMPUTE_BF16)
        elif UPCAST_K:
            k = _to_compute(k, COMPUTE_BF16)
        if FP8_QK and not EXACT_DOT:
            # fp8 wgmma accumulates in reduced precision (~14 bits): promote to fp32 every 64 products
            # (128 for D >= 256, where 64 spills registers)
            qk = tl.dot(q, tl.trans(k), max_num_imprecise_acc=64 if q.shape[1] <= 128 else 128)
        else:
            qk = mma(q, tl.trans(k), None, EXACT_DOT)
        if SOFTCAP:
            qk = softcap_scores(qk, cap_scale, cap_log2)
        if (start < full_lo) | (start + BLOCK_N > full_hi):
            qk = tl.where(visible(q_pos, k_pos, kv_len, WL, WR), qk, float("-inf"))
        p, alpha, m_i, l_i = online_softmax_step(qk, m_i, l_i, step_scale)
        if TMA:
            v = v_desc.load([start, 0])
        else:
            v = tl.load(v_base + k_rows[:, None] * stride_vt + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST_V:
            v = _to_compute(v, COMPUTE_BF16)
        acc = mma(_to_compute(p, COMPUTE_BF16), v, acc * alpha[:, None], EXACT_DOT)
    return acc, m_i, l_i


@triton.jit
def gqa_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, ws_o_ptr, lse_ptr,
    cu_q_ptr, cu_kv_ptr, q_scale_ptr, k_scale_ptr, v_scale_ptr, cos_ptr, sin_ptr, sink_ptr, counter_ptr,
    S_q, S_kv, H, H_kv, G, num_m_blocks, num_splits, T_total,
    sm_scale_log2, cap_scale, cap_log2, WL, WR,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh,
    stride_rope,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    VARLEN: tl.constexpr, SPLIT: tl.constexpr, IS_FP8: tl.constexpr, FP8_DOT: tl.constexpr,
    COMPUTE_BF16: tl.constexpr, SOFTCAP: tl.constexpr, HAS_SINK: tl.constexpr,
    ROPE: tl.constexpr, ROTARY_DIM: tl.constexpr, INTERLEAVED: tl.constexpr, EXACT_DOT: tl.constexpr,
    ROPE_K: tl.constexpr, TMA: tl.constexpr, NUM_STAGES: tl.constexpr, FUSED_COMBINE: tl.constexpr,
    WRITE_LSE: tl.constexpr = False,
):
    """Grid ``(num_m_blocks, H_kv, B · num_splits)``; m-blocks run last-first (causal: longest first).

    Dense: lengths ``S_q / S_kv``, batch strides. Varlen (``VARLEN``): lengths from ``cu_q / cu_kv``,
    batch strides 0. Output ``o_ptr`` (out dtype, strides ``stride_o*``); with ``SPLIT`` the partials go to
    the fp32 workspace ``ws_o_ptr`` ``[num_splits, T_total, H, HEAD_DIM]`` and ``lse_ptr``
    ``[num_splits, T_total, H]``, and ``o_ptr`` is written only with ``FUSED_COMBINE`` (``counter_ptr``:
    ``B·H_kv·num_m_blocks`` int32 zeros).
    ``ROPE``: rotate q here; ``ROPE_K``: rotate each key tile in the key loop (without it, with ``ROPE``, the
    keys come rotated by ``rope_rows_kernel``: once per key instead of once per query block).
    ``EXACT_DOT``: interpreter only (fp32 operands, same products, BLAS speed). ``TMA``: see the module
    docstring (needs Triton's scratch allocator; ``NUM_STAGES`` is the key loop's pipeline depth either
    way). ``WRITE_LSE`` (not with
    ``SPLIT``): also store each row's base-2 lse (``-inf`` for empty rows) at ``lse_ptr``."""
    pid_m = num_m_blocks - 1 - tl.program_id(0)
    kv_head = tl.program_id(1)
    pid_z = tl.program_id(2)
    if SPLIT:
        b = pid_z // num_splits
        split = pid_z % num_splits
    else:
        b = pid_z
        split = 0
    if VARLEN:
        q_start = tl.load(cu_q_ptr + b)
        q_len = tl.load(cu_q_ptr + b + 1) - q_start
        kv_start = tl.load(cu_kv_ptr + b)
        kv_len = tl.load(cu_kv_ptr + b + 1) - kv_start
        tok0 = q_start
    else:
        q_start = b * 0
        q_len = S_q
        kv_start = b * 0
        kv_len = S_kv
        tok0 = b * S_q
    num_rows = q_len * G
    m_start = pid_m * BLOCK_M
    if m_start >= num_rows:
        return

    b64 = b.to(tl.int64)
    rows = m_start + tl.arange(0, BLOCK_M)
    t = rows // G
    head = kv_head * G + rows % G
    row_mask = rows < num_rows
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    q_pos = t + (kv_len - q_len)

    # ---- Q tile (rotated / kept fp8 / upcast), scale factors
    q_rows = b64 * stride_qb + (q_start + t).to(tl.int64) * stride_qt + head.to(tl.int64) * stride_qh
    q_mask = row_mask[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=q_mask, other=0.0)
    if ROPE:
        q = rope_tile(q, q_ptr + q_rows, q_mask, cos_ptr, sin_ptr, q_pos, row_mask & (q_pos >= 0), stride_rope,
                      ROTARY_DIM, INTERLEAVED)
        q = _to_compute(q, COMPUTE_BF16)
        if BLOCK_D != 256:  # through this block's own output rows (o has the compute dtype; see restage_operand)
            # D = 256: the offline sm_90 build spilled more and serialized R/2 with it; not restaged
            o_rows = b64 * stride_ob + (q_start + t).to(tl.int64) * stride_ot + head.to(tl.int64) * stride_oh
            q = restage_operand(q, o_ptr + o_rows[:, None] + offs_d[None, :], q_mask)
    elif IS_FP8 and not FP8_DOT:
        q = _to_compute(q, COMPUTE_BF16)
    UPCAST_K: tl.constexpr = IS_FP8 and not FP8_DOT
    FP8_QK: tl.constexpr = IS_FP8 and FP8_DOT and not ROPE
    UPCAST_V: tl.constexpr = IS_FP8

    dequant = 1.0
    v_scale = 1.0
    if IS_FP8:
        sc = b * H_kv + kv_head
        dequant = tl.load(q_scale_ptr + sc) * tl.load(k_scale_ptr + sc)
        v_scale = tl.load(v_scale_ptr + sc)
    if SOFTCAP:
        cap_scale = cap_scale * dequant
        step_scale = 1.0
    else:
        step_scale = sm_scale_log2 * dequant

    k_base = k_ptr + b64 * stride_kb + kv_start.to(tl.int64) * stride_kt + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + b64 * stride_vb + kv_start.to(tl.int64) * stride_vt + kv_head.to(tl.int64) * stride_vh
    if TMA:  # bounds = this request's rows (at least one row: a zero extent is not a valid TMA shape)
        rows_kv = tl.maximum(kv_len, 1)
        k_desc = tl.make_tensor_descriptor(k_base, shape=[rows_kv, HEAD_DIM], strides=[stride_kt, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[rows_kv, HEAD_DIM], strides=[stride_vt, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
    else:
        k_desc = k_base
        v_desc = v_base

    # ---- key range of this block (and split); tiles inside [full_lo, full_hi) need no mask
    last_row = tl.minimum(m_start + BLOCK_M, num_rows) - 1
    q_pos_lo = m_start // G + (kv_len - q_len)
    q_pos_hi = last_row // G + (kv_len - q_len)
    n_lo, full_lo, full_hi, n_hi = kv_block_range(q_pos_lo, q_pos_hi, kv_len, WL, WR, BLOCK_N)
    if SPLIT:
        n_lo, n_hi = split_kv_range(n_lo, n_hi, split, num_splits, BLOCK_N)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc, m_i, l_i = _attn_tiles(
        acc, m_i, l_i, q, q_pos, k_base, v_base, stride_kt, stride_vt, offs_d, d_mask,
        kv_len, WL, WR, n_lo, n_hi, full_lo, full_hi, step_scale, cap_scale, cap_log2,
        cos_ptr, sin_ptr, stride_rope, k_desc, v_desc,
        BLOCK_N, SOFTCAP, ROPE_K, ROTARY_DIM, INTERLEAVED, UPCAST_K, UPCAST_V, COMPUTE_BF16, EXACT_DOT, FP8_QK,
        TMA, NUM_STAGES,
    )

    # ---- epilogue
    if SPLIT:
        ws_rows = (split * T_total + tok0 + t).to(tl.int64) * H + head
        o = normalize_rows(acc, l_i) * v_scale
        tl.store(lse_ptr + ws_rows, row_lse2(m_i, l_i), mask=row_mask)
        tl.store(ws_o_ptr + ws_rows[:, None] * HEAD_DIM + offs_d[None, :], o, mask=q_mask)
        if FUSED_COMBINE:
            tl.debug_barrier()  # every thread's partial is written before the arrival is released
            counter = counter_ptr + (b * H_kv + kv_head) * num_m_blocks + pid_m
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == num_splits - 1:  # the block's last split: every other partial is visible
                ws_row0 = (tok0 + t).to(tl.int64) * H + head  # split 0's row of each packed row
                acc, m_i, l_i = merge_splits(ws_o_ptr, lse_ptr, ws_row0, T_total * H, num_splits, row_mask,
                                             offs_d, d_mask, HEAD_DIM)
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
                _write_rows(acc, m_i, l_i, 1.0, o_ptr, lse_ptr, sink_ptr, b64, t, head, row_mask, q_start, tok0,
                            S_q, H, T_total, offs_d, q_mask, stride_ob, stride_ot, stride_oh,
                            VARLEN, HAS_SINK, False)
    else:
        _write_rows(acc, m_i, l_i, v_scale, o_ptr, lse_ptr, sink_ptr, b64, t, head, row_mask, q_start, tok0,
                    S_q, H, T_total, offs_d, q_mask, stride_ob, stride_ot, stride_oh, VARLEN, HAS_SINK, WRITE_LSE)


@triton.jit
def _write_rows(acc, m_i, l_i, v_scale, o_ptr, lse_ptr, sink_ptr, b64, t, head, row_mask, q_start, tok0,
                S_q, H, T_total, offs_d, q_mask, stride_ob, stride_ot, stride_oh,
                VARLEN: tl.constexpr, HAS_SINK: tl.constexpr, WRITE_LSE: tl.constexpr):
    """Finish whole rows (unsplit, or merged): sink, optional base-2 lse, normalize, store in o's dtype."""
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + head, mask=row_mask, other=0.0) * LOG2E_C
        acc, m_i, l_i = add_sink(acc, m_i, l_i, sink2)
    if WRITE_LSE:  # base-2 lse for the backward (GQABwd): dense [B, H, S_q], varlen [H, T_total]
        if VARLEN:
            lse_rows = head.to(tl.int64) * T_total + tok0 + t
        else:
            lse_rows = (b64 * H + head) * S_q + t
        tl.store(lse_ptr + lse_rows, row_lse2(m_i, l_i), mask=row_mask)
    o = normalize_rows(acc, l_i) * v_scale
    o_rows = b64 * stride_ob + (q_start + t).to(tl.int64) * stride_ot + head.to(tl.int64) * stride_oh
    tl.store(o_ptr + o_rows[:, None] + offs_d[None, :], o.to(o_ptr.dtype.element_ty), mask=q_mask)


@triton.jit
def rope_rows_kernel(
    k_ptr, out_ptr, cu_kv_ptr, pos_off_ptr, cu_keys_ptr, cos_ptr, sin_ptr,
    S_kv, S_keys, n_pos,
    stride_kb, stride_kt, stride_kh, stride_ob, stride_ot, stride_oh, stride_rope,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, VARLEN: tl.constexpr,
    ROTARY_DIM: tl.constexpr, INTERLEAVED: tl.constexpr, POS_OFFSET: tl.constexpr, QUERY_ROWS: tl.constexpr,
):
    """Grid ``(cdiv(max rows, BLOCK_T), heads, B)``: RoPE of every row of a request at its position, written to
    ``out`` in out's dtype. Keys: row i at position i (``0 .. kv_len − 1``, spec README §5), for prefill shapes
    where the key loop would otherwise rotate each key once per query block; with ``POS_OFFSET``, row i of
    request b at ``pos_off[b] + i`` (GQAPrefillPagedWithKVCacheFwd's queries, after the cached tokens); with
    ``QUERY_ROWS``, the rows are a request's queries at the bottom-right positions ``kv_len − q_len + i`` (its key
    count from ``cu_keys`` (varlen) or ``S_keys``), rows at negative positions passed through as the flash
    kernel's in-loop rotation does; rows at positions past the ``n_pos`` table rows pass through too (no row of the
    tables is read out of bounds on any input)."""
    b = tl.program_id(2)
    h = tl.program_id(1).to(tl.int64)
    if VARLEN:
        start = tl.load(cu_kv_ptr + b)
        n = tl.load(cu_kv_ptr + b + 1) - start
    else:
        start = b * 0
        n = S_kv
    pos = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    if tl.program_id(0) * BLOCK_T < n:
        b64 = b.to(tl.int64)
        rows_ok = pos < n
        offs_d = tl.arange(0, BLOCK_D)
        mask = rows_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
        rows = (start + pos).to(tl.int64)
        src = k_ptr + b64 * stride_kb + rows * stride_kt + h * stride_kh
        x = tl.load(src[:, None] + offs_d[None, :], mask=mask, other=0.0)
        if QUERY_ROWS:
            if VARLEN:
                keys = tl.load(cu_keys_ptr + b + 1) - tl.load(cu_keys_ptr + b)
            else:
                keys = S_keys
            at = pos + (keys - n)
        elif POS_OFFSET:
            at = pos + tl.load(pos_off_ptr + b)
        else:
            at = pos
        y = rope_tile(x, src, mask, cos_ptr, sin_ptr, at, rows_ok & (at >= 0) & (at < n_pos), stride_rope, ROTARY_DIM,
                   INTERLEAVED)
        dst = out_ptr + b64 * stride_ob + rows * stride_ot + h * stride_oh
        tl.store(dst[:, None] + offs_d[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
