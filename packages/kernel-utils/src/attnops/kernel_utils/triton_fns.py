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
    bits = tl.where(x != x, 0x7F, bits)  # NaN stays NaN (±inf saturates to ±448, like the torch clamp)
    return bits.to(tl.uint8).to(tl.float8e4nv, bitcast=True)


@triton.jit
def load_row_chunk(ptr, row_offsets, row_mask, col0, ROW: tl.constexpr, BLOCK_E: tl.constexpr):
    """Columns ``[col0, col0 + BLOCK_E)`` of ``BLOCK_T`` rows of ``ROW`` contiguous elements each.

    ``row_offsets``: ``[BLOCK_T]`` int64 element offsets of each row's first element; rows with
    ``row_mask`` False and columns past ``ROW`` are not read. Kernels load every chunk they move before
    storing any, so several loads are in flight at once.
    """
    cols = col0 + tl.arange(0, BLOCK_E)
    mask = row_mask[:, None] & (cols[None, :] < ROW)
    return tl.load(ptr + row_offsets[:, None] + cols[None, :], mask=mask, eviction_policy="evict_first")


@triton.jit
def store_row_chunk(
    ptr, row_offsets, row_mask, col0, x, scale, ROW: tl.constexpr, BLOCK_E: tl.constexpr, MODE: tl.constexpr
):
    """Store a chunk loaded by ``load_row_chunk``, converted per ``MODE`` (plain, e4m3 quantize, dequant)."""
    cols = col0 + tl.arange(0, BLOCK_E)
    mask = row_mask[:, None] & (cols[None, :] < ROW)
    if MODE == COPY_QUANT_E4M3:
        y = to_e4m3(tl.math.div_rn(x.to(tl.float32), scale))
    elif MODE == COPY_DEQUANT:
        y = (x.to(tl.float32) * scale).to(ptr.dtype.element_ty)
    else:
        y = x
    tl.store(ptr + row_offsets[:, None] + cols[None, :], y, mask=mask)


@triton.jit
def paged_row(block_table_row_ptr, pos, PAGE_SIZE, page_stride, token_stride, mask):
    """Element offset (int64) of logical token ``pos`` in a paged pool, through one request's block-table
    row: token ``pos`` lives in physical page ``table[pos // PAGE_SIZE]`` at slot ``pos % PAGE_SIZE``.
    Returns ``(offset, page)``; the page id lets callers reject out-of-range entries."""
    page = tl.load(block_table_row_ptr + pos // PAGE_SIZE, mask=mask, other=0).to(tl.int64)
    return page * page_stride + (pos % PAGE_SIZE).to(tl.int64) * token_stride, page


@triton.jit
def segment_of(cu_ptr, t, num_segments, SEGMENT_BLOCK: tl.constexpr):
    """For packed positions ``t`` (``[BLOCK_T]``), the segment b with ``cu[b] <= t < cu[b+1]``.

    Counts the prefix sums ``cu[1..num_segments)`` that are ``<= t``: one vector load per
    ``SEGMENT_BLOCK`` segments instead of a chain of dependent loads (a binary search costs a memory
    round trip per step, which dominates small calls). Zero-length segments are skipped because the
    largest such b wins.
    """
    count = tl.zeros_like(t)
    for j0 in tl.range(1, num_segments, SEGMENT_BLOCK):
        j = j0 + tl.arange(0, SEGMENT_BLOCK)
        bounds = tl.load(cu_ptr + j, mask=j < num_segments, other=2147483647)
        count += tl.sum((bounds[None, :] <= t[:, None]).to(t.dtype), axis=1)
    return count


def segment_block(num_segments: int) -> int:
    """Host side: the ``SEGMENT_BLOCK`` for ``segment_of`` (whole table in one load up to 256 segments)."""
    return min(triton.next_power_of_2(max(num_segments - 1, 1)), 256)


def row_block(row: int, max_block: int = 1024) -> int:
    """Host side: the chunk width for row copies: the whole row rounded up to a power of two, capped
    (wider rows are split over a second grid axis)."""
    return min(triton.next_power_of_2(row), max_block)


def row_copy_config(num_rows: int, row: int, sms: int, tile_elems: int = 4096) -> tuple[int, int, int]:
    """Host side: (BLOCK_T, BLOCK_E, num_warps) for row-copy kernels: tiles of about ``tile_elems``
    elements, shrunk until the grid covers every SM twice (small calls are latency-bound: spread them)."""
    block_e = row_block(row)
    block_t = max(1, tile_elems // block_e)
    col_chunks = triton.cdiv(row, block_e)
    while block_t > 1 and triton.cdiv(num_rows, block_t) * col_chunks < 2 * sms:
        block_t //= 2
    return block_t, block_e, 4
