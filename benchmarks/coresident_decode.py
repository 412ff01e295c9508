"""A paged GQA decode sized to run beside the persistent warp-specialized prefill on the same SMs (the co-resident
probe of issue 4's serving-step floor, docs/perf/attn-core.md, forty-ninth to fifty-first sessions): the next step
after the probe's plain memory stream, with the decode's math in it. Measured in the fifty-first session: beside
the prefill it runs ~30 % slower than alone, like the plain stream, so the co-resident form was closed. Probe
code, not an op: every decode request has one query token over all its ``kv_len`` keys (a multiple of ``chunk``),
no mask, sinks, softcap or RoPE.

Work items are (request, KV head, chunk of keys), taken from a shared counter (``next_ptr``, zero before the
launch), so a program that starts late or shares its SM with a busy prefill program takes fewer. An item's G query
heads are one 16-row ``tl.dot`` operand (rows G..15 zero): mma.sync, which 4 warps issue without the wgmma
warpgroup's register cost. The online softmax, the partials' form (normalized output and base-2 lse per (request,
head) row and chunk) and their merge (``merge``: ``kernel_utils.split_combine``, ~4 MB; checked, not timed) are the
ones the split attention kernels share."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnops.kernel_utils.attention_fns import normalize_rows, online_softmax_step, row_lse2
from attnops.kernel_utils.split_combine import combine_splits


@triton.jit
def paged_decode_chunks_kernel(q_ptr, k_ptr, v_ptr, table_ptr, o_ptr, lse_ptr, next_ptr, n_items, scale_log2,
                               n_kv_heads, stride_qt, stride_qh, stride_kp, stride_ks, stride_kh, stride_tb,
                               G: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, CHUNK: tl.constexpr,
                               CHUNKS: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    rows = tl.arange(0, 16)  # tl.dot's smallest M: the G <= 16 query heads of a KV head, zero-padded
    cols = tl.arange(0, D)
    keys = tl.arange(0, BLOCK_N)
    slots = tl.arange(0, CHUNK // PAGE)  # (BLOCK_N divides PAGE, PAGE divides CHUNK)
    item = tl.atomic_add(next_ptr, 1)
    while item < n_items:
        chunk = item % CHUNKS
        head = (item // CHUNKS) % n_kv_heads
        req = item // (CHUNKS * n_kv_heads)
        q = tl.load(q_ptr + req.to(tl.int64) * stride_qt + (head * G + rows)[:, None] * stride_qh + cols[None, :],
                    mask=rows[:, None] < G, other=0.0)
        m = tl.full([16], float("-inf"), tl.float32)
        l = tl.zeros([16], tl.float32)
        acc = tl.zeros([16, D], tl.float32)
        # the chunk's page ids loaded once: no load in the loop feeds a K / V address, so the pipeliner can issue
        # the K / V loads STAGES - 1 tiles ahead (with the page id loaded in the loop it kept one)
        pages = tl.load(table_ptr + req * stride_tb + chunk * (CHUNK // PAGE) + slots).to(tl.int64)
        for n0 in tl.range(0, CHUNK, BLOCK_N, num_stages=STAGES):
            page = tl.sum(tl.where(slots == n0 // PAGE, pages, 0))
            at = page * stride_kp + (n0 % PAGE + keys) * stride_ks + head * stride_kh
            k = tl.load(k_ptr + at[:, None] + cols[None, :])
            p, alpha, m, l = online_softmax_step(tl.dot(q, tl.trans(k)), m, l, scale_log2)
            v = tl.load(v_ptr + at[:, None] + cols[None, :])
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        keep = rows < G
        # workspace row of (request, query head, chunk): the combine's row-major (row, split) order
        part = ((item // CHUNKS).to(tl.int64) * G + rows) * CHUNKS + chunk
        tl.store(o_ptr + part[:, None] * D + cols[None, :], normalize_rows(acc, l), mask=keep[:, None])
        tl.store(lse_ptr + part, row_lse2(m, l), mask=keep)
        item = tl.atomic_add(next_ptr, 1)


def chunk_count(kv_len: int, chunk: int, page: int, block_n: int) -> int:
    """Chunks of ``chunk`` keys in ``kv_len``; refuses tilings the kernel does not handle."""
    if kv_len % chunk or chunk % page or page % block_n or (chunk // page) & (chunk // page - 1):
        raise ValueError(f"coresident_decode: need kv_len ({kv_len}) a multiple of chunk ({chunk}), chunk a "
                         f"power-of-two multiple of page ({page}), page a multiple of block_n ({block_n})")
    return kv_len // chunk


def merge(o_part: torch.Tensor, lse_part: torch.Tensor, batch: int, heads: int, chunks: int) -> torch.Tensor:
    """[batch, heads, D] fp32 from the partials (``[batch · heads · chunks, D]`` and ``[batch · heads · chunks]``)."""
    out = torch.empty(batch, heads, o_part.shape[-1], dtype=torch.float32, device=o_part.device)
    combine_splits(o_part, lse_part, out, rows=batch * heads, heads=heads, num_splits=chunks, row_stride=chunks,
                   split_stride=1, out_strides=(1, out.stride(0), 0, out.stride(1)))
    return out
