"""``@triton.jit`` device functions shared by several ops' kernels."""

from __future__ import annotations

import triton
import triton.language as tl

# Row-copy modes: how a value changes between the source row and the destination row.
COPY_PLAIN: tl.constexpr = tl.constexpr(0)  # bit copy, same dtype
COPY_QUANT_E4M3: tl.constexpr = tl.constexpr(1)  # sat_e4m3(rne(x / scale))
COPY_DEQUANT: tl.constexpr = tl.constexpr(2)  # rne_to_dst(float(x) * scale)

E4M3_MAX: tl.constexpr = tl.constexpr(448.0)


@triton.jit
def to_e4m3(x):
    """fp32 -> float8_e4m3fn, round to nearest even, saturating to ±448 (spec README §6).

    Built from integer arithmetic on the fp32 bits rather than ``x.to(tl.float8e4nv)`` because Triton's
    interpreter gets that cast wrong (mantissa carries, ties, 248 -> -3.75), and a bit-exact path that
    runs the same on the interpreter and the GPU is what the CPU tests can vouch for. Each element costs
    about a dozen integer ops: free in the memory-bound kernels that use it.
    """
    a = tl.minimum(tl.abs(x), E4M3_MAX)
    exponent = ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    exponent = tl.maximum(exponent, -6)  # below 2^-6 the quantum stays 2^-9 (subnormals)
    to_units = ((130 - exponent) << 23).to(tl.float32, bitcast=True)  # 2^(3 - exponent), exact
    scaled = a * to_units  # in [0, 16]: mantissa with 3 fraction bits, exact
    units = ((scaled + 8388608.0) - 8388608.0).to(tl.int32)  # + 2^23 rounds to nearest even
    bits = (exponent + 6) * 8 + units  # a carry out of the mantissa lands in the exponent
    bits = tl.where(x.to(tl.int32, bitcast=True) < 0, bits | 0x80, bits)  # sign bit: keeps -0.0
    return bits.to(tl.uint8).to(tl.float8e4nv, bitcast=True)


@triton.jit
def copy_rows(
    src_ptr,
    src_row_offsets,
    dst_ptr,
    dst_row_offsets,
    row_mask,
    scale,
    ROW: tl.constexpr,
    BLOCK_E: tl.constexpr,
    MODE: tl.constexpr,
):
    """Copy ``BLOCK_T`` rows of ``ROW`` contiguous elements each.

    ``src_row_offsets`` / ``dst_row_offsets``: ``[BLOCK_T]`` int64 element offsets of each row's first
    element; rows with ``row_mask`` False are neither read nor written. The row is walked in ``BLOCK_E``
    chunks so that widths such as 576 (= 9 × 64) need no masked lanes.
    """
    cols = tl.arange(0, BLOCK_E)
    for e0 in tl.static_range(0, ROW, BLOCK_E):
        c = e0 + cols
        mask = row_mask[:, None] & (c[None, :] < ROW)
        x = tl.load(src_ptr + src_row_offsets[:, None] + c[None, :], mask=mask)
        if MODE == COPY_QUANT_E4M3:
            y = to_e4m3(tl.math.div_rn(x.to(tl.float32), scale))
        elif MODE == COPY_DEQUANT:
            y = (x.to(tl.float32) * scale).to(dst_ptr.dtype.element_ty)
        else:
            y = x
        tl.store(dst_ptr + dst_row_offsets[:, None] + c[None, :], y, mask=mask)


@triton.jit
def paged_row(block_table_row_ptr, pos, PAGE_SIZE, page_stride, token_stride, mask):
    """Element offset (int64) of logical token ``pos`` in a paged pool, through one request's block-table
    row: token ``pos`` lives in physical page ``table[pos // PAGE_SIZE]`` at slot ``pos % PAGE_SIZE``.
    Returns ``(offset, page)``; the page id lets callers reject out-of-range entries."""
    page = tl.load(block_table_row_ptr + pos // PAGE_SIZE, mask=mask, other=0).to(tl.int64)
    return page * page_stride + (pos % PAGE_SIZE).to(tl.int64) * token_stride, page


@triton.jit
def segment_of(cu_ptr, t, NUM_SEGMENTS, SEARCH_STEPS: tl.constexpr):
    """For packed positions ``t``, the segment b with ``cu[b] <= t < cu[b+1]`` (binary search over the
    ``NUM_SEGMENTS + 1`` prefix sums; zero-length segments are skipped because the largest b wins)."""
    lo = tl.zeros_like(t)
    hi = tl.zeros_like(t) + NUM_SEGMENTS
    for _ in tl.static_range(SEARCH_STEPS):
        mid = (lo + hi) // 2
        go_right = tl.load(cu_ptr + mid) <= t
        lo = tl.where(go_right, mid, lo)
        hi = tl.where(go_right, hi, mid)
    return lo


def search_steps(num_segments: int) -> int:
    """Host side: iterations ``segment_of`` needs for ``num_segments`` segments."""
    return max(1, (max(num_segments, 1) - 1).bit_length())


def row_block(row: int, max_block: int = 1024) -> int:
    """Host side: the chunk width for ``copy_rows``: the largest power of two dividing ``row`` (capped),
    or the next power of two above ``row`` when it has no factor of at least 16."""
    block = 1
    while row % (block * 2) == 0 and block * 2 <= max_block:
        block *= 2
    if block < 16:
        block = min(triton.next_power_of_2(row), max_block)
    return block
