"""The split-KV combine launch the split attention kernels share (GQA dense / varlen, MLA decode).

A split kernel leaves, per output row (a (token, head) or (request, head) pair) and split, an fp32 partial
normalized by its own sum and its base-2 log-sum-exp. ``combine_splits`` merges them: one program per output row
and ``combine_columns`` of its columns, all of the row's splits loaded at once as one ``[splits, columns]`` tile
(``attention_fns.merge_row_splits``), so the merge costs one L2 round trip whatever the split count and a single
token's merge still spreads over ``heads · D / columns`` programs. H200 (2026-12-03, GQADenseFwd): merged one split
at a time it took 5.9 µs of gemma-2b-8k-bs1's 16.7 at 32 splits; in one step the whole row took 8.3 µs at 64
splits (benchmarks/results/h200/20261203-1125-attn-core-dense-combine.jsonl).
"""

import torch
import triton
import triton.language as tl

from .attention_fns import LOG2E_C, add_sink, merge_row_splits, normalize_rows

# fp32 elements a combine program loads (all splits of its columns at once: 16 a thread at 4 warps)
COMBINE_TILE_ELEMS = 2048


def combine_columns(num_splits: int, block_d: int) -> int:
    """Columns of one row a combine program merges: as many as keep its ``[splits, columns]`` tile within
    ``COMBINE_TILE_ELEMS`` (at least 16), at most the padded head dim ``block_d``."""
    return min(block_d, max(16, COMBINE_TILE_ELEMS // triton.next_power_of_2(num_splits)))


@triton.jit
def split_combine_kernel(
    part_o_ptr, part_lse_ptr, out_ptr, sink_ptr,
    H, num_splits, row_stride, split_stride, inner,
    stride_outer, stride_inner, stride_head,
    HEAD_DIM: tl.constexpr, BLOCK_DC: tl.constexpr, SPLITS: tl.constexpr, HAS_SINK: tl.constexpr,
):
    """Grid ``(rows, cdiv(HEAD_DIM, BLOCK_DC))``: output row ``r = outer·H + head`` has its split s at workspace
    row ``r·row_stride + s·split_stride``; merged, sink added, normalized (rows with no visible key -> 0) and
    stored at ``(outer // inner)·stride_outer + (outer % inner)·stride_inner + head·stride_head``."""
    row = tl.program_id(0)
    outer = row // H
    head = row % H
    offs_d = tl.program_id(1) * BLOCK_DC + tl.arange(0, BLOCK_DC)
    d_mask = offs_d < HEAD_DIM
    acc, m_i, l_i = merge_row_splits(part_o_ptr, part_lse_ptr, row.to(tl.int64) * row_stride, split_stride,
                                     num_splits, offs_d, d_mask, HEAD_DIM, SPLITS)
    if HAS_SINK:
        sink2 = tl.load(sink_ptr + head + tl.zeros([1], tl.int32)) * LOG2E_C
        acc, m_i, l_i = add_sink(acc, m_i, l_i, sink2)
    o = normalize_rows(acc, l_i)
    base = ((outer // inner).to(tl.int64) * stride_outer + (outer % inner).to(tl.int64) * stride_inner
            + head.to(tl.int64) * stride_head)
    tl.store(out_ptr + base + offs_d[None, :], o.to(out_ptr.dtype.element_ty), mask=d_mask[None, :])


def combine_splits(part_o: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor, *, rows: int, heads: int,
                   num_splits: int, row_stride: int, split_stride: int,
                   out_strides: tuple[int, int, int, int], sinks: torch.Tensor | None = None) -> None:
    """Merge ``num_splits`` partials of each of ``rows`` output rows into ``out``. ``part_o``: contiguous fp32
    partials of ``D`` columns per workspace row (row ``r``'s split s at ``r·row_stride + s·split_stride``);
    ``part_lse``: their base-2 lse, same indexing; ``out_strides`` = ``(inner, stride_outer, stride_inner,
    stride_head)`` place row ``r = outer·heads + head`` (see ``split_combine_kernel``); ``sinks``: fp32 per head."""
    head_dim = part_o.shape[-1]
    block_d = triton.next_power_of_2(head_dim)
    splits = triton.next_power_of_2(num_splits)
    block_dc = combine_columns(num_splits, block_d)
    split_combine_kernel[(rows, triton.cdiv(block_d, block_dc))](
        part_o, part_lse, out, sinks if sinks is not None else part_lse,
        heads, num_splits, row_stride, split_stride, *out_strides,
        HEAD_DIM=head_dim, BLOCK_DC=block_dc, SPLITS=splits, HAS_SINK=sinks is not None,
        num_warps=4 if splits * block_dc >= 1024 else 1,
    )
