"""Top-k positions of a windowed score row: threshold from a sample, one compaction pass, exact select.

A persistent program walks rows ``r = (b·S + s)·G + g``. For a window of ``n`` positions:

* ``n <= topk``: every position, padded with ``S_kv``.
* ``n <= CAP``: exact selection straight over the window (a few KB, cache-resident after the first pass).
* otherwise: the ``SAMPLES`` keys of ``SAMPLES / 8`` evenly spaced 32-byte groups give a threshold expected
  to keep ``SLACK × topk`` keys; one pass over the row compacts the keys at or above it (position order
  kept) into a per-program scratch of ``CAP`` slots, and the exact selection runs over those. When the
  sample misjudges (fewer than ``topk`` or more than ``CAP`` survivors: heavy ties, adversarial rows) the
  exact selection runs over the whole row instead, still exact.

Exact selection = the largest key ``T`` with ``#{key >= T} >= topk`` (32-step bitwise search on counts),
then every key ``> T`` plus the lowest-position keys ``== T`` up to ``topk`` (ties to the lower position).
Keys are the fp32 bits mapped to an order-preserving int32 (−0.0 folded onto +0.0), so the select is
exact and −inf is an ordinary, eligible value. Only ``BLOCK``-sized tensors live in registers, so several
programs share an SM and their loads overlap.
"""

import triton
import triton.language as tl


@triton.jit
def _ordered_key(x):
    """fp32 -> int32 whose signed order is the float order (+0.0 and −0.0 equal; −inf lowest non-NaN)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = tl.where(x == 0.0, 0, bits)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _keys_at(j, m, row_ptr, stride_t, lo, skey_ptr, spos_ptr, FROM_SCRATCH: tl.constexpr):
    """(keys, positions) of candidates ``j`` (masked by ``m``): scratch slots, or window offsets."""
    if FROM_SCRATCH:
        key = tl.load(skey_ptr + j, mask=m, other=0)
        pos = tl.load(spos_ptr + j, mask=m, other=0)
    else:
        pos = lo + j
        key = _ordered_key(tl.load(row_ptr + pos.to(tl.int64) * stride_t, mask=m, other=0.0))
    return key, pos


@triton.jit
def _select(row_ptr, stride_t, lo, skey_ptr, spos_ptr, n, k, out_row_ptr, BLOCK: tl.constexpr,
            FROM_SCRATCH: tl.constexpr):
    """Write the positions of the k largest of n candidates (k <= n): 32 counting passes find the k-th
    key T, one pass counts keys > T, one pass writes (ties at T to the lowest positions)."""
    offs = tl.arange(0, BLOCK)
    t_u = tl.zeros([], dtype=tl.int64)  # T + 2^31, built from the top bit down
    for i in range(32):
        step = tl.full([], 1, tl.int64) << (31 - i)
        cand = (t_u + step + -2147483648).to(tl.int32)
        count = tl.zeros([], dtype=tl.int32)
        for j0 in range(0, n, BLOCK):
            j = j0 + offs
            m = j < n
            key, pos = _keys_at(j, m, row_ptr, stride_t, lo, skey_ptr, spos_ptr, FROM_SCRATCH)
            count += tl.sum(((key >= cand) & m).to(tl.int32), axis=0)
        t_u = tl.where(count >= k, t_u + step, t_u)
    kth = (t_u + -2147483648).to(tl.int32)
    n_gt = tl.zeros([], dtype=tl.int32)
    for j0 in range(0, n, BLOCK):
        j = j0 + offs
        m = j < n
        key, pos = _keys_at(j, m, row_ptr, stride_t, lo, skey_ptr, spos_ptr, FROM_SCRATCH)
        n_gt += tl.sum(((key > kth) & m).to(tl.int32), axis=0)
    room = k - n_gt
    seen_eq = tl.zeros([], dtype=tl.int32)
    written = tl.zeros([], dtype=tl.int32)
    for j0 in range(0, n, BLOCK):
        j = j0 + offs
        m = j < n
        key, pos = _keys_at(j, m, row_ptr, stride_t, lo, skey_ptr, spos_ptr, FROM_SCRATCH)
        eq = m & (key == kth)
        take = (m & (key > kth)) | (eq & (seen_eq + tl.cumsum(eq.to(tl.int32), axis=0) <= room))
        slot = written + tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + slot, pos, mask=take)
        seen_eq += tl.sum(eq.to(tl.int32), axis=0)
        written += tl.sum(take.to(tl.int32), axis=0)


@triton.jit
def topk_select_kernel(
    score_ptr, starts_ptr, ends_ptr, out_ptr, scratch_key_ptr, scratch_pos_ptr,
    num_rows, S, G, S_kv, topk,
    stride_sb, stride_ss, stride_st, stride_sg,
    stride_wb, stride_ws, stride_eb, stride_es,
    BLOCK: tl.constexpr,  # positions per step of a pass
    CAP: tl.constexpr,  # candidate slots per program (scratch); windows up to CAP are selected directly
    SAMPLES: tl.constexpr,  # sampled keys per long row (multiple of 8, power of two)
    SLACK_NUM: tl.constexpr,  # the sample threshold aims at SLACK_NUM / SLACK_DEN × topk survivors
    SLACK_DEN: tl.constexpr,
    FULL_ONLY: tl.constexpr,  # topk too large for CAP: every row longer than topk is selected directly
):
    tl.static_assert(SAMPLES % 8 == 0)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    scratch_key = scratch_key_ptr + pid.to(tl.int64) * CAP
    scratch_pos = scratch_pos_ptr + pid.to(tl.int64) * CAP
    blk = tl.arange(0, BLOCK)
    for r0 in range(0, num_rows, nprog):
        r = r0 + pid  # a tensor on both the GPU and the interpreter
        if r < num_rows:
            g = r % G
            bs = r // G
            s = bs % S
            b = bs // S
            lo = tl.maximum(tl.load(starts_ptr + b.to(tl.int64) * stride_wb + s * stride_ws), 0)
            hi = tl.minimum(tl.load(ends_ptr + b.to(tl.int64) * stride_eb + s * stride_es), S_kv)
            n = tl.maximum(hi - lo, 0)
            row_ptr = score_ptr + b.to(tl.int64) * stride_sb + s.to(tl.int64) * stride_ss + g.to(tl.int64) * stride_sg
            out_row = out_ptr + r.to(tl.int64) * topk
            if n <= topk:
                for j0 in range(0, topk, BLOCK):
                    j = j0 + blk
                    tl.store(out_row + j, tl.where(j < n, lo + j, S_kv), mask=j < topk)
            elif FULL_ONLY or n <= CAP:
                _select(row_ptr, stride_st, lo, scratch_key, scratch_pos, n, topk, out_row, BLOCK, False)
            else:
                # Threshold: the r-th largest of SAMPLES keys (8 contiguous per group: one 32-byte sector),
                # r ≈ SLACK × topk × SAMPLES / n.
                so = tl.arange(0, SAMPLES)
                spos = lo + ((so // 8).to(tl.int64) * (n - 8)) // (SAMPLES // 8 - 1) + so % 8
                ranked = tl.sort(_ordered_key(tl.load(row_ptr + spos * stride_st)), descending=True)
                # (int64 via a zero: a launch with topk == 1 makes topk a constant, which has no .to)
                rank = (SLACK_NUM * SAMPLES * (tl.zeros([], tl.int64) + topk) + SLACK_DEN * n - 1) // (SLACK_DEN * n)
                rank = tl.minimum(tl.maximum(rank, 1), SAMPLES)
                threshold = tl.sum(tl.where(so == rank - 1, ranked, 0), axis=0)
                # Compaction: keys >= threshold, in position order, into the program's scratch. The next
                # step's scores are loaded before this step's scan (a register double buffer): Triton does
                # not software-pipeline loads that feed no dot.
                count = tl.zeros([], dtype=tl.int32)
                t = lo + blk
                x = tl.load(row_ptr + t.to(tl.int64) * stride_st, mask=t < hi, other=0.0)
                for t0 in range(lo, hi, BLOCK):
                    t = t0 + blk
                    m = t < hi
                    t_next = t + BLOCK
                    x_next = tl.load(row_ptr + t_next.to(tl.int64) * stride_st, mask=t_next < hi, other=0.0)
                    key = _ordered_key(x)
                    x = x_next
                    keep = m & (key >= threshold)
                    slot = count + tl.cumsum(keep.to(tl.int32), axis=0) - 1
                    w = keep & (slot < CAP)
                    tl.store(scratch_key + slot, key, mask=w)
                    tl.store(scratch_pos + slot, t, mask=w)
                    count += tl.sum(keep.to(tl.int32), axis=0)
                tl.debug_barrier()  # scratch written by all threads before any thread reads it back
                if (count >= topk) & (count <= CAP):
                    _select(row_ptr, stride_st, lo, scratch_key, scratch_pos, count, topk, out_row, BLOCK, True)
                else:
                    _select(row_ptr, stride_st, lo, scratch_key, scratch_pos, n, topk, out_row, BLOCK, False)
                tl.debug_barrier()  # reads done before the next row overwrites the scratch
