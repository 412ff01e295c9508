"""``@triton.jit`` device functions shared by the softmax-attention kernels (spec README §4–§5).

Everything here works on register tiles; no function takes an op-specific pointer except the RoPE table
loader, which takes a generic ``[P, R/2]`` table pointer. All functions run under Triton's interpreter.

Conventions
-----------
* **Positions.** A query row carries its bottom-right aligned key position ``P_i = kv_len − q_len + i``
  (it may be negative when ``q_len > kv_len``); a key carries its index ``j`` inside the request.
* **Masks as one window.** Causal and sliding-window masks are folded on the host into two non-negative
  ints ``(WL, WR)`` by :func:`window_bounds`: key j is visible from query position P iff
  ``P − WL <= j <= P + WR`` and ``j < kv_len``. ``NO_WINDOW`` (2^30) encodes an unbounded side, so the
  sums stay inside int32 for any sequence shorter than 2^29.
* **Base 2.** Scores are kept as raw ``q·k`` dot products (fp32); the softmax step multiplies by
  ``scale = sm_scale · log2(e)`` (times any fp8 dequant scales) inside ``exp2`` — one FMA per score.
  Running maxima ``m`` and log-sum-exps produced here are therefore in base-2 units (``lse2 = lse · log2 e``).
  With softcap, :func:`softcap_scores` already returns base-2 scores: pass ``scale = 1`` to the step.
* **Empty rows.** A row that saw no visible key has ``l == 0`` and ``m == -inf``; the helpers never
  produce NaN for it, and :func:`normalize_rows` returns exact zeros (spec: empty rows output 0).

Typical key loop (``n_lo, full_lo, full_hi, n_hi = kv_block_range(...)``)::

    for start in range(n_lo, n_hi, BLOCK_N):
        k_pos = start + tl.arange(0, BLOCK_N)
        ...                                                       # load k, v (mask k_pos < kv_len)
        qk = mma(q, tl.trans(k), None, EXACT_F32)                 # [BM, BN] fp32
        if SOFTCAP:
            qk = softcap_scores(qk, cap_scale, cap_log2)          # base-2 now
        if (start < full_lo) | (start + BLOCK_N > full_hi):       # edge / diagonal / ragged tile only
            qk = tl.where(visible(q_pos, k_pos, kv_len, WL, WR), qk, float("-inf"))
        p, alpha, m_i, l_i = online_softmax_step(qk, m_i, l_i, step_scale)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], EXACT_F32)
    acc, m_i, l_i = add_sink(acc, m_i, l_i, sink2)                # optional
    o = normalize_rows(acc, l_i)

Prefer that single loop with a per-tile branch over separate masked / unmasked loops: compiled for sm_90
(``benchmarks/sm90_compile.py``), each extra software-pipelined loop in a kernel raised register pressure
into spills on most tile configs of the GQA forward kernel; the branch version spills on none.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

LOG2E = math.log2(math.e)
# the same as a constexpr global, for kernels (they may only read constexpr globals; the interpreter is laxer)
LOG2E_C = tl.constexpr(LOG2E)
LN2 = math.log(2.0)
NO_WINDOW = 1 << 30  # an unbounded window side (host-side encoding, see window_bounds)


def window_bounds(is_causal: bool, window_left: int | None, window_right: int | None) -> tuple[int, int]:
    """Host side: ``(WL, WR)`` so that key j is visible from query position P iff ``P−WL <= j <= P+WR``.

    ``window_left / window_right`` follow FA3/FlashInfer (``-1`` or ``None`` = unbounded); causal is the
    right bound 0, AND-ed with any right window."""
    wl = NO_WINDOW if window_left is None or window_left < 0 else int(window_left)
    wr = NO_WINDOW if window_right is None or window_right < 0 else int(window_right)
    if is_causal:
        wr = min(wr, 0)
    return min(wl, NO_WINDOW), min(wr, NO_WINDOW)


# ---------------------------------------------------------------------------------------------------
# Masks and key ranges


@triton.jit
def visible(q_pos, k_pos, kv_len, WL, WR):
    """``[BM, BN]`` bool: key ``k_pos[j]`` is visible from query ``q_pos[i]`` (both int32 vectors).

    ``q_pos`` are bottom-right aligned positions; ``(WL, WR)`` from :func:`window_bounds`; keys at or past
    ``kv_len`` are never visible (ragged last tile)."""
    qp = q_pos[:, None]
    kp = k_pos[None, :]
    return (kp < kv_len) & (kp >= qp - WL) & (kp <= qp + WR)


@triton.jit
def kv_block_range(q_pos_lo, q_pos_hi, kv_len, WL, WR, BLOCK_N: tl.constexpr):
    """Keys a block of query rows with positions in ``[q_pos_lo, q_pos_hi]`` has to visit.

    Returns ``(n_lo, full_lo, full_hi, n_hi)``: visit ``[n_lo, n_hi)`` in ``BLOCK_N`` steps from ``n_lo``
    (a multiple of BLOCK_N); inside ``[full_lo, full_hi)`` (multiples of BLOCK_N, possibly empty) every
    key is visible from every row, so tiles there need no mask and no bounds check. Outside it, apply
    :func:`visible`. An empty range has ``n_lo == n_hi``."""
    lo = tl.maximum(q_pos_lo - WL, 0)
    hi = tl.minimum(q_pos_hi + WR + 1, kv_len)
    n_lo = (lo // BLOCK_N) * BLOCK_N
    n_hi = tl.where(hi > lo, hi, n_lo)
    # every row sees key j iff q_pos_hi - WL <= j <= q_pos_lo + WR and j < kv_len
    f_lo = tl.maximum(q_pos_hi - WL, lo)
    f_hi = tl.minimum(q_pos_lo + WR + 1, hi)
    full_lo = ((tl.maximum(f_lo, 0) + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
    full_hi = (tl.maximum(f_hi, 0) // BLOCK_N) * BLOCK_N
    has_full = full_hi > full_lo
    full_lo = tl.where(has_full, full_lo, n_lo)
    full_hi = tl.where(has_full, full_hi, n_lo)
    return n_lo, full_lo, full_hi, n_hi


@triton.jit
def split_kv_range(n_lo, n_hi, split, num_splits, BLOCK_N: tl.constexpr):
    """Split-KV: the sub-range ``[a, b)`` of ``[n_lo, n_hi)`` that split ``split`` of ``num_splits``
    handles; chunks are whole BLOCK_N tiles counted from ``n_lo``, the last may be short or empty."""
    tiles = (n_hi - n_lo + BLOCK_N - 1) // BLOCK_N
    chunk = ((tiles + num_splits - 1) // num_splits) * BLOCK_N
    a = tl.minimum(n_lo + split * chunk, n_hi)
    b = tl.minimum(a + chunk, n_hi)
    return a, b


@triton.jit
def clamp_range(x, a, b):
    """``min(max(x, a), b)`` for scalar loop bounds (intersecting a region with a split)."""
    return tl.minimum(tl.maximum(x, a), b)


# ---------------------------------------------------------------------------------------------------
# Scores and the online softmax


@triton.jit
def mma(a, b, acc, EXACT_F32: tl.constexpr):
    """``acc + a @ b`` with fp32 accumulation (``acc`` may be None: ``a @ b``).

    ``EXACT_F32`` (set it when ``runtime.interpreting()``): upcast the 16-bit / fp8 operands to fp32 and
    multiply in IEEE fp32. The products are the same (16-bit and fp8 products are exact in fp32), but the
    interpreter then runs the matmul through BLAS instead of numpy's f16 loop (~30× faster). On a GPU keep
    it False: the tensor-core path."""
    if EXACT_F32:
        if acc is None:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        if acc is None:
            return tl.dot(a, b)
        else:
            return tl.dot(a, b, acc)



@triton.jit
def tanh_f32(x):
    """tanh from exp2 (portable: the interpreter and every GPU); exact limits ±1 for large |x|."""
    return 1.0 - 2.0 / (tl.math.exp2(x * 2.8853900817779268) + 1.0)  # 2·log2(e)


@triton.jit
def softcap_scores(qk, cap_scale, cap_log2):
    """Softcapped scores in base 2: ``cap_log2 · tanh(qk · cap_scale)``.

    Host: ``cap_scale = sm_scale · dequant_scales / softcap``, ``cap_log2 = softcap · log2(e)``. The
    result is already in base-2 units: use ``scale = 1`` in :func:`online_softmax_step`. Apply the mask
    after this call (softcap acts on scaled scores, before masking)."""
    return cap_log2 * tanh_f32(qk * cap_scale)


@triton.jit
def online_softmax_step(s, m_i, l_i, scale):
    """One online-softmax update in base 2 with the scale folded into ``exp2``.

    ``s``: ``[BM, BN]`` fp32 raw scores, ``-inf`` where masked; ``m_i`` (base-2 running max, ``-inf``
    initially), ``l_i`` (running sum, 0 initially): ``[BM]`` fp32; ``scale``: ``sm_scale·log2(e)`` (×
    dequant scales), or 1 for softcapped scores. Returns ``(p, alpha, m_new, l_new)``: ``p = 2^(s·scale −
    m_new)`` (0 where masked), and the caller does ``acc = acc·alpha[:, None] + p @ v``. Rows with every
    score masked so far keep ``m = -inf, l = 0`` and get ``p = 0`` (no NaN)."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s * scale - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_new = l_i * alpha + tl.sum(p, 1)
    return p, alpha, m_new, l_new


@triton.jit
def merge_partial(acc, m_i, l_i, o_part, lse2_part):
    """Fold one split's normalized partial output into a running ``(acc, m, l)`` (split-KV combine).

    ``o_part``: ``[BM, BD]`` fp32 rows normalized by their own sum; ``lse2_part``: ``[BM]`` their base-2
    log-sum-exp (``-inf`` for a split that saw no key, whose ``o_part`` must be finite, e.g. 0). Start
    from ``acc = 0, m = -inf, l = 0`` and finish with :func:`add_sink` / :func:`normalize_rows`."""
    m_new = tl.maximum(m_i, lse2_part)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - m_safe)
    beta = tl.math.exp2(lse2_part - m_safe)
    acc = acc * alpha[:, None] + o_part * beta[:, None]
    l_new = l_i * alpha + beta
    return acc, m_new, l_new


@triton.jit
def merge_splits(part_o_ptr, part_lse_ptr, rows, split_stride, num_splits, row_mask, offs_d, d_mask,
                 ROW_WIDTH: tl.constexpr):
    """Merge ``num_splits`` partials of the same rows: split s of row i sits at workspace row
    ``rows[i] + s·split_stride`` (``part_lse_ptr`` f32 per row, ``part_o_ptr`` f32 ``ROW_WIDTH`` per row).
    Returns the running ``(acc, m, l)`` of :func:`merge_partial` for :func:`add_sink` /
    :func:`normalize_rows`. Loads are ``.cg`` (L2): partials written by other programs of the same
    launch must not come from a stale L1 line. One split a step: for programs that merge many rows (in-kernel
    merges); a combine launch merges a row's splits in one step (:func:`merge_row_splits`)."""
    acc = tl.zeros([rows.shape[0], offs_d.shape[0]], tl.float32)
    m_i = tl.full([rows.shape[0]], float("-inf"), tl.float32)
    l_i = tl.zeros([rows.shape[0]], tl.float32)
    mask = row_mask[:, None] & d_mask[None, :]
    r = rows.to(tl.int64)  # stepped by split_stride: no int32 product of split and stride
    for _ in range(0, num_splits):
        o_part = tl.load(part_o_ptr + r[:, None] * ROW_WIDTH + offs_d[None, :], mask=mask, other=0.0,
                         cache_modifier=".cg")
        lse2 = tl.load(part_lse_ptr + r, mask=row_mask, other=float("-inf"), cache_modifier=".cg")
        acc, m_i, l_i = merge_partial(acc, m_i, l_i, o_part, lse2)
        r += split_stride
    return acc, m_i, l_i


@triton.jit
def merge_row_splits(part_o_ptr, part_lse_ptr, row, split_stride, num_splits, offs_d, d_mask,
                     ROW_WIDTH: tl.constexpr, SPLITS: tl.constexpr):
    """Merge the ``num_splits`` (at most ``SPLITS``, a power of two) partials of one workspace row in one step:
    split s at row ``row + s·split_stride``, the columns ``offs_d`` of it. All partials are loaded as one
    ``[SPLITS, D]`` tile, so the merge costs one L2 round trip however many splits there are (merged one at a
    time they cost ~0.2 µs each on the H200: 5.9 µs of gemma-2b-8k-bs1's 16.9 at 32 splits). Returns
    ``(acc [1, D], m [1], l [1])`` as :func:`merge_splits` does for one row (weights relative to ``m``), for
    :func:`add_sink` / :func:`normalize_rows`."""
    s = tl.arange(0, SPLITS)
    ok = s < num_splits
    rs = row.to(tl.int64) + s.to(tl.int64) * split_stride
    lse2 = tl.load(part_lse_ptr + rs, mask=ok, other=float("-inf"), cache_modifier=".cg")[:, None]  # [SPLITS, 1]
    o_part = tl.load(part_o_ptr + rs[:, None] * ROW_WIDTH + offs_d[None, :], mask=ok[:, None] & d_mask[None, :],
                     other=0.0, cache_modifier=".cg")
    m = tl.max(lse2, axis=0)  # [1]
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.math.exp2(lse2 - m_safe[None, :])  # 0 for empty splits and padding
    return tl.sum(o_part * w, axis=0, keep_dims=True), m, tl.sum(w, axis=0)


@triton.jit
def restage_operand(x, scratch_ptrs, mask):
    """Write a tile computed in registers (e.g. a RoPE-rotated q) to global scratch the program owns and
    load it back, so Triton treats it as a loaded dot operand and stages it through shared memory. Used as
    the register A operand of a wgmma inside a pipelined loop, such a tile made ptxas serialize every wgmma
    of the loop (C7515) in the flash and paged kernels. ``scratch_ptrs``: ``x``'s shape, any rows the
    program may overwrite later (its own output rows); masked-off elements are neither written nor read."""
    tl.store(scratch_ptrs, x, mask=mask)
    tl.debug_barrier()  # other threads read what this one wrote
    return tl.load(scratch_ptrs, mask=mask, other=0.0)


@triton.jit
def add_sink(acc, m_i, l_i, sink2):
    """Attention sinks: add ``2^sink2`` to each row's denominator (``sink2 = sink · log2(e)``, ``[BM]``).

    The sink has no value vector, so ``acc`` is only rescaled. A row with no visible key keeps
    ``acc = 0`` and now has ``l > 0``: it normalizes to 0, as the spec requires."""
    m_new = tl.maximum(m_i, sink2)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # empty row and a -inf sink
    alpha = tl.math.exp2(m_i - m_safe)
    l_new = l_i * alpha + tl.math.exp2(sink2 - m_safe)
    return acc * alpha[:, None], m_new, l_new


@triton.jit
def normalize_rows(acc, l_i):
    """``acc / l`` per row; rows with ``l == 0`` (no visible key) give exact zeros."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    return tl.where((l_i == 0.0)[:, None], 0.0, acc / l_safe[:, None])


@triton.jit
def row_lse2(m_i, l_i):
    """Base-2 log-sum-exp ``m + log2(l)`` per row; ``-inf`` for rows with no visible key. Multiply by
    ``ln 2`` (``LN2``) for the natural-log lse of spec README §4."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    return tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))


# ---------------------------------------------------------------------------------------------------
# RoPE (spec README §5)


@triton.jit
def rope_pairing(offs_d, ROTARY_DIM: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Per channel of a tile's ``offs_d`` (int32 ``[BD]``): ``(partner, col, sign, rotated)``.

    ``partner``: the channel paired with it (NeoX: m ↔ m + R/2; interleaved: 2m ↔ 2m+1; itself when not
    rotated); ``col``: its column in a ``[P, R/2]`` cos/sin table (meaningful where ``rotated``; loads mask
    the rest); ``sign``: −1 for the first channel of a pair, +1 for the second; ``rotated``: channel < R.
    Load the partner tile as ``x[:, partner]``, then :func:`rope_rotate`. Kernels use :func:`rope_tile`,
    which keeps every table load contiguous; the interleaved ``col`` here is a 2-byte gather.

    NeoX ``col`` is ``offs_d % (R/2)``: runs of R/2 contiguous columns that Triton's axis analysis sees, so
    table loads vectorize and pipeline (``cp.async``). A ``tl.where`` with a constant arm (as before) made
    the column non-contiguous: scalar ``ld.global.b16`` loads inside the key loop, 8–11× slower rows."""
    HALF: tl.constexpr = ROTARY_DIM // 2
    if INTERLEAVED:
        partner = offs_d ^ 1
        col = offs_d // 2
        first = (offs_d % 2) == 0
    else:
        first = offs_d < HALF
        partner = tl.where(first, offs_d + HALF, offs_d - HALF)
        col = offs_d % HALF
    rotated = offs_d < ROTARY_DIM
    partner = tl.where(rotated, partner, offs_d)
    sign = tl.where(first, -1.0, 1.0)
    return partner, col, sign, rotated


@triton.jit
def rope_tables(cos_ptr, sin_ptr, pos, col, rotated, row_mask, stride_pos):
    """fp32 ``[BM, BD]`` cos and sin for rows at positions ``pos`` (``[BM]`` int) and channels described
    by :func:`rope_pairing`; non-rotated channels (and masked rows) get cos 1, sin 0. ``stride_pos``: the
    table's row stride (elements); column stride 1."""
    offs = pos.to(tl.int64)[:, None] * stride_pos + col[None, :]
    m = row_mask[:, None] & rotated[None, :]
    c = tl.load(cos_ptr + offs, mask=m, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + offs, mask=m, other=0.0).to(tl.float32)
    return c, s


@triton.jit
def rope_rotate(x, x_partner, cos, sin, sign):
    """``y = x·cos + sign·x_partner·sin`` in fp32: for a pair (x0, x1), ``y0 = x0·c − x1·s`` and
    ``y1 = x1·c + x0·s``. ``x``, ``x_partner``: ``[BM, BD]`` tiles; ``sign``: ``[BD]`` from rope_pairing."""
    return x.to(tl.float32) * cos + (sign[None, :] * sin) * x_partner.to(tl.float32)


@triton.jit
def rope_tile(x, x_rows, x_mask, cos_ptr, sin_ptr, pos, pos_mask, stride_pos, ROTARY_DIM: tl.constexpr,
              INTERLEAVED: tl.constexpr):
    """RoPE of a loaded ``[BM, BD]`` tile ``x`` (rows at positions ``pos``, ``[BM]`` int), fp32 result.

    ``x_rows``: ``[BM]`` pointers to channel 0 of each row of ``x`` and ``x_mask`` the mask ``x`` was loaded
    with (NeoX re-reads the partner channels from there). ``pos_mask``: ``[BM]``, rows whose table row may be
    read (others, and channels ≥ R, pass through: cos 1, sin 0). Tables ``[P, R/2]``, row stride
    ``stride_pos``, column stride 1.

    Every table load is a contiguous row segment (vectorized, ``cp.async`` in a pipelined loop):
      * NeoX: ``[BM, BD]`` tables at column ``offs_d % (R/2)`` and the partner channels re-read from
        ``x_rows`` (runs of R/2 contiguous channels);
      * interleaved: ``[BM, BD/2]`` tables at column m for the pair (2m, 2m+1), which is split out of ``x``
        in registers (reshape ``[BM, BD/2, 2]``): no partner load and no gather."""
    if INTERLEAVED:
        BM: tl.constexpr = x.shape[0]
        BD: tl.constexpr = x.shape[1]
        offs_h = tl.arange(0, BD // 2)
        offs = pos.to(tl.int64)[:, None] * stride_pos + offs_h[None, :]
        m = pos_mask[:, None] & (offs_h < ROTARY_DIM // 2)[None, :]
        c = tl.load(cos_ptr + offs, mask=m, other=1.0).to(tl.float32)
        s = tl.load(sin_ptr + offs, mask=m, other=0.0).to(tl.float32)
        x0, x1 = tl.split(tl.reshape(x.to(tl.float32), [BM, BD // 2, 2]))
        return tl.reshape(tl.join(x0 * c - x1 * s, x1 * c + x0 * s), [BM, BD])
    elif ROTARY_DIM == x.shape[1]:
        # NeoX, R = BD: view x as [BM, 2, R/2] and split the halves (m, m + R/2) in registers.
        BM1: tl.constexpr = x.shape[0]
        H1: tl.constexpr = ROTARY_DIM // 2
        offs_1 = tl.arange(0, H1)
        offs1 = pos.to(tl.int64)[:, None] * stride_pos + offs_1[None, :]
        c1 = tl.load(cos_ptr + offs1, mask=pos_mask[:, None], other=1.0).to(tl.float32)
        s1 = tl.load(sin_ptr + offs1, mask=pos_mask[:, None], other=0.0).to(tl.float32)
        lo1, hi1 = tl.split(tl.permute(tl.reshape(x.to(tl.float32), [BM1, 2, H1]), (0, 2, 1)))
        y1 = tl.join(lo1 * c1 - hi1 * s1, hi1 * c1 + lo1 * s1)
        return tl.reshape(tl.permute(y1, (0, 2, 1)), [BM1, ROTARY_DIM])
    elif x.shape[1] % ROTARY_DIM == 0:
        # R | BD: view x as [BM, BD/R, 2, R/2] groups; group 0 holds the pairs (m, m + R/2), the others
        # pass through. The halves are split in registers: no partner load, half-width tables.
        BM2: tl.constexpr = x.shape[0]
        NG: tl.constexpr = x.shape[1] // ROTARY_DIM
        HALF: tl.constexpr = ROTARY_DIM // 2
        offs_c = tl.arange(0, HALF)
        offs3 = pos.to(tl.int64)[:, None, None] * stride_pos + offs_c[None, None, :]
        m3 = pos_mask[:, None, None] & (tl.arange(0, NG) == 0)[None, :, None]
        c3 = tl.load(cos_ptr + offs3, mask=m3, other=1.0).to(tl.float32)
        s3 = tl.load(sin_ptr + offs3, mask=m3, other=0.0).to(tl.float32)
        lo, hi = tl.split(tl.permute(tl.reshape(x.to(tl.float32), [BM2, NG, 2, HALF]), (0, 1, 3, 2)))
        y = tl.join(lo * c3 - hi * s3, hi * c3 + lo * s3)
        return tl.reshape(tl.permute(y, (0, 1, 3, 2)), [BM2, x.shape[1]])
    else:
        offs_d = tl.arange(0, x.shape[1])
        partner, col, sign, rotated = rope_pairing(offs_d, ROTARY_DIM, False)
        x_partner = tl.load(x_rows[:, None] + partner[None, :], mask=x_mask, other=0.0)
        c, s = rope_tables(cos_ptr, sin_ptr, pos, col, rotated, pos_mask, stride_pos)
        return rope_rotate(x, x_partner, c, s, sign)
