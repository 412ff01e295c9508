"""Top-k positions of a windowed score row (v2): sampled threshold, one pipelined compaction read, exact
select in registers.

A persistent program walks rows ``r = (b·S + s)·G + g``. For a window of ``n`` positions:

* ``n <= topk``: every position, padded with ``S_kv``.
* ``n <= CAP``: the window's keys go straight into a ``CAP``-wide register tensor; exact select there.
* otherwise (the prefill rows: 65536 keys, one read is the floor):
  1. threshold: ``SAMPLES`` keys (``SAMPLES / 8`` sector-aligned groups of 8, spread over the window);
     the rank-``r`` sampled key, ``r`` aimed at ``SLACK × topk`` survivors, found by the register select.
  2. one read of the row: fully in-window ``BLOCK`` tiles in a ``tl.range(num_stages=STAGES)`` loop with
     unmasked loads (Triton turns them into 16-byte ``cp.async`` copies ``STAGES - 1`` tiles ahead), the
     partial tile after it masked; scores ``>= threshold`` (float compare) are compacted, position order
     kept, into the program's scratch of ``CAP`` int64 slots (fp32 bits << 32 | position; L2-resident,
     ~2.25·topk·8 B). Tiles are [BLOCK / 4, 4] so that the slot scan is mostly in-thread.
  3. ``topk <= survivors <= CAP``: the survivors' keys are loaded once into the ``CAP``-wide register
     tensor and selected exactly there.
  Sample misjudged: ``survivors > CAP`` with fewer than ``topk`` keys strictly above the threshold (a tie
  at the threshold, e.g. many equal scores) -> the threshold is the k-th key: one counting and one writing
  read. Anything else (fewer than ``topk`` survivors, adversarial rows) -> the whole-row select below.

Register select over ``keys`` (``valid`` marks real entries): the largest key ``T`` with
``#{key >= T} >= k`` by a 32-step bitwise search on counts (each step one compare + one CTA reduction over
registers: no memory traffic) or, with ``RADIX``, 4 steps of 8 bits (each a 256-bin histogram of the next
digit over the keys that match the digits found so far, and a scan of the bins: 4 dependent CTA-wide steps
instead of 32), then every key ``> T`` plus the lowest-position keys ``== T`` up to ``k``, written in ascending
position order (ties go to the lower position).

Whole-row select (``FULL_ONLY`` rows, sample misses): the same search with every count a read of the
window (34 reads; exact, slow, rare on real scores).

Split path (``topk_split_*_kernel``: few long rows, e.g. the decode row of 16384 keys, where one program per
row leaves the GPU idle and spends its time on dependent CTA reductions): grid (rows, chunks), two launches.

1. each program adds its chunk's keys, one relaxed atomic each, into the row's histogram of their top
   ``HIST_BITS`` bits;
2. each program finds the threshold bin ``b`` (the bin of the topk-th largest key, from the row histogram's
   suffix sums) and writes its keys above ``b`` straight to the output and its keys in ``b`` to the row's
   candidate buffer (slots from two per-row atomic counters; no order). The last program of the row to
   arrive (acq_rel counter, as the MLA split merge) selects the remaining ``topk - above`` among the
   candidates in registers (the bitwise search starts below the bin's known top bits; keys equal to the k-th
   go to the lowest positions by a search over their positions, so the buffer needs no order), or, with more
   candidates than slots, runs the whole-row select; then it zeroes the row's histogram and counters for the
   next call.

Keys are the fp32 bits mapped to an order-preserving int32 (−0.0 folded onto +0.0), so the select is exact
and −inf is an ordinary, eligible value. The compaction compares floats, so a NaN is never a survivor of
step 2 (NaN order is unspecified by the spec).
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
def _key_float(key):
    """The float of an ordered key (inverse of ``_ordered_key``; key 0 is +0.0)."""
    bits = tl.where(key < 0, key ^ 0x7FFFFFFF, key)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _kth_largest(keys, k, prefix, PREFIX_BITS: tl.constexpr):
    """Largest key T with #{keys >= T} >= k: bitwise steps, each a compare and a CTA-wide sum over the
    register tensor. Every candidate tested is > int32 min, so entries set to int32 min (padding) never
    count; T = int32 min means fewer than k keys lie above it. ``prefix``: T + 2^31 with only its top
    ``PREFIX_BITS`` bits set, when every real key is known to share them (the split path's threshold bin):
    the search then takes 32 - PREFIX_BITS steps instead of 32."""
    t_u = tl.zeros([], dtype=tl.int64) + prefix  # T + 2^31, built from the top bit down
    for i in range(PREFIX_BITS, 32):
        step = tl.full([], 1, tl.int64) << (31 - i)
        cand = (t_u + step + -2147483648).to(tl.int32)
        count = tl.sum((keys >= cand).to(tl.int32), axis=0)
        t_u = tl.where(count >= k, t_u + step, t_u)
    return (t_u + -2147483648).to(tl.int32)


@triton.jit
def _kth_largest_radix(keys, k):
    """``_kth_largest`` by 8-bit digits, most significant first: the bins are counted over the keys whose
    higher digits equal those chosen so far, and the chosen digit is the largest whose count of keys at or
    above it still reaches the remaining rank. The top digit is the signed top byte shifted to 0..255 (so the
    int32 order holds without an unsigned copy of the keys). Callers pass at least k real keys; padding
    (int32 min, the lowest key) then never reaches rank k."""
    bins = tl.arange(0, 256)
    rank = tl.zeros([], dtype=tl.int32) + k
    kth = tl.zeros([], dtype=tl.int32)
    for i in tl.static_range(4):
        if i == 0:
            hist = tl.histogram((keys >> 24) + 128, 256)
        else:
            hist = tl.histogram((keys >> (24 - 8 * i)) & 0xFF, 256,
                                mask=(keys >> (32 - 8 * i)) == (kth >> (32 - 8 * i)))
        at_or_above = tl.cumsum(hist, axis=0, reverse=True)
        d = tl.max(tl.where(at_or_above >= rank, bins, 0), axis=0)
        rank -= tl.sum(tl.where(bins > d, hist, 0), axis=0)
        if i == 0:
            kth = (d - 128) << 24
        else:
            kth = kth | (d << (24 - 8 * i))
    return kth


@triton.jit
def _keys_at(j, m, row_ptr, stride_t, lo, scratch_ptr, FROM_SCRATCH: tl.constexpr):
    """(keys, positions) of candidates ``j`` (masked by ``m``): scratch slots (fp32 bits << 32 | position),
    or window offsets."""
    if FROM_SCRATCH:
        v = tl.load(scratch_ptr + j, mask=m, other=0)
        x = (v >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        pos = (v & 0xFFFFFFFF).to(tl.int32)
    else:
        pos = lo + j
        x = tl.load(row_ptr + pos.to(tl.int64) * stride_t, mask=m, other=0.0)
    return _ordered_key(x), pos


@triton.jit
def _write_selected(row_ptr, stride_t, lo, scratch_ptr, n, kth, room, out_row_ptr, BLOCK: tl.constexpr,
                    FROM_SCRATCH: tl.constexpr):
    """Write, in candidate (= position) order, every key > kth and the first ``room`` keys == kth."""
    offs = tl.arange(0, BLOCK)
    seen_eq = tl.zeros([], dtype=tl.int32)
    written = tl.zeros([], dtype=tl.int32)
    for j0 in range(0, n, BLOCK):
        j = j0 + offs
        m = j < n
        key, pos = _keys_at(j, m, row_ptr, stride_t, lo, scratch_ptr, FROM_SCRATCH)
        eq = m & (key == kth)
        take = (m & (key > kth)) | (eq & (seen_eq + tl.cumsum(eq.to(tl.int32), axis=0) <= room))
        slot = written + tl.cumsum(take.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + slot, pos, mask=take)
        seen_eq += tl.sum(eq.to(tl.int32), axis=0)
        written += tl.sum(take.to(tl.int32), axis=0)


@triton.jit
def _select_registers(row_ptr, stride_t, lo, scratch_ptr, n, k, out_row_ptr, CAP: tl.constexpr,
                      BLOCK: tl.constexpr, FROM_SCRATCH: tl.constexpr, RADIX: tl.constexpr):
    """Exact top-k of n <= CAP candidates in position order: keys loaded once into a CAP-wide register
    tensor."""
    j = tl.arange(0, CAP)
    valid = j < n
    keys, _ = _keys_at(j, valid, row_ptr, stride_t, lo, scratch_ptr, FROM_SCRATCH)
    keys = tl.where(valid, keys, -2147483648)
    if RADIX:
        kth = _kth_largest_radix(keys, k)
    else:
        kth = _kth_largest(keys, k, 0, 0)
    n_gt = tl.sum((keys > kth).to(tl.int32), axis=0)  # padding (int32 min) is never > kth
    _write_selected(row_ptr, stride_t, lo, scratch_ptr, n, kth, k - n_gt, out_row_ptr, BLOCK, FROM_SCRATCH)


@triton.jit
def _count_window(row_ptr, stride_t, lo, n, kth, STRICT: tl.constexpr, BLOCK: tl.constexpr):
    """#{window keys > kth} (STRICT) or #{window keys >= kth}: one read of the window."""
    offs = tl.arange(0, BLOCK)
    count = tl.zeros([], dtype=tl.int32)
    for j0 in range(0, n, BLOCK):
        j = j0 + offs
        m = j < n
        key = _ordered_key(tl.load(row_ptr + (lo + j).to(tl.int64) * stride_t, mask=m, other=0.0))
        if STRICT:
            count += tl.sum((m & (key > kth)).to(tl.int32), axis=0)
        else:
            count += tl.sum((m & (key >= kth)).to(tl.int32), axis=0)
    return count


@triton.jit
def _select_window(row_ptr, stride_t, lo, n, k, out_row_ptr, BLOCK: tl.constexpr):
    """Exact top-k over the whole window with every count a read of it (34 reads)."""
    t_u = tl.zeros([], dtype=tl.int64)
    for i in range(32):
        step = tl.full([], 1, tl.int64) << (31 - i)
        cand = (t_u + step + -2147483648).to(tl.int32)
        count = _count_window(row_ptr, stride_t, lo, n, cand, False, BLOCK)
        t_u = tl.where(count >= k, t_u + step, t_u)
    kth = (t_u + -2147483648).to(tl.int32)
    n_gt = _count_window(row_ptr, stride_t, lo, n, kth, True, BLOCK)
    _write_selected(row_ptr, stride_t, lo, row_ptr, n, kth, k - n_gt, out_row_ptr, BLOCK, False)


@triton.jit
def _tile_slots(keep, base):
    """Slot (from ``base``, position order) of each kept entry of a [R, 4] tile, and the kept count per row
    (summed by the caller after its store: summed before it, ptxas spills 8-16 B more in the persistent kernel,
    offline sm_90). Rows of 4 contiguous positions sit in one thread: the scan is 3 adds in-thread, then one
    scan over the row totals (a warp scan per thread instead of one per element)."""
    keep_i = keep.to(tl.int32)
    tot = tl.sum(keep_i, axis=1)
    slot = base + (tl.cumsum(tot, axis=0) - tot)[:, None] + tl.cumsum(keep_i, axis=1) - 1
    return slot, tot


@triton.jit
def _compact_tile(x, t, keep, count, scratch_ptr, CAP: tl.constexpr):
    """Append the kept (fp32 bits << 32 | position) of one [R, 4] tile to the scratch in position order."""
    slot, tot = _tile_slots(keep, count)
    packed = (x.to(tl.int32, bitcast=True).to(tl.int64) << 32) | t.to(tl.int64)  # t >= 0
    tl.store(scratch_ptr + slot, packed, mask=keep & (slot < CAP))
    return count + tl.sum(tot, axis=0)


@triton.jit
def _row_window(r, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss, stride_sg,
                stride_wb, stride_ws, stride_eb, stride_es):
    """Row r = (b·S + s)·G + g: its window [lo, hi) clipped to [0, S_kv), n = max(hi - lo, 0) positions, and
    its score row pointer."""
    g = r % G
    bs = r // G
    s = bs % S
    b = bs // S
    lo = tl.maximum(tl.load(starts_ptr + b.to(tl.int64) * stride_wb + s * stride_ws), 0)
    hi = tl.minimum(tl.load(ends_ptr + b.to(tl.int64) * stride_eb + s * stride_es), S_kv)
    n = tl.maximum(hi - lo, 0)
    row_ptr = score_ptr + b.to(tl.int64) * stride_sb + s.to(tl.int64) * stride_ss + g.to(tl.int64) * stride_sg
    return lo, hi, n, row_ptr


@triton.jit
def _write_short_window(out_row_ptr, lo, n, topk, S_kv, blk, BLOCK: tl.constexpr):
    """A window of n <= topk positions: every one of them, then S_kv padding (``blk``: tl.arange(0, BLOCK),
    taken from the caller: the persistent kernel builds it once, outside its row loop, which ptxas allocates
    16-40 B less spill for, offline sm_90)."""
    for j0 in range(0, topk, BLOCK):
        j = j0 + blk
        tl.store(out_row_ptr + j, tl.where(j < n, lo + j, S_kv), mask=j < topk)


@triton.jit
def topk_select_kernel(
    score_ptr, starts_ptr, ends_ptr, out_ptr, scratch_ptr,
    num_rows, S, G, S_kv, topk,
    stride_sb, stride_ss, stride_st, stride_sg,
    stride_wb, stride_ws, stride_eb, stride_es,
    BLOCK: tl.constexpr,  # positions per tile of the compaction read (and per step of the other loops)
    STAGES: tl.constexpr,  # software-pipeline depth of the compaction read (cp.async; 1 = none)
    CAP: tl.constexpr,  # register-select width = scratch slots per program; windows up to CAP go direct
    SAMPLES: tl.constexpr,  # sampled keys per long row (multiple of 8, power of two, >= 16)
    SLACK_NUM: tl.constexpr,  # the sample threshold aims at SLACK_NUM / SLACK_DEN × topk survivors
    SLACK_DEN: tl.constexpr,
    FULL_ONLY: tl.constexpr,  # topk too large for CAP: every row longer than topk is selected over the window
    RADIX: tl.constexpr,  # register selects by 8-bit digit histograms instead of the 32-step bitwise search
):
    tl.static_assert(SAMPLES % 8 == 0)
    tl.static_assert(SAMPLES >= 16)
    tl.static_assert(BLOCK % 16 == 0)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    scratch = scratch_ptr + pid.to(tl.int64) * CAP
    blk = tl.arange(0, BLOCK)
    tile = tl.arange(0, BLOCK // 4)[:, None] * 4 + tl.arange(0, 4)[None, :]  # [BLOCK / 4, 4] offsets
    tile_st = tile * stride_st  # int32: the op checks BLOCK × stride < 2^31
    for r0 in range(0, num_rows, nprog):
        r = r0 + pid  # a tensor on both the GPU and the interpreter
        if r < num_rows:
            lo, hi, n, row_ptr = _row_window(r, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss,
                                             stride_sg, stride_wb, stride_ws, stride_eb, stride_es)
            out_row = out_ptr + r.to(tl.int64) * topk
            if n <= topk:
                _write_short_window(out_row, lo, n, topk, S_kv, blk, BLOCK)
            elif n <= CAP:
                _select_registers(row_ptr, stride_st, lo, scratch, n, topk, out_row, CAP, BLOCK, False, RADIX)
            elif FULL_ONLY:
                _select_window(row_ptr, stride_st, lo, n, topk, out_row, BLOCK)
            else:
                # 1. Threshold: rank r ≈ SLACK × topk × (valid samples) / n among SAMPLES keys taken as
                #    SAMPLES / 8 sector-aligned groups of 8 spread over the window (out-of-window ones dropped).
                so = tl.arange(0, SAMPLES)
                grp = (so // 8).to(tl.int64)
                gstart = lo + (grp * (n - 8)) // (SAMPLES // 8 - 1)
                sp = (gstart // 8) * 8 + so % 8
                sok = (sp >= lo) & (sp < hi)
                skeys = _ordered_key(tl.load(row_ptr + sp * stride_st, mask=sok, other=0.0))
                nsamp = tl.sum(sok.to(tl.int64), axis=0)
                # (int64 via a zero: a launch with topk == 1 makes topk a constant, which has no .to)
                rank = (SLACK_NUM * nsamp * (tl.zeros([], tl.int64) + topk) + SLACK_DEN * n - 1) // (SLACK_DEN * n)
                rank = tl.minimum(tl.maximum(rank, 1), nsamp)
                skeys = tl.where(sok, skeys, -2147483648)
                if RADIX:
                    thr_key = _kth_largest_radix(skeys, rank.to(tl.int32))
                else:
                    thr_key = _kth_largest(skeys, rank.to(tl.int32), 0, 0)
                thr = _key_float(thr_key)
                # 2. One read: full tiles pipelined (unmasked: vectorized cp.async), then the partial tile.
                lo_al = (lo // 16) * 16
                nfull = (hi - lo_al) // BLOCK
                count = tl.zeros([], dtype=tl.int32)
                for i in tl.range(0, nfull, num_stages=STAGES):
                    # Scalar tile base + a loop-invariant offset tensor: the pipeliner then carries no
                    # per-stage index tensors in registers.
                    base = lo_al + i * BLOCK
                    x = tl.load(row_ptr + base.to(tl.int64) * stride_st + tile_st)
                    t = base + tile
                    count = _compact_tile(x, t, (x >= thr) & (t >= lo), count, scratch, CAP)
                t = lo_al + nfull * BLOCK + tile
                m = (t >= lo) & (t < hi)
                x = tl.load(row_ptr + t.to(tl.int64) * stride_st, mask=m, other=0.0)
                count = _compact_tile(x, t, (x >= thr) & m, count, scratch, CAP)
                tl.debug_barrier()  # scratch written by all threads before any thread reads it back
                # 3. Exact select among the survivors, or the fallbacks.
                if (count >= topk) & (count <= CAP):
                    _select_registers(row_ptr, stride_st, lo, scratch, count, topk, out_row, CAP, BLOCK, True, RADIX)
                else:
                    n_gt = tl.zeros([], dtype=tl.int32)
                    if count > CAP:
                        n_gt = _count_window(row_ptr, stride_st, lo, n, thr_key, True, BLOCK)
                    if (count > CAP) & (n_gt < topk):
                        # The threshold is the k-th key (a tie across it): keys above it, then the
                        # lowest-position keys equal to it.
                        _write_selected(row_ptr, stride_st, lo, scratch, n, thr_key, topk - n_gt, out_row,
                                        BLOCK, False)
                    else:
                        _select_window(row_ptr, stride_st, lo, n, topk, out_row, BLOCK)
                tl.debug_barrier()  # reads done before the next row overwrites the scratch


@triton.jit
def _key_bin(key, HIST_BITS: tl.constexpr):
    """Histogram bin of an ordered key: its top HIST_BITS bits as an unsigned number (bin order = key order)."""
    return (key >> (32 - HIST_BITS)) + (1 << (HIST_BITS - 1))


@triton.jit
def _split_program(row0, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss, stride_sg, stride_wb,
                   stride_ws, stride_eb, stride_es):
    """Program (i, p) of the split path's grid: its batch row i (row r = row0 + i), its place p in the row, and the
    row's window (``_row_window``: lo, n, score row pointer)."""
    i = tl.program_id(0)
    r = row0 + i
    lo, _, n, row_ptr = _row_window(r, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss,
                                    stride_sg, stride_wb, stride_ws, stride_eb, stride_es)
    return i, r, tl.program_id(1), lo, n, row_ptr


@triton.jit
def topk_split_histogram_kernel(
    score_ptr, starts_ptr, ends_ptr, hist_ptr,
    row0, S, G, S_kv,
    stride_sb, stride_ss, stride_st, stride_sg,
    stride_wb, stride_ws, stride_eb, stride_es,
    CHUNK: tl.constexpr,  # window positions per program
    HIST_BITS: tl.constexpr,  # bins = 2^HIST_BITS, over the keys' top bits
):
    """Split path, step 1 of 2 (program (i, p): positions [p·CHUNK, (p + 1)·CHUNK) of row r = row0 + i's
    window; the scratch is indexed by i): one relaxed atomic add per key into the row's histogram, which the
    previous call's step 2 left at zero. (tl.histogram of the chunk into 2048 bins, merged per bin, took
    ~6.8 µs a program on the H200: shared-memory atomics per warp and a 2048-bin pass; a normal row's busiest
    bin takes ~5 % of the row's atomics.)"""
    i, r, p, lo, n, row_ptr = _split_program(row0, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss,
                                             stride_sg, stride_wb, stride_ws, stride_eb, stride_es)
    j = p * CHUNK + tl.arange(0, CHUNK)
    m = j < n
    x = tl.load(row_ptr + (lo + j).to(tl.int64) * stride_st, mask=m, other=0.0)
    hist_row = hist_ptr + (i.to(tl.int64) << HIST_BITS)
    tl.atomic_add(hist_row + _key_bin(_ordered_key(x), HIST_BITS), 1, mask=m, sem="relaxed")


@triton.jit
def _threshold_bin(hist_row_ptr, topk, HIST_BITS: tl.constexpr):
    """(b, above, in_bin): the bin holding the topk-th largest key, how many keys lie in higher bins
    (< topk) and how many in bin b (>= topk - above). Meaningless when the window holds <= topk keys."""
    bins = tl.arange(0, 1 << HIST_BITS)
    h = tl.load(hist_row_ptr + bins)
    at_or_above = tl.cumsum(h, axis=0, reverse=True)
    b = tl.max(tl.where(at_or_above >= topk, bins, 0), axis=0)
    above = tl.sum(tl.where(bins > b, h, 0), axis=0)
    in_bin = tl.sum(tl.where(bins == b, h, 0), axis=0)
    return b, above, in_bin


@triton.jit
def _lowest_positions(pos, eq, room):
    """The room-th lowest position among the entries ``eq`` marks (positions distinct, >= 0, and at least
    ``room`` of them): the largest t with #{eq, pos < t} < room, built bit by bit."""
    t = tl.zeros([], dtype=tl.int32)
    for i in range(31):
        cand = t + (tl.full([], 1, tl.int32) << (30 - i))
        count = tl.sum((eq & (pos < cand)).to(tl.int32), axis=0)
        t = tl.where(count < room, cand, t)
    return t


@triton.jit
def _select_candidates(cand_ptr, n, k, out_ptr, prefix, CAP: tl.constexpr, PREFIX_BITS: tl.constexpr,
                       RADIX: tl.constexpr):
    """Exact top-k of the split path's n <= CAP candidates (the threshold bin's keys, appended by the chunks
    in arrival order, so in no particular position order): keys and positions loaded once into CAP-wide
    register tensors; the k-th key by the bitwise search below the bin's ``PREFIX_BITS`` known top bits
    (``prefix``, see ``_kth_largest``) or by digits; every key above it, and of the keys equal to it the
    lowest positions (a search over their positions, only when more are equal than places are left)."""
    j = tl.arange(0, CAP)
    valid = j < n
    keys, pos = _keys_at(j, valid, cand_ptr, 0, 0, cand_ptr, True)
    keys = tl.where(valid, keys, -2147483648)
    if RADIX:
        kth = _kth_largest_radix(keys, k)
    else:
        kth = _kth_largest(keys, k, prefix, PREFIX_BITS)
    gt = keys > kth  # padding (int32 min) is never > kth
    eq = valid & (keys == kth)
    room = k - tl.sum(gt.to(tl.int32), axis=0)
    last_pos = tl.full([], 2147483647, tl.int32)
    if tl.sum(eq.to(tl.int32), axis=0) > room:
        last_pos = _lowest_positions(pos, eq, room)
    take = gt | (eq & (pos <= last_pos))
    tl.store(out_ptr + tl.cumsum(take.to(tl.int32), axis=0) - 1, pos, mask=take)


@triton.jit
def _finish_row(row_ptr, stride_t, lo, n, topk, S_kv, out_row_ptr, cand_row_ptr, b, above, in_bin,
                CAP: tl.constexpr, BLOCK: tl.constexpr, HIST_BITS: tl.constexpr, RADIX: tl.constexpr):
    """The row's last program: short windows padded; otherwise the keys above bin b are written, and the
    remaining topk - above come from bin b's candidates. Candidates over CAP (many equal or near-equal keys):
    the exact whole-window select rewrites the row."""
    if n <= topk:
        _write_short_window(out_row_ptr, lo, n, topk, S_kv, tl.arange(0, BLOCK), BLOCK)
    elif in_bin <= CAP:
        prefix = b.to(tl.int64) << (32 - HIST_BITS)  # every candidate's key + 2^31 starts with bin b's bits
        _select_candidates(cand_row_ptr, in_bin, topk - above, out_row_ptr + above, prefix, CAP, HIST_BITS, RADIX)
    else:
        _select_window(row_ptr, stride_t, lo, n, topk, out_row_ptr, BLOCK)


@triton.jit
def _row_counters(counter_ptr, i):
    """Row i's three counters: keys written above the threshold bin, candidates written, programs arrived."""
    return counter_ptr + 3 * i, counter_ptr + 3 * i + 1, counter_ptr + 3 * i + 2


@triton.jit
def _reset_counters(above_counter, cand_counter, arrivals):
    """The row's counters back at 0 for the next call (by its last program to arrive: every other has read them)."""
    tl.atomic_xchg(above_counter, 0, sem="relaxed", scope="gpu")
    tl.atomic_xchg(cand_counter, 0, sem="relaxed", scope="gpu")
    tl.atomic_xchg(arrivals, 0, sem="relaxed", scope="gpu")


@triton.jit
def topk_split_select_kernel(
    score_ptr, starts_ptr, ends_ptr, out_ptr, hist_ptr, counter_ptr, cand_ptr,
    row0, S, G, S_kv, topk,
    stride_sb, stride_ss, stride_st, stride_sg,
    stride_wb, stride_ws, stride_eb, stride_es,
    CHUNK: tl.constexpr,  # window positions per program (as in step 1)
    HIST_BITS: tl.constexpr,
    CAP: tl.constexpr,  # candidate slots per row (keys in the threshold bin)
    BLOCK: tl.constexpr,  # positions per step of the last program's loops
    RADIX: tl.constexpr,  # the last program's register select by 8-bit digits
    RANK_LAUNCH: tl.constexpr,  # the candidates are left to step 3 (``topk_split_rank_kernel``)
):
    """Split path, step 2 of 2 (program (i, p) as in step 1): from the row's histogram, the threshold bin b.
    The chunk's keys above b go to the output at slots taken from a per-row counter, its keys in b, as
    (fp32 bits << 32 | position), to the row's candidate buffer at slots from a second counter (order
    unspecified in both). The last program of the row to arrive selects among the candidates and zeroes the
    row's histogram and counters; with ``RANK_LAUNCH`` a third launch does both instead (and this step writes
    nothing where the threshold bin overflows its ``CAP`` slots, which step 3 reads as an empty count)."""
    tl.static_assert(CHUNK % 4 == 0)
    i, r, p, lo, n, row_ptr = _split_program(row0, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss,
                                             stride_sg, stride_wb, stride_ws, stride_eb, stride_es)
    nchunks = tl.num_programs(1)
    hist_row = hist_ptr + (i.to(tl.int64) << HIST_BITS)
    out_row = out_ptr + r.to(tl.int64) * topk
    cand_row = cand_ptr + i.to(tl.int64) * CAP
    above_counter, cand_counter, arrivals = _row_counters(counter_ptr, i)
    # The chunk is loaded before the histogram is scanned (not inside the branch): the two loads overlap.
    j = p * CHUNK + tl.arange(0, CHUNK // 4)[:, None] * 4 + tl.arange(0, 4)[None, :]  # [CHUNK / 4, 4]
    m = j < n
    x = tl.load(row_ptr + (lo + j).to(tl.int64) * stride_st, mask=m, other=0.0)
    b, above, in_bin = _threshold_bin(hist_row, topk, HIST_BITS)
    if (n > topk) & (in_bin <= CAP):
        key_bin = _key_bin(_ordered_key(x), HIST_BITS)
        keep = m & (key_bin > b)
        slot, tot = _tile_slots(keep, 0)
        slot += tl.atomic_add(above_counter, tl.sum(tot, axis=0), sem="relaxed")
        tl.store(out_row + slot, lo + j, mask=keep & (slot < above))
        in_b = m & (key_bin == b)
        base = tl.atomic_add(cand_counter, tl.sum(tl.sum(in_b.to(tl.int32), axis=1), axis=0), sem="relaxed")
        _compact_tile(x, lo + j, in_b, base, cand_row, CAP)
    if RANK_LAUNCH:
        return
    tl.debug_barrier()  # every thread's writes (and histogram reads) done before the arrival is released
    if tl.atomic_add(arrivals, 1, sem="acq_rel", scope="gpu") == nchunks - 1:
        _finish_row(row_ptr, stride_st, lo, n, topk, S_kv, out_row, cand_row, b, above, in_bin, CAP, BLOCK,
                    HIST_BITS, RADIX)
        tl.store(hist_row + tl.arange(0, 1 << HIST_BITS), 0)
        _reset_counters(above_counter, cand_counter, arrivals)


@triton.jit
def topk_split_rank_kernel(
    score_ptr, starts_ptr, ends_ptr, out_ptr, hist_ptr, counter_ptr, cand_ptr,
    row0, S, G, S_kv, topk,
    stride_sb, stride_ss, stride_st, stride_sg,
    stride_wb, stride_ws, stride_eb, stride_es,
    HIST_BITS: tl.constexpr,
    CAP: tl.constexpr,  # candidate slots per row (as in step 2)
    BLOCK: tl.constexpr,  # positions per step of the short-window and whole-window loops
    SLICE: tl.constexpr,  # candidates a program ranks at a time
    RANK_BLOCK: tl.constexpr,  # candidates each of them is compared with at a time
):
    """Split path with ``RANK_LAUNCH``, step 3 of 3 (program (i, p): batch row i as in steps 1 and 2, p one of P
    programs of the row, P at least the row's chunks and up to SMs / rows; p names no chunk here): the threshold bin's
    candidates are ranked by every program of the row at once instead of selected by its last one (that
    program's dependent steps were ~2/3 of step 2 on the decode row, H200 2026-12-03). A candidate's rank is
    the number of candidates before it in (key descending, position ascending) order: a total order, so the
    ranks are distinct and the ties go to the lower positions. Program p ranks candidates p·SLICE, (p + P)·
    SLICE, ... against all of them and writes those ranked below topk − above after the keys above the bin.
    Program 0 pads a window of n <= topk positions, or selects over the whole window when step 2 found the bin
    over its slots (no candidate written). Each program zeroes its share of the row's histogram (this step
    never reads it); the row's last program to arrive zeroes the counters once every program has read them."""
    i, r, p, lo, n, row_ptr = _split_program(row0, S, G, S_kv, score_ptr, starts_ptr, ends_ptr, stride_sb, stride_ss,
                                             stride_sg, stride_wb, stride_ws, stride_eb, stride_es)
    nprog = tl.num_programs(1)
    out_row = out_ptr + r.to(tl.int64) * topk
    cand_row = cand_ptr + i.to(tl.int64) * CAP
    above_counter, cand_counter, arrivals = _row_counters(counter_ptr, i)
    above = tl.load(above_counter)
    n_cand = tl.load(cand_counter)
    if n <= topk:
        if p == 0:
            _write_short_window(out_row, lo, n, topk, S_kv, tl.arange(0, BLOCK), BLOCK)
    elif n_cand == 0:  # (a window of more than topk keys always has some in its threshold bin)
        if p == 0:
            _select_window(row_ptr, stride_st, lo, n, topk, out_row, BLOCK)
    else:
        need = topk - above
        for s0 in range(p * SLICE, n_cand, nprog * SLICE):
            si = s0 + tl.arange(0, SLICE)
            vi = si < n_cand
            ki, pi = _keys_at(si, vi, cand_row, 0, 0, cand_row, True)
            rank = tl.zeros([SLICE], dtype=tl.int32)
            for c0 in range(0, n_cand, RANK_BLOCK):
                cj = c0 + tl.arange(0, RANK_BLOCK)
                vj = cj < n_cand
                kj, pj = _keys_at(cj, vj, cand_row, 0, 0, cand_row, True)
                before = (kj[None, :] > ki[:, None]) | ((kj[None, :] == ki[:, None]) & (pj[None, :] < pi[:, None]))
                rank += tl.sum((before & vj[None, :]).to(tl.int32), axis=1)
            tl.store(out_row + above + rank, pi, mask=vi & (rank < need))
    hist_row = hist_ptr + (i.to(tl.int64) << HIST_BITS)
    for z0 in range(p * BLOCK, 1 << HIST_BITS, nprog * BLOCK):
        z = z0 + tl.arange(0, BLOCK)
        tl.store(hist_row + z, 0, mask=z < (1 << HIST_BITS))
    tl.debug_barrier()  # every thread's counter reads done before the arrival is released
    if tl.atomic_add(arrivals, 1, sem="acq_rel", scope="gpu") == nprog - 1:
        _reset_counters(above_counter, cand_counter, arrivals)
