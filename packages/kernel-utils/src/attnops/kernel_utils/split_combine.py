"""The split-KV combine launch the split attention kernels share (GQA dense / varlen, MLA decode).

A split kernel leaves, per output row (a (token, head) or (request, head) pair) and split, an fp32 partial
normalized by its own sum and its base-2 log-sum-exp. ``combine_splits`` merges them: one program per output row
and ``combine_columns`` of its columns, all of the row's splits loaded at once as one ``[splits, columns]`` tile
(``attention_fns.merge_row_splits``), so the merge costs one L2 round trip whatever the split count and a single
token's merge still spreads over ``heads · D / columns`` programs. H200 (2026-12-03, GQADenseFwd): merged one split
at a time it took 5.9 µs of gemma-2b-8k-bs1's 16.7 at 32 splits; in one step the whole row took 8.3 µs at 64
splits (benchmarks/results/h200/20261203-1125-attn-core-dense-combine.jsonl). Large workspaces with padded split
slots (``SERIAL_COMBINE_BYTES``) are merged one split at a time instead, one program per whole row.
"""

import torch
import triton
import triton.language as tl

from .attention_fns import LOG2E_C, add_sink, merge_row_splits, merge_splits, normalize_rows

# fp32 elements a combine program loads (all splits of its columns at once: 16 a thread at 4 warps)
COMBINE_TILE_ELEMS = 2048
# Workspaces of at least this many bytes whose split count is not a power of two are merged one split at a time,
# one program per whole row: such a merge streams from memory, and the one-step tile's padded split slots idle a
# third of its loads. H200 (2026-12-03, MLA decode, D 512): mla-tp-b6's 17 MB (384 rows, 22 splits) 8.1 µs in one
# step, 4.8 serially (the row 27.3 -> 24.3 µs; ds-v3-serving-batch, 35 MB at 11 splits, 58.0 -> 54.3); mla-tp-b1's
# 4.2 MB (64 rows, 32 splits) 2.8 in one step, 4.6 serially; the power-of-two rows of 33 MB (ds-v2-4k at 4 splits,
# ds-v3-4k at 8) ran 1-4 µs faster a call in one step than on the serial kernel before it. Wider one-step column
# blocks (768 programs instead of 3072) measured 8.0 on mla-tp-b6.
SERIAL_COMBINE_BYTES = 12 << 20


def combine_columns(num_splits: int, block_d: int) -> int:
    """Columns of one row a combine program merges: as many as keep its ``[splits, columns]`` tile within
    ``COMBINE_TILE_ELEMS`` (at least 16), at most the padded head dim ``block_d``."""
    return min(block_d, max(16, COMBINE_TILE_ELEMS // triton.next_power_of_2(num_splits)))


@triton.jit
def split_combine_kernel(
    part_o_ptr, part_lse_ptr, out_ptr, sink_ptr, block_index_ptr,
    H, num_splits, row_stride, split_stride, inner,
    stride_outer, stride_inner, stride_head,
    HEAD_DIM: tl.constexpr, BLOCK_DC: tl.constexpr, SPLITS: tl.constexpr, HAS_SINK: tl.constexpr,
    SERIAL: tl.constexpr, BLOCK_INDEX: tl.constexpr,
):
    """Grid ``(rows, cdiv(HEAD_DIM, BLOCK_DC))``: output row ``r = outer·H + head`` has its split s at workspace
    row ``r·row_stride + s·split_stride``; merged, sink added, normalized (rows with no visible key -> 0) and
    stored at ``blk·stride_outer + (outer % inner)·stride_inner + head·stride_head``, where ``blk`` is
    ``outer // inner``, or with ``BLOCK_INDEX`` the entry ``block_index[outer // inner]`` (blocks of output rows
    that lie anywhere: the paged warp-specialized kernel's split query blocks)."""
    row = tl.program_id(0)
    outer = row // H
    head = row % H
    offs_d = tl.program_id(1) * BLOCK_DC + tl.arange(0, BLOCK_DC)
    d_mask = offs_d < HEAD_DIM
    first = row.to(tl.int64) * row_stride
    if SERIAL:  # SPLITS unused
        acc, m_i, l_i = merge_splits(part_o_ptr, part_lse_ptr, first + tl.zeros([1], tl.int64), split_stride,
                                     num_splits, tl.full([1], True, tl.int1), offs_d, d_mask, HEAD_DIM)
    else:
        acc, m_i, l_i = merge_row_splits(part_o_ptr, part_lse_ptr, first, split_stride, num_splits, offs_d,
                                         d_mask, HEAD_DIM, SPLITS)
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + head + tl.zeros([1], tl.int32)) * LOG2E_C
        acc, m_i, l_i = add_sink(acc, m_i, l_i, sink2)
    o = normalize_rows(acc, l_i)
    if BLOCK_INDEX:
        blk = tl.load(block_index_ptr + outer // inner).to(tl.int64)
    else:
        blk = (outer // inner).to(tl.int64)
    base = (blk * stride_outer + (outer % inner).to(tl.int64) * stride_inner
            + head.to(tl.int64) * stride_head)
    tl.store(out_ptr + base + offs_d[None, :], o.to(out_ptr.dtype.element_ty), mask=d_mask[None, :])


def combine_splits(part_o: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor, *, rows: int, heads: int,
                   num_splits: int, row_stride: int, split_stride: int,
                   out_strides: tuple[int, int, int, int], sinks: torch.Tensor | None = None,
                   block_index: torch.Tensor | None = None) -> None:
    """Merge ``num_splits`` partials of each of ``rows`` output rows into ``out``. ``part_o``: contiguous fp32
    partials of ``D`` columns per workspace row (row ``r``'s split s at ``r·row_stride + s·split_stride``);
    ``part_lse``: their base-2 lse, same indexing; ``out_strides`` = ``(inner, stride_outer, stride_inner,
    stride_head)`` place row ``r = outer·heads + head`` (see ``split_combine_kernel``); ``sinks``: fp32 per head;
    ``block_index``: int32 per block of ``inner`` outer rows, the block's place in units of ``stride_outer``
    (default: the block's number)."""
    head_dim = part_o.shape[-1]
    block_d = triton.next_power_of_2(head_dim)
    splits = triton.next_power_of_2(num_splits)
    serial = splits != num_splits and rows * num_splits * head_dim * 4 >= SERIAL_COMBINE_BYTES
    block_dc = block_d if serial else combine_columns(num_splits, block_d)
    split_combine_kernel[(rows, triton.cdiv(block_d, block_dc))](
        part_o, part_lse, out, sinks if sinks is not None else part_lse,
        block_index if block_index is not None else part_lse,
        heads, num_splits, row_stride, split_stride, *out_strides,
        HEAD_DIM=head_dim, BLOCK_DC=block_dc, SPLITS=splits, HAS_SINK=sinks is not None, SERIAL=serial,
        BLOCK_INDEX=block_index is not None, num_warps=4 if serial or splits * block_dc >= 1024 else 1,
    )
