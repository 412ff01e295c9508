"""Warp-specialized absorbed-MLA decode for Hopper, written in Gluon (Triton's explicit-layout dialect).

Why: the Triton kernel (``kernel.py``) computes each score once but runs scores, softmax, the rescale of its
64 x 512 fp32 accumulator and P·V one after another: 358-378 TF/s on the compute-bound rows against FlashMLA /
FlashInfer's 550-600 (docs/perf/attn-mla.md). This kernel splits the work like the attn-core Gluon forward:

* a 1-warp loader partition issues the TMA copies: the program's 64 query heads once (latent halves ``q0`` /
  ``q1`` [64, 256] and the rope part ``qpe`` [64, PE]), then per key tile the two latent halves and the rope
  part of BLOCK_N keys into a ring of ``STAGES`` slots (``k_ready`` counts the bytes; a slot is refilled after
  both consumers released it on ``kv_free``). The values are the latent keys: no separate V copy.
* two 4-warp consumer partitions split the channels (``latent_ws.consume_keys``: partial scores exchanged
  through shared memory, the same softmax in both, each warpgroup's P·V on its own 256 latent columns, the next
  tile's scores in flight during the softmax), or (``ALTERNATING``) take turns scoring whole key blocks and hand
  P to each other (``latent_alt.consume_blocks``), then store their columns.

Grid ``(head blocks, KV splits, B)``: one program per (64-head block, split, request); the splits and their
merge are ``op.launch``'s (one split: the normalized output; several: a normalized fp32 partial and its base-2
log-sum-exp per split, merged by ``kernel_utils.split_combine``). Shapes: D = 512, PE = 64, 16-bit q / keys; query heads
past the KV head's group (groups under 64) are computed from whatever rows the Q box holds and never stored.
Keys past the split's end are masked; the latent rows of a tile past its request's keys are TMA's zeros (3-D
per-request descriptor), so P's zeros never meet a NaN / Inf of another request; rope rows there only feed
masked scores.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from attnops.attn_mla.latent_alt import consume_blocks, handoff_buffers
from attnops.attn_mla.latent_ws import EXCHANGE_LAYOUT, HALF, HEADS, consume_keys
from attnops.kernel_utils.gluon_fns import (
    invalidate_ring,
    release_count,
    ring_barriers,
    store_layout,
    to_store_layout,
    warpgroup_partition,
    wgmma_acc_layout,
    wgmma_lhs_layout,
)


@gluon.jit
def _split_keys(n_kv, split_len, BLOCK_N: gl.constexpr):
    """(start, end, tiles) of this program's split of its request's keys."""
    start = gl.program_id(1) * split_len
    end = gl.minimum(start + split_len, n_kv)
    return start, end, gl.cdiv(end - start, BLOCK_N)  # >= 1: the launcher makes no empty split and no empty cache


@gluon.jit
def _heads(hb, head_blocks_per_kv, group, layout: gl.constexpr):
    """(the program's 64 heads inside their group, their query head numbers) in 1-D ``layout``."""
    local = (hb % head_blocks_per_kv) * HEADS + gl.arange(0, HEADS, layout=layout)
    return local, (hb // head_blocks_per_kv) * group + local


@gluon.jit
def _store(acc, m_i, l_i, out_ptr, part_o_ptr, part_lse_ptr, H, group, head_blocks_per_kv, n_splits, stride_ob,
           stride_oh, dtype: gl.constexpr, WG: gl.constexpr, s_layout: gl.constexpr, o_layout: gl.constexpr,
           SPLIT: gl.constexpr):
    """Latent columns [256·WG, +256) of the program's heads: normalized output, or (``SPLIT``) the split's
    normalized fp32 partial and (warpgroup 0) its base-2 log-sum-exp. The tile is moved inside each warp to 16-byte
    pieces along the rows first (``gluon_fns.store_layout``: 16 ``STG.E.128`` a thread instead of 64 ``STG.E`` in
    16 bits, 32 instead of 64 ``STG.E.64`` in fp32)."""
    hb = gl.program_id(0)
    split = gl.program_id(1)
    b = gl.program_id(2)
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    out = acc / l_o[:, None]  # l >= 1: the row's largest score contributes 2^0
    if SPLIT:
        part_layout: gl.constexpr = store_layout(HALF, 32)
        local, heads = _heads(hb, head_blocks_per_kv, group, gl.SliceLayout(1, part_layout))
        cols = WG * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, part_layout))
        rows = ((b * H + heads).to(gl.int64) * n_splits + split)  # split 0's partial row of each head, plus split
        gl.store(part_o_ptr + rows[:, None] * (2 * HALF) + cols[None, :], to_store_layout(out),
                 mask=(local < group)[:, None])
        if WG == 0:
            lse_local, lse_heads = _heads(hb, head_blocks_per_kv, group, gl.SliceLayout(1, s_layout))
            lse_rows = (b * H + lse_heads).to(gl.int64) * n_splits + split
            gl.store(part_lse_ptr + lse_rows, m_i + gl.log2(l_i), mask=lse_local < group)
    else:
        out_layout: gl.constexpr = store_layout(HALF, dtype.primitive_bitwidth)
        local, heads = _heads(hb, head_blocks_per_kv, group, gl.SliceLayout(1, out_layout))
        cols = WG * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, out_layout))
        ptrs = out_ptr + b.to(gl.int64) * stride_ob + heads.to(gl.int64)[:, None] * stride_oh + cols[None, :]
        gl.store(ptrs, to_store_layout(out.to(dtype)), mask=(local < group)[:, None])


@gluon.jit
def _consumer(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, x_lo, x_hi, q_ready, k_ready, kv_free, xchg, out_ptr,
              part_o_ptr, part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len, n_splits, qk_scale, stride_ob,
              stride_oh, WG: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr):
    """Channel split: latent columns [256·WG, +256) of the program's 64 heads over the split's key tiles
    (``latent_ws.consume_keys``; ``x_lo`` / ``x_hi``: each warpgroup's partial scores), then their store."""
    q_half = (q_lo, q_hi)[WG]
    k_half = (k_lo, k_hi)[WG]
    s_layout: gl.constexpr = wgmma_acc_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_acc_layout(HALF)
    start, end, n_tiles = _split_keys(n_kv, split_len, BLOCK_N)
    mbarrier.wait(q_ready.index(0), 0)
    acc, m_i, l_i = consume_keys(q_half.index(0), qpe_smem.index(0), k_half, kpe_smem, (x_lo, x_hi)[WG],
                                 (x_lo, x_hi)[1 - WG], k_ready, kv_free, xchg, start, end, n_tiles, 0, qk_scale, WG,
                                 BLOCK_N, STAGES, True, s_layout, o_layout, wgmma_lhs_layout(HALF), False)
    _store(acc, m_i, l_i, out_ptr, part_o_ptr, part_lse_ptr, H, group, head_blocks_per_kv, n_splits, stride_ob,
           stride_oh, q_half.dtype, WG, s_layout, o_layout, SPLIT)


@gluon.jit
def _consumer_alt(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, p0, p1, st0, st1, full, empty, q_ready, k_ready,
                  kv_free, out_ptr, part_o_ptr, part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len, n_splits,
                  qk_scale, stride_ob, stride_oh, WG: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                  SPLIT: gl.constexpr, HALF_READY: gl.constexpr, THREAD_RELEASE: gl.constexpr,
                  LAZY_RESCALE: gl.constexpr):
    """Alternating blocks: latent columns [256·WG, +256) of the program's 64 heads, this warpgroup scoring every
    other key block (``latent_alt.consume_blocks``; ``p0`` / ``st0``: warpgroup 0's hand-off, ``p1`` / ``st1``
    warpgroup 1's), then their store."""
    s_layout: gl.constexpr = wgmma_acc_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_acc_layout(HALF)
    start, end, n_tiles = _split_keys(n_kv, split_len, BLOCK_N)
    mbarrier.wait(q_ready.index(0), 0)
    acc, m_i, l_i = consume_blocks(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, (k_lo, k_hi)[WG], (p0, p1)[WG],
                                   (p0, p1)[1 - WG], (st0, st1)[WG], (st0, st1)[1 - WG], full, empty, k_ready,
                                   kv_free, kv_free, start, end, n_tiles, 0, 0, 0, qk_scale, WG, BLOCK_N, STAGES, True,
                                   s_layout, o_layout, wgmma_lhs_layout(HALF), False, False, HALF_READY,
                                   THREAD_RELEASE, LAZY_RESCALE, False)  # (the queries are never released)
    _store(acc, m_i, l_i, out_ptr, part_o_ptr, part_lse_ptr, H, group, head_blocks_per_kv, n_splits, stride_ob,
           stride_oh, q_lo.dtype, WG, s_layout, o_layout, SPLIT)


@gluon.jit
def _loader(q_desc, qpe_desc, k_desc, kpe_desc, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, q_ready, k_ready, kv_free,
            H, n_kv, group, head_blocks_per_kv, split_len, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
            HALF_READY: gl.constexpr):
    """TMA producer: the program's 64 query heads, then every key tile of its split (``HALF_READY``: a tile's low
    latent half on its slot's first ready barrier, the high half and the rope keys on its second)."""
    hb = gl.program_id(0)
    split = gl.program_id(1)
    b = gl.program_id(2)
    kvh = hb // head_blocks_per_kv
    q_row = b * H + kvh * group + (hb % head_blocks_per_kv) * HEADS
    ready = q_ready.index(0)
    mbarrier.expect(ready, 2 * q_desc.block_type.nbytes + qpe_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], ready, q_lo.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row, HALF], ready, q_hi.index(0))
    tma.async_copy_global_to_shared(qpe_desc, [q_row, 0], ready, qpe_smem.index(0))
    start = split * split_len
    n_tiles = gl.cdiv(gl.minimum(start + split_len, n_kv) - start, BLOCK_N)
    key_row = b * n_kv + start  # (rope keys: 2-D rows; latent keys: request b, rows from start)
    k_col = kvh * (2 * HALF)
    pe_col = kvh * kpe_desc.block_type.shape[1]
    half_bytes: gl.constexpr = k_desc.block_type.nbytes
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(kv_free.index(slot), ((j // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        lo_ready = k_ready.index(slot)
        if HALF_READY:
            hi_ready = k_ready.index(STAGES + slot)
            mbarrier.expect(lo_ready, half_bytes)
            mbarrier.expect(hi_ready, half_bytes + kpe_desc.block_type.nbytes)
        else:
            hi_ready = lo_ready
            mbarrier.expect(lo_ready, 2 * half_bytes + kpe_desc.block_type.nbytes)
        row = key_row + j * BLOCK_N
        key = start + j * BLOCK_N
        lo_box = k_lo.index(slot).reshape([1, BLOCK_N, HALF])
        hi_box = k_hi.index(slot).reshape([1, BLOCK_N, HALF])
        tma.async_copy_global_to_shared(k_desc, [b, key, k_col], lo_ready, lo_box)
        tma.async_copy_global_to_shared(k_desc, [b, key, k_col + HALF], hi_ready, hi_box)
        tma.async_copy_global_to_shared(kpe_desc, [row, pe_col], hi_ready, kpe_smem.index(slot))


@gluon.jit
def mla_decode_ws_kernel(q_desc, qpe_desc, k_desc, kpe_desc, out_ptr, part_o_ptr, part_lse_ptr, H, n_kv, group,
                         head_blocks_per_kv, split_len, n_splits, qk_scale, stride_ob, stride_oh,
                         BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                         ALTERNATING: gl.constexpr, HALF_READY: gl.constexpr, THREAD_RELEASE: gl.constexpr,
                         LAZY_RESCALE: gl.constexpr):
    """Descriptors over 2-D row views: q ``[B·H, 512]`` in [64, 256] boxes, q_pe ``[B·H, PE]`` in [64, PE], rope
    keys ``[B·N_kv, H_kv·PE]`` in [BLOCK_N, PE]; latent keys per request, ``[B, N_kv, H_kv·512]`` in [1, BLOCK_N,
    256] boxes (zeros past N_kv: ``ws_launch._key_desc``).
    ``ALTERNATING``: the consumers alternate whole key blocks (``latent_alt``) instead of splitting the channels;
    ``HALF_READY`` (alternating only): two ready barriers a ring slot (``latent_alt._block_scores``);
    ``THREAD_RELEASE`` (alternating only): the consumers free ring slots one arrival per thread;
    ``LAZY_RESCALE`` (alternating only): O is rescaled only when some row's reference max moves (``latent_alt``).
    num_warps = 4 (consumer 0), plus the worker partitions (consumer 1: 4 warps, loader: 1 warp)."""
    dtype: gl.constexpr = q_desc.dtype
    PE: gl.constexpr = qpe_desc.block_type.shape[1]
    # the queries as one-slot buffers (the alternating consumer reads them through a runtime index: latent_alt)
    q_lo = gl.allocate_shared_memory(dtype, [1, HEADS, HALF], q_desc.layout)  # latent channels 0-255
    q_hi = gl.allocate_shared_memory(dtype, [1, HEADS, HALF], q_desc.layout)  # 256-511
    qpe_smem = gl.allocate_shared_memory(dtype, [1, HEADS, PE], qpe_desc.layout)
    # the latent key ring: 3-D boxes [1, BLOCK_N, 256] land as [BLOCK_N, 256] tiles (the slot is the leading dim)
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HALF], dtype)
    k_lo = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HALF], k_layout)
    k_hi = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HALF], k_layout)
    kpe_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, PE], kpe_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready.index(0), count=1)
    gl.static_assert(ALTERNATING or not HALF_READY, "half-slot ready barriers: the alternating consumer only")
    gl.static_assert(ALTERNATING or not THREAD_RELEASE, "per-thread releases: the alternating consumer only")
    gl.static_assert(ALTERNATING or not LAZY_RESCALE, "lazy rescale: the alternating consumer only")
    READY_PARTS: gl.constexpr = 2 if HALF_READY else 1
    # both consumers release a slot
    k_ready, kv_free = ring_barriers(STAGES, 1, release_count(2, THREAD_RELEASE), READY_PARTS)
    if ALTERNATING:
        # each warpgroup's P hand-off slot (64-key blocks: the rope slots) and its row maxima / sums
        p0, p1, st0, st1, full, empty = handoff_buffers(kpe_smem, BLOCK_N, PE, LAZY_RESCALE)
        fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
        consumer_args = (q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, p0, p1, st0, st1, full, empty, q_ready, k_ready,
                         kv_free, out_ptr, part_o_ptr, part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len,
                         n_splits, qk_scale, stride_ob, stride_oh)
        consumer_flags: gl.constexpr = (BLOCK_N, STAGES, SPLIT, HALF_READY, THREAD_RELEASE, LAZY_RESCALE)
        gl.warp_specialize([
            (warpgroup_partition, (gl.constexpr(_consumer_alt), consumer_args, 0, consumer_flags)),
            (warpgroup_partition, (gl.constexpr(_consumer_alt), consumer_args, 1, consumer_flags)),
            (_loader, (q_desc, qpe_desc, k_desc, kpe_desc, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, q_ready,
                       k_ready, kv_free, H, n_kv, group, head_blocks_per_kv, split_len, BLOCK_N, STAGES, HALF_READY)),
        ], [4, 1], [232, 24])  # (240: ptxas spilled 12 B of the second consumer)
        invalidate_ring(full, empty, 2)
    else:
        x_lo = gl.allocate_shared_memory(gl.float32, [2, HEADS, BLOCK_N], EXCHANGE_LAYOUT)  # warpgroup 0's partials
        x_hi = gl.allocate_shared_memory(gl.float32, [2, HEADS, BLOCK_N], EXCHANGE_LAYOUT)  # warpgroup 1's
        xchg = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(xchg.index(i), count=2)  # both consumers meet at an exchange
        fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
        consumer_args = (q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, x_lo, x_hi, q_ready, k_ready, kv_free, xchg,
                         out_ptr, part_o_ptr, part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len, n_splits,
                         qk_scale, stride_ob, stride_oh)
        consumer_flags: gl.constexpr = (BLOCK_N, STAGES, SPLIT)
        gl.warp_specialize([
            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
            (_loader, (q_desc, qpe_desc, k_desc, kpe_desc, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, q_ready,
                       k_ready, kv_free, H, n_kv, group, head_blocks_per_kv, split_len, BLOCK_N, STAGES, False)),
        ], [4, 1], [240, 24])
        for i in gl.static_range(2):
            mbarrier.invalidate(xchg.index(i))
    mbarrier.invalidate(q_ready.index(0))
    invalidate_ring(k_ready, kv_free, STAGES, READY_PARTS)
