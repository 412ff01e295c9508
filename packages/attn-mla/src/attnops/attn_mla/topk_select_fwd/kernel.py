"""Top-k positions of a windowed score row: threshold from a sample, one compaction pass, exact select.

A persistent program walks rows ``r = (b·S + s)·G + g``. For a window of ``n`` positions:

* ``n <= topk``: every position, padded with ``S_kv``.
* ``n <= CAP``: the whole window fits in registers: exact selection there.
* otherwise: the ``SAMPLES`` keys of 128 evenly spaced 32-byte groups give a threshold expected to keep
  ``SLACK × topk`` keys; one pass over the row compacts the keys at or above it (position order kept)
  into a per-program scratch of ``CAP`` slots; exact selection runs on those in registers. When the
  sample misjudges (fewer than ``topk`` or more than ``CAP`` survivors: heavy ties, adversarial rows) the
  row falls back to a bitwise threshold search over the row in memory (32 counting passes), still exact.

Exact selection = the largest key ``T`` with ``#{key >= T} >= topk`` (32-step bitwise search on counts),
then every key ``> T`` plus the lowest-position keys ``== T`` up to ``topk`` (ties to the lower position).
Keys are the fp32 bits mapped to an order-preserving int32 (−0.0 folded onto +0.0), so the select is
exact and −inf is an ordinary, eligible value.
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
def _kth_key_in_registers(keys, valid, k):
    """Largest int32 T with #{valid keys >= T} >= k (k >= 1 and at most the number of valid keys)."""
    t_u = tl.zeros([], dtype=tl.int64)  # T + 2^31, built from the top bit down
    for i in range(32):  # a runtime loop: unrolled, 32 reductions over CAP keys bloat the kernel
        cand_u = t_u + (tl.full([], 1, tl.int64) << (31 - i))
        cand = (cand_u + -2147483648).to(tl.int32)
        count = tl.sum(((keys >= cand) & valid).to(tl.int32), axis=0)
        t_u = tl.where(count >= k, cand_u, t_u)
    return (t_u + -2147483648).to(tl.int32)


@triton.jit
def _select_in_registers(keys, pos, valid, k, out_row_ptr):
    """Write the positions of the k largest valid keys (ties: lowest position = earliest slot)."""
    kth = _kth_key_in_registers(keys, valid, k)
    gt = valid & (keys > kth)
    eq = valid & (keys == kth)
    room = k - tl.sum(gt.to(tl.int32), axis=0)
    take = gt | (eq & (tl.cumsum(eq.to(tl.int32), axis=0) <= room))
    slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
    tl.store(out_row_ptr + slot, pos, mask=take)


@triton.jit
def _select_in_memory(row_ptr, stride_t, lo, hi, k, out_row_ptr, BLOCK: tl.constexpr):
    """Exact select over a row left in memory: 32 counting passes for T, one pass to write."""
    offs = tl.arange(0, BLOCK)
    t_u = tl.zeros([], dtype=tl.int64)
    for i in range(32):
        step = tl.full([], 1, tl.int64) << (31 - i)
        cand = (t_u + step + -2147483648).to(tl.int32)
        count = tl.zeros([], dtype=tl.int32)
        for t0 in range(lo, hi, BLOCK):
            t = t0 + offs
            m = t < hi
            key = _ordered_key(tl.load(row_ptr + t.to(tl.int64) * stride_t, mask=m, other=0.0))
            count += tl.sum(((key >= cand) & m).to(tl.int32), axis=0)
        t_u = tl.where(count >= k, t_u + step, t_u)
    kth = (t_u + -2147483648).to(tl.int32)
    n_gt = tl.zeros([], dtype=tl.int32)
    for t0 in range(lo, hi, BLOCK):
        t = t0 + offs
        m = t < hi
        key = _ordered_key(tl.load(row_ptr + t.to(tl.int64) * stride_t, mask=m, other=0.0))
        n_gt += tl.sum(((key > kth) & m).to(tl.int32), axis=0)
    room = k - n_gt
    seen_eq = tl.zeros([], dtype=tl.int32)
    written = tl.zeros([], dtype=tl.int32)
    for t0 in range(lo, hi, BLOCK):
        t = t0 + offs
        m = t < hi
        key = _ordered_key(tl.load(row_ptr + t.to(tl.int64) * stride_t, mask=m, other=0.0))
        eq = m & (key == kth)
        take = (m & (key > kth)) | (eq & (seen_eq + tl.cumsum(eq.to(tl.int32), axis=0) <= room))
        slot = written + tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + slot, t, mask=take)
        seen_eq += tl.sum(eq.to(tl.int32), axis=0)
        written += tl.sum(take.to(tl.int32), axis=0)


@triton.jit
def topk_select_kernel(
    score_ptr, starts_ptr, ends_ptr, out_ptr, scratch_key_ptr, scratch_pos_ptr,
    num_rows, S, G, S_kv, topk,
    stride_sb, stride_ss, stride_st, stride_sg,
    stride_wb, stride_ws, stride_eb, stride_es,
    BLOCK: tl.constexpr,  # positions per step of a pass over the row
    CAP: tl.constexpr,  # candidate slots held in registers (power of two, >= topk unless FULL_ONLY)
    SAMPLES: tl.constexpr,  # sampled keys per row (multiple of 8, power of two)
    SLACK_NUM: tl.constexpr,  # the sample threshold aims at SLACK_NUM / SLACK_DEN × topk survivors
    SLACK_DEN: tl.constexpr,
    FULL_ONLY: tl.constexpr,  # topk too large for CAP: every row too long for the pad path goes to memory
):
    tl.static_assert(SAMPLES % 8 == 0)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    scratch_key = scratch_key_ptr + pid.to(tl.int64) * CAP
    scratch_pos = scratch_pos_ptr + pid.to(tl.int64) * CAP
    cap_offs = tl.arange(0, CAP)
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
            elif FULL_ONLY:
                _select_in_memory(row_ptr, stride_st, lo, hi, topk, out_row, BLOCK)
            elif n <= CAP:
                valid = cap_offs < n
                pos = lo + cap_offs
                keys = _ordered_key(tl.load(row_ptr + pos.to(tl.int64) * stride_st, mask=valid, other=0.0))
                _select_in_registers(keys, pos, valid, topk, out_row)
            else:
                # Threshold from the sample: the r-th largest of SAMPLES keys, r ≈ SLACK × topk × SAMPLES / n.
                so = tl.arange(0, SAMPLES)
                # 8 contiguous fp32 per group: one 32-byte sector each.
                spos = lo + ((so // 8).to(tl.int64) * (n - 8)) // (SAMPLES // 8 - 1) + so % 8
                skeys = _ordered_key(tl.load(row_ptr + spos * stride_st))
                ranked = tl.sort(skeys, descending=True)
                rank = (SLACK_NUM * topk.to(tl.int64) * SAMPLES + SLACK_DEN * n - 1) // (SLACK_DEN * n)
                rank = tl.minimum(tl.maximum(rank, 1), SAMPLES)
                threshold = tl.sum(tl.where(so == rank - 1, ranked, 0), axis=0)
                # Compaction: keys >= threshold, in position order, into the program's scratch.
                count = tl.zeros([], dtype=tl.int32)
                for t0 in range(lo, hi, BLOCK):
                    t = t0 + blk
                    m = t < hi
                    key = _ordered_key(tl.load(row_ptr + t.to(tl.int64) * stride_st, mask=m, other=0.0))
                    keep = m & (key >= threshold)
                    slot = count + tl.cumsum(keep.to(tl.int32), axis=0) - 1
                    w = keep & (slot < CAP)
                    tl.store(scratch_key + slot, key, mask=w)
                    tl.store(scratch_pos + slot, t, mask=w)
                    count += tl.sum(keep.to(tl.int32), axis=0)
                tl.debug_barrier()  # scratch written by all threads before any thread reads it back
                if (count >= topk) & (count <= CAP):
                    valid = cap_offs < count
                    keys = tl.load(scratch_key + cap_offs, mask=valid, other=0)
                    pos = tl.load(scratch_pos + cap_offs, mask=valid, other=0)
                    _select_in_registers(keys, pos, valid, topk, out_row)
                else:
                    _select_in_memory(row_ptr, stride_st, lo, hi, topk, out_row, BLOCK)
                tl.debug_barrier()  # reads done before the next row overwrites the scratch
