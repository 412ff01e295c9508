"""A paged GQA decode sized to run beside the persistent warp-specialized prefill on the same SMs (the co-resident
probe of issue 4's serving-step floor, docs/perf/attn-core.md, forty-ninth and fiftieth sessions): the next step
after the probe's plain memory stream, with the decode's math in it. Probe code, not an op: every decode request
has one query token over all its ``kv_len`` keys (a multiple of ``chunk``), no mask, sinks, softcap or RoPE.

Work items are (request, KV head, chunk of keys), taken from a shared counter (``next_ptr``, zero before the
launch), so a program that starts late or shares its SM with a busy prefill program takes fewer. An item's G query
heads are one 16-row ``tl.dot`` operand (rows G..15 zero): mma.sync, which 4 warps issue without the wgmma
warpgroup's register cost. Each item writes its unnormalized output, row max and row sum (base 2); ``combine``
merges the chunks in torch (checked, not timed: ~4 MB of partials)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def paged_decode_chunks_kernel(q_ptr, k_ptr, v_ptr, table_ptr, o_ptr, m_ptr, l_ptr, next_ptr, n_items, scale_log2,
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
            s = tl.dot(q, tl.trans(k)) * scale_log2
            m_new = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(s - m_new[:, None])
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + at[:, None] + cols[None, :])
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m = m_new
        keep = rows < G
        out = item.to(tl.int64) * G
        tl.store(o_ptr + (out + rows)[:, None] * D + cols[None, :], acc, mask=keep[:, None])
        tl.store(m_ptr + out + rows, m, mask=keep)
        tl.store(l_ptr + out + rows, l, mask=keep)
        item = tl.atomic_add(next_ptr, 1)


def chunk_count(kv_len: int, chunk: int, page: int, block_n: int) -> int:
    """Chunks of ``chunk`` keys in ``kv_len``; refuses tilings the kernel does not handle."""
    if kv_len % chunk or chunk % page or page % block_n or (chunk // page) & (chunk // page - 1):
        raise ValueError(f"coresident_decode: need kv_len ({kv_len}) a multiple of chunk ({chunk}), chunk a "
                         f"power-of-two multiple of page ({page}), page a multiple of block_n ({block_n})")
    return kv_len // chunk


def combine(o_part, m_part, l_part, batch: int, n_kv_heads: int, chunks: int):
    """[batch, H_kv · G, D] fp32 from the items' partials (items ordered request, KV head, chunk)."""
    g, d = o_part.shape[1], o_part.shape[2]
    o = o_part.view(batch, n_kv_heads, chunks, g, d)
    m = m_part.view(batch, n_kv_heads, chunks, g)
    l = l_part.view(batch, n_kv_heads, chunks, g)
    top = m.amax(2, keepdim=True)
    w = (m - top).exp2()
    out = (o * w[..., None]).sum(2) / (l * w).sum(2)[..., None]
    return out.reshape(batch, n_kv_heads * g, d)
