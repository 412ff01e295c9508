"""Warp-specialized absorbed-MLA decode for Hopper, written in Gluon (Triton's explicit-layout dialect).

Why: the Triton kernel (``kernel.py``) computes each score once but runs scores, softmax, the rescale of its
64 x 512 fp32 accumulator and P·V one after another: 358-378 TF/s on the compute-bound rows against FlashMLA /
FlashInfer's 550-600 (docs/perf/attn-mla.md). This kernel splits the work like the attn-core Gluon forward:

* a 1-warp loader partition issues the TMA copies: the program's 64 query heads once (latent halves ``q0`` /
  ``q1`` [64, 256] and the rope part ``qpe`` [64, PE]), then per key tile the two latent halves and the rope
  part of BLOCK_N keys into a ring of ``STAGES`` slots (``k_ready`` counts the bytes; a slot is refilled after
  both consumers released it on ``kv_free``). The values are the latent keys: no separate V copy.
* two 4-warp consumer partitions split the channels, not the rows: warpgroup 0 owns latent channels 0-255 and
  the rope channels, warpgroup 1 latent channels 256-511. Each computes its partial scores (wgmma from shared
  memory), hands them to the other through a double-buffered fp32 exchange slot (``xchg``: both arrive, both
  wait), adds the other's, and then both hold the same full scores: the online softmax runs in both (the same
  arithmetic on the same values: identical m, l, P), and each multiplies P by its own 256 latent columns of the
  key tile (O = P·V on [64, 256] per warpgroup: 128 fp32 registers a thread instead of 256). No score is
  computed twice and no output column is shared, so the epilogue needs no exchange.
* overlap as in the attn-core kernel: the partial scores of tile j + 1 are issued before the softmax of tile j
  waits, and the P·V of tile j runs while the softmax of tile j + 1 does.

Grid ``(head blocks, KV splits, B)``: one program per (64-head block, split, request); the splits and their
merge are ``op.launch``'s (one split: the normalized output; several: a normalized fp32 partial and its base-2
log-sum-exp per split, merged by ``mla_combine_kernel``). Shapes: D = 512, PE = 64, 16-bit q / keys; query heads
past the KV head's group (groups under 64) are computed from whatever rows the Q box holds and never stored.
Keys past the split's end are masked; their rows (other keys of the cache, another request's included, or TMA's
zeros) are zeroed in each warpgroup's half of the last tile before its P·V (``_zero_rows_from``), so that P's
zeros never meet a NaN / Inf of another request.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

HEADS = gl.constexpr(64)  # query heads per program: one warpgroup's wgmma M, shared by both consumers
HALF = gl.constexpr(256)  # latent channels per consumer


@gluon.jit
def _partial_scores(q_half, k_half, qpe_smem, kpe_smem, k_ready, i, zero_s, WG: gl.constexpr, STAGES: gl.constexpr):
    """Issue this warpgroup's partial S of the ring's i-th key tile (async) once it has landed: its latent half,
    plus the rope channels in warpgroup 0."""
    slot = i % STAGES
    mbarrier.wait(k_ready.index(slot), (i // STAGES) & 1)
    s = warpgroup_mma(q_half, k_half.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    if WG == 0:
        s = warpgroup_mma(qpe_smem, kpe_smem.index(slot).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _full_scores(s, mine, theirs, xchg, x, s_layout: gl.constexpr):
    """Exchange number ``x`` of the program: write this warpgroup's partial scores to its slot x % 2 of
    ``mine``, meet the other warpgroup (both arrive, both wait: count 2), and add its partial from ``theirs``.
    A slot is written again two exchanges later, after both passed the exchange in between, so after both read
    it."""
    mine.index(x % 2).store(s)
    gl.thread_barrier()  # every thread's part stored before this warpgroup's arrival releases them
    mbarrier.arrive(xchg.index(x % 2), count=1)
    mbarrier.wait(xchg.index(x % 2), (x // 2) & 1)
    return s + theirs.index(x % 2).load(s_layout)


@gluon.jit
def _zero_rows_from(tile, valid, BLOCK_N: gl.constexpr):
    """Zero rows ``valid..`` of this warpgroup's own shared [BLOCK_N, 256] key half in place (its scores are
    done; no other partition reads it), ordered before the wgmma that reads it next."""
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # 16-byte pieces, 4 warps
    keys = tile.load(rows_layout)
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, rows_layout))
    tile.store(gl.where((rows < valid)[:, None], keys, gl.zeros_like(keys)))
    fence_async_shared()  # this thread's stores visible to the async proxy (wgmma) ...
    gl.thread_barrier()  # ... and every thread of the warpgroup done before the wgmma reads the tile


@gluon.jit
def _softmax(s, n0, end, m_i, l_i, qk_scale, BLOCK_N: gl.constexpr, s_layout: gl.constexpr,
             p_layout: gl.constexpr, o_layout: gl.constexpr, dtype: gl.constexpr):
    """Online-softmax step (base 2, the scale folded into exp2) of key tile [n0, n0 + BLOCK_N), keys >= end
    masked (only the split's last tile has any): (P as the P·V wgmma's register operand, the rescale factor in
    the accumulator's layout, m, l). ``kernel_utils.attention_fns.online_softmax_step``'s arithmetic with the
    wgmma layouts (a Gluon kernel cannot call ``triton.jit`` functions)."""
    if n0 + BLOCK_N > end:
        k_pos = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s = gl.where((k_pos < end)[None, :], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)  # every tile has a visible key: m_new is finite
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    return p_op, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), m_new, l_new


@gluon.jit
def _consumer(q_half, qpe_smem, k_half, kpe_smem, mine, theirs, q_ready, k_ready, kv_free, xchg, out_ptr, part_o_ptr,
              part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len, n_splits, qk_scale, stride_ob, stride_oh,
              WG: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr):
    """Latent columns [256·WG, +256) of the program's 64 heads over the split's key tiles, then their store.
    The ring needs two slots or more: tile j + 1 is awaited before tile j's slot is released.
    ``q_half`` / ``k_half``: this warpgroup's latent half of the queries and of the key ring; ``mine`` /
    ``theirs``: the two warpgroups' score-exchange slots."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    gl.static_assert(STAGES >= 2, "tile j + 1 is awaited before tile j's slot is released")
    dtype: gl.constexpr = q_half.dtype
    hb = gl.program_id(0)
    split = gl.program_id(1)
    b = gl.program_id(2)
    start = split * split_len
    end = gl.minimum(start + split_len, n_kv)
    n_tiles = gl.cdiv(end - start, BLOCK_N)  # >= 1: the launcher makes no empty split and no empty cache
    zero_s = gl.zeros([HEADS, BLOCK_N], gl.float32, layout=s_layout)
    m_i = gl.full([HEADS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([HEADS], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HEADS, HALF], gl.float32, layout=o_layout)
    mbarrier.wait(q_ready.index(0), 0)

    s = _partial_scores(q_half, k_half, qpe_smem, kpe_smem, k_ready, 0, zero_s, WG, STAGES)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    s = _full_scores(s, mine, theirs, xchg, 0, s_layout)
    p_op, alpha, m_i, l_i = _softmax(s, start, end, m_i, l_i, qk_scale, BLOCK_N, s_layout, p_layout, o_layout, dtype)
    for j in range(1, n_tiles):
        s_next = _partial_scores(q_half, k_half, qpe_smem, kpe_smem, k_ready, j, zero_s, WG, STAGES)
        slot = (j - 1) % STAGES
        acc = warpgroup_mma(p_op, k_half.index(slot), acc, is_async=True)  # O += P·V of tile j - 1
        s_next = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))  # the scores of j; P·V may run on
        s_next = _full_scores(s_next, mine, theirs, xchg, j, s_layout)
        p_next, alpha_next, m_i, l_i = _softmax(s_next, start + j * BLOCK_N, end, m_i, l_i, qk_scale, BLOCK_N,
                                                s_layout, p_layout, o_layout, dtype)
        # p_op stays live until its wgmma is waited for: its registers are read asynchronously
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
        mbarrier.arrive(kv_free.index(slot), count=1)
        acc = acc * alpha_next[:, None]
        p_op = p_next
    last = (n_tiles - 1) % STAGES
    n_last = start + (n_tiles - 1) * BLOCK_N
    if n_last + BLOCK_N > end:
        _zero_rows_from(k_half.index(last), end - n_last, BLOCK_N)
    acc = warpgroup_mma(p_op, k_half.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
    mbarrier.arrive(kv_free.index(last), count=1)

    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    out = acc / l_o[:, None]  # l >= 1: the row's largest score contributes 2^0
    local = (hb % head_blocks_per_kv) * HEADS + gl.arange(0, HEADS, layout=gl.SliceLayout(1, o_layout))
    heads = (hb // head_blocks_per_kv) * group + local
    cols = WG * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout))
    row_ok = (local < group)[:, None]
    if SPLIT:
        rows = ((b * H + heads).to(gl.int64) * n_splits + split)  # split 0's partial row of each head, plus split
        gl.store(part_o_ptr + rows[:, None] * (2 * HALF) + cols[None, :], out, mask=row_ok)
        if WG == 0:
            lse_rows = gl.convert_layout(rows, gl.SliceLayout(1, s_layout))
            lse_ok = gl.convert_layout(local < group, gl.SliceLayout(1, s_layout))
            gl.store(part_lse_ptr + lse_rows, m_i + gl.log2(l_i), mask=lse_ok)
    else:
        ptrs = out_ptr + b.to(gl.int64) * stride_ob + heads.to(gl.int64)[:, None] * stride_oh + cols[None, :]
        gl.store(ptrs, out.to(dtype), mask=row_ok)


@gluon.jit
def _loader(q_desc, qpe_desc, k_desc, kpe_desc, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, q_ready, k_ready, kv_free,
            H, n_kv, group, head_blocks_per_kv, split_len, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """TMA producer: the program's 64 query heads, then every key tile of its split."""
    hb = gl.program_id(0)
    split = gl.program_id(1)
    b = gl.program_id(2)
    kvh = hb // head_blocks_per_kv
    q_row = b * H + kvh * group + (hb % head_blocks_per_kv) * HEADS
    ready = q_ready.index(0)
    mbarrier.expect(ready, 2 * q_desc.block_type.nbytes + qpe_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], ready, q_lo)
    tma.async_copy_global_to_shared(q_desc, [q_row, HALF], ready, q_hi)
    tma.async_copy_global_to_shared(qpe_desc, [q_row, 0], ready, qpe_smem)
    start = split * split_len
    n_tiles = gl.cdiv(gl.minimum(start + split_len, n_kv) - start, BLOCK_N)
    key_row = b * n_kv + start
    k_col = kvh * (2 * HALF)
    pe_col = kvh * kpe_desc.block_type.shape[1]
    tile_bytes: gl.constexpr = 2 * k_desc.block_type.nbytes + kpe_desc.block_type.nbytes
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(kv_free.index(slot), ((j // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        tile_ready = k_ready.index(slot)
        mbarrier.expect(tile_ready, tile_bytes)
        row = key_row + j * BLOCK_N
        tma.async_copy_global_to_shared(k_desc, [row, k_col], tile_ready, k_lo.index(slot))
        tma.async_copy_global_to_shared(k_desc, [row, k_col + HALF], tile_ready, k_hi.index(slot))
        tma.async_copy_global_to_shared(kpe_desc, [row, pe_col], tile_ready, kpe_smem.index(slot))


@gluon.jit
def mla_decode_ws_kernel(q_desc, qpe_desc, k_desc, kpe_desc, out_ptr, part_o_ptr, part_lse_ptr, H, n_kv, group,
                         head_blocks_per_kv, split_len, n_splits, qk_scale, stride_ob, stride_oh,
                         BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr):
    """Descriptors over 2-D row views: q ``[B·H, 512]`` in [64, 256] boxes, q_pe ``[B·H, PE]`` in [64, PE],
    latent keys ``[B·N_kv, H_kv·512]`` in [BLOCK_N, 256], rope keys ``[B·N_kv, H_kv·PE]`` in [BLOCK_N, PE].
    num_warps = 4 (consumer 0), plus the worker partitions (consumer 1: 4 warps, loader: 1 warp)."""
    dtype: gl.constexpr = q_desc.dtype
    PE: gl.constexpr = qpe_desc.block_type.shape[1]
    q_lo = gl.allocate_shared_memory(dtype, [HEADS, HALF], q_desc.layout)  # latent channels 0-255
    q_hi = gl.allocate_shared_memory(dtype, [HEADS, HALF], q_desc.layout)  # 256-511
    qpe_smem = gl.allocate_shared_memory(dtype, [HEADS, PE], qpe_desc.layout)
    k_lo = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HALF], k_desc.layout)
    k_hi = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HALF], k_desc.layout)
    kpe_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, PE], kpe_desc.layout)
    # 8-byte pieces XOR-swizzled over 8 rows: a warp's accumulator fragment (8 rows x 4 column pairs per store)
    # meets 16 bank pairs instead of 4 (row-major fp32 rows of 32 keys all start on bank 0)
    xchg_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=2, per_phase=1, max_phase=8, order=[1, 0])
    x_lo = gl.allocate_shared_memory(gl.float32, [2, HEADS, BLOCK_N], xchg_layout)  # warpgroup 0's partials
    x_hi = gl.allocate_shared_memory(gl.float32, [2, HEADS, BLOCK_N], xchg_layout)  # warpgroup 1's
    q_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xchg = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready.index(0), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(kv_free.index(i), count=2)  # both consumers release a slot
    for i in gl.static_range(2):
        mbarrier.init(xchg.index(i), count=2)  # both consumers meet at an exchange
    fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
    gl.warp_specialize([
        (_consumer, (q_lo, qpe_smem, k_lo, kpe_smem, x_lo, x_hi, q_ready, k_ready, kv_free, xchg, out_ptr,
                     part_o_ptr, part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len, n_splits, qk_scale,
                     stride_ob, stride_oh, 0, BLOCK_N, STAGES, SPLIT)),
        (_consumer, (q_hi, qpe_smem, k_hi, kpe_smem, x_hi, x_lo, q_ready, k_ready, kv_free, xchg, out_ptr,
                     part_o_ptr, part_lse_ptr, H, n_kv, group, head_blocks_per_kv, split_len, n_splits, qk_scale,
                     stride_ob, stride_oh, 1, BLOCK_N, STAGES, SPLIT)),
        (_loader, (q_desc, qpe_desc, k_desc, kpe_desc, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, q_ready, k_ready,
                   kv_free, H, n_kv, group, head_blocks_per_kv, split_len, BLOCK_N, STAGES)),
    ], [4, 1], [240, 24])
    mbarrier.invalidate(q_ready.index(0))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_ready.index(i))
        mbarrier.invalidate(kv_free.index(i))
    for i in gl.static_range(2):
        mbarrier.invalidate(xchg.index(i))
