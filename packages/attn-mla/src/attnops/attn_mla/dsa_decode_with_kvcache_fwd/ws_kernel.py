"""Warp-specialized DSA (DeepSeek sparse attention) for Hopper, written in Gluon.

Why: the Triton kernel (``kernel.py``) runs at 200-250 TF/s against FlashMLA's sparse kernel at ~550
(docs/perf/attn-mla.md): gather, scores, softmax and P·V one after another. Here, per (query row, KV head,
64-head block) work item, after ``dsa_prepare_indices_kernel`` has packed each row's distinct valid slots
(``clean``, ``count``); a program runs one item or (persistent grid) every grid-th one:

* a 4-warp loader partition gathers the selected key rows: per tile of BLOCK_N selected slots the rows' latent
  halves and tail by ``cp.async`` (16-byte pieces, Hopper's TMA has no row gather) into a ring of
  ``STAGES`` slots; each loader thread arrives on the slot's barrier when its copies have landed (count: the
  128 loader threads), slots past ``count`` are zero-filled. A slot is refilled after both consumers released
  it (``kv_free``). The item's 64 query heads come by TMA (latent halves [64, 256] twice, the rope tail [64,
  TAIL]) into one slot, after the item's first tiles and once both consumers released the last item's queries.
* two 4-warp consumer partitions run ``latent_ws.consume_keys`` (channel split, partial scores exchanged, the
  same softmax in both, P·V on each one's 256 latent columns) or, ``ALTERNATING``, ``latent_alt.consume_blocks``
  (each scores every other tile whole and hands P to the other); a proxy fence orders the loader's generic-proxy
  copies before the wgmma reads them; then they store their output columns. A row with no valid slot stores
  zeros.

Shapes: D = 512, TAIL 64 or 0, 16-bit; q readable as a 2-D row view ``[B·S·H, D + TAIL]`` (TMA), the KV cache
any strides with 16-byte aligned rows.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
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

LOADER_WARPS = gl.constexpr(4)  # the gather's warps (warp_specialize's second worker)


@gluon.constexpr_function
def _alternating_registers(block_n, lazy_rescale):
    """Registers per thread of consumer 1 and the loader beside the alternating consumers (consumer 0 has the
    rest): at 232 / 40 the item loop's loader spilled 32 B on the 512-wide rows (the shared memory base, reloaded in
    its tile loop), so 224 / 48; 64-key tiles hold 4 indices and 4 row pointers a loader thread, twice with the
    prefetch, and spilled 16-20 B at 48 (persistent, rope tail; sm90_compile_attn_mla), so 56 there. With the lazy
    rescale consumer 0 (the default partition, 232 then) spilled 88-156 B of wgmma descriptors, reloaded once an item
    (H100, 2026-12-06: the d512-h64 rows with caches of >= 32 k rows 7 % slower, items of 16 tiles), and 28 B at
    248; so 200 / 48 there (consumer 0: 256, consumer 1 spill-free at 200)."""
    if lazy_rescale:
        return [200, 48]
    return [224, 56 if block_n == 64 else 48]


@gluon.jit
def _item(item, S, H_kv, group, head_blocks_per_kv):
    """(row = (b, s, KV head g), b, s, g, first query head of the block, the block's heads inside the group from)
    of work item ``item`` (items in launch order of the former 2-D grid: head blocks of a row adjacent)."""
    row = item // head_blocks_per_kv
    g = row % H_kv
    bs = row // H_kv
    local0 = (item % head_blocks_per_kv) * HEADS
    return row, bs // S, bs % S, g, g * group + local0, local0


@gluon.jit
def _item_tiles(item, count_ptr, S, H_kv, group, head_blocks_per_kv, BLOCK_N: gl.constexpr):
    """``_item``'s values, then the row's valid slot count and its tiles of BLOCK_N slots."""
    row, b, s, g, head0, local0 = _item(item, S, H_kv, group, head_blocks_per_kv)
    count = gl.load(count_ptr + row)
    return row, b, s, g, head0, local0, count, gl.cdiv(count, BLOCK_N)


@gluon.jit
def _normalized(acc, l_i, o_layout: gl.constexpr):
    """O / l of a consumer's rows (l >= 1: every item with a tile has a visible key)."""
    return acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]


@gluon.jit
def _store_rows(out, out_ptr, b, s, g, group, local0, stride_ob, stride_os, stride_oh, WG: gl.constexpr):
    """Store ``out`` [64, 256] f32 (the accumulator layout) as latent columns [256·WG, +256) of the item's heads
    (those of its group): cast, then moved inside each warp to 16-byte pieces along the rows (``store_layout``:
    16 ``STG.E.128`` a thread instead of 64 ``STG.E``)."""
    dtype: gl.constexpr = out_ptr.dtype.element_ty
    layout: gl.constexpr = store_layout(HALF, dtype.primitive_bitwidth)
    vals = to_store_layout(out.to(dtype))
    local = local0 + gl.arange(0, HEADS, layout=gl.SliceLayout(1, layout))
    cols = WG * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, layout))
    ptrs = (out_ptr + b.to(gl.int64) * stride_ob + s.to(gl.int64) * stride_os
            + (g * group + local).to(gl.int64)[:, None] * stride_oh + cols[None, :])
    gl.store(ptrs, vals, mask=(local < group)[:, None])


@gluon.jit
def _consumer(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, x_lo, x_hi, xchg, p0, p1, st0, st1, full, empty, q_ready,
              q_free, k_ready, kv_free, out_ptr, count_ptr, n_items, S, H_kv, group, head_blocks_per_kv, qk_scale,
              stride_ob, stride_os, stride_oh, WG: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              HAS_PE: gl.constexpr, ALTERNATING: gl.constexpr, HALF_READY: gl.constexpr, THREAD_RELEASE: gl.constexpr,
              LAZY_RESCALE: gl.constexpr, SPLIT_FREE: gl.constexpr):
    """Per work item, latent columns [256·WG, +256) of its 64 heads over the row's selected keys, then their store.
    Channel split (``latent_ws.consume_keys``): this warpgroup scores its latent half of every tile, the partial
    scores summed through ``x_lo`` / ``x_hi`` (warpgroup 0's / 1's) and ``xchg``. ``ALTERNATING``
    (``latent_alt.consume_blocks``): it scores every other tile whole and hands P over through ``p0`` / ``st0``
    (warpgroup 0's), ``p1`` / ``st1`` and ``full`` / ``empty``. (The other form's buffers are placeholders.)"""
    s_layout: gl.constexpr = wgmma_acc_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_acc_layout(HALF)
    q_half = (q_lo, q_hi)[WG]  # this warpgroup's latent half of the queries and keys
    k_half = (k_lo, k_hi)[WG]
    r0 = 0  # ring position of the item's first tile
    n_q = 0  # items whose queries were loaded before this one
    h0 = 0  # (ALTERNATING) hand-offs published so far by warpgroup 0 (it scores each item's tiles 0, 2, ...)
    h1 = 0  # and by warpgroup 1 (tiles 1, 3, ...)
    for item in range(gl.program_id(0), n_items, gl.num_programs(0)):
        row, b, s, g, head0, local0, count, n_tiles = _item_tiles(item, count_ptr, S, H_kv, group,
                                                                  head_blocks_per_kv, BLOCK_N)
        if n_tiles > 0:
            mbarrier.wait(q_ready.index(0), n_q & 1)
            if ALTERNATING:
                if WG == 0:
                    h_mine = h0
                    h_theirs = h1
                else:
                    h_mine = h1
                    h_theirs = h0
                # (consume_blocks releases the queries after this warpgroup's last scores: RELEASE_Q)
                acc, m_i, l_i = consume_blocks(q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, k_half, (p0, p1)[WG],
                                               (p0, p1)[1 - WG], (st0, st1)[WG], (st0, st1)[1 - WG], full, empty,
                                               k_ready, kv_free, q_free, 0, count, n_tiles, r0, h_mine, h_theirs,
                                               qk_scale, WG, BLOCK_N, STAGES, HAS_PE, s_layout, o_layout,
                                               wgmma_lhs_layout(HALF), True, True, HALF_READY, THREAD_RELEASE,
                                               LAZY_RESCALE, SPLIT_FREE)
            else:
                acc, m_i, l_i = consume_keys(q_half.index(0), qpe_smem.index(0), k_half, kpe_smem, (x_lo, x_hi)[WG],
                                             (x_lo, x_hi)[1 - WG], k_ready, kv_free, xchg, 0, count, n_tiles, r0,
                                             qk_scale, WG, BLOCK_N, STAGES, HAS_PE, s_layout, o_layout,
                                             wgmma_lhs_layout(HALF), True)
                mbarrier.arrive(q_free.index(0), count=1)  # every wgmma reading the queries has retired
            out = _normalized(acc, l_i, o_layout)
        else:  # no valid slot: zeros (the loader copies nothing)
            out = gl.zeros([HEADS, HALF], gl.float32, layout=o_layout)
        # (the output pointers made after the tiles: live across them they took registers the consumer needs)
        _store_rows(out, out_ptr, b, s, g, group, local0, stride_ob, stride_os, stride_oh, WG)
        r0 += n_tiles
        n_q += (n_tiles > 0).to(gl.int32)
        if ALTERNATING:
            h0 += (n_tiles + 1) // 2
            h1 += n_tiles // 2


@gluon.constexpr_function
def piece_layout(chunk):
    """The gather's 16-byte pieces over ``chunk`` columns: the loader's warps split the rows, a row's columns spread
    over its lanes."""
    return gl.BlockedLayout([1, 8], [32 * 8 // chunk, chunk // 8], [LOADER_WARPS.value, 1], [1, 0])


@gluon.constexpr_function
def index_layout(chunk):
    """Where the loader keeps a tile's slot indices: in the 64-column gather's row slice (2 per thread: no
    conversion at the gather); at 256 columns that slice holds 8 rows a thread and, prefetched a tile ahead, spilled
    (140 B), so one index a thread there and a conversion per gather."""
    if chunk == 64:
        return gl.SliceLayout(1, piece_layout(chunk))
    return gl.BlockedLayout([1], [32], [LOADER_WARPS.value], [0])


@gluon.jit
def _gather(dst, key_rows, col0, sel, WIDTH: gl.constexpr, CHUNK: gl.constexpr):
    """cp.async of [BLOCK_N, WIDTH] elements from columns col0.. of the selected rows (``key_rows``: their
    pointers, ``sel``: which are) into ``dst``; rows not ``sel`` are zero-filled. CHUNK columns per copy: with
    CHUNK = 64 (one 128-byte swizzle row) two 16-byte pieces a loader thread, which fits the 40 registers the
    loader has beside the alternating consumers (256 columns at once: 8 pieces a thread, and ptxas spilled); but
    Triton 3.6's shared-memory barrier pass cannot tell the chunks of one buffer apart and puts a barrier of the
    loader's warps between consecutive copies, so the channel split (56 registers) copies 256 at once."""
    layout: gl.constexpr = piece_layout(CHUNK)
    rows = gl.convert_layout(key_rows, gl.SliceLayout(1, layout))  # (a no-op where index_layout is this slice)
    ok = gl.convert_layout(sel, gl.SliceLayout(1, layout))
    cols = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))
    for c in gl.static_range(WIDTH // CHUNK):
        async_copy.async_copy_global_to_shared(dst.slice(c * CHUNK, CHUNK, dim=1),
                                               rows[:, None] + (col0 + c * CHUNK + cols)[None, :], mask=ok[:, None])


@gluon.jit
def _gather_half(k_lo, k_hi, slot, half, key_rows, sel, CHUNK: gl.constexpr):
    """``_gather`` of the selected rows' latent half ``half`` (0: channels 0-255 into ``k_lo``, 1: 256-511 into
    ``k_hi``) into ring slot ``slot``."""
    if half == 0:
        _gather(k_lo.index(slot), key_rows, 0, sel, HALF, CHUNK)
    else:
        _gather(k_hi.index(slot), key_rows, HALF, sel, HALF, CHUNK)


@gluon.jit
def _load_queries(q_desc, qpe_desc, q_lo, q_hi, qpe_smem, q_ready, q_free, item, n_q, S, H, H_kv, group,
                  head_blocks_per_kv, TAIL: gl.constexpr):
    """Work item ``item``'s 64 query heads by TMA (latent halves and the rope tail) into the one query slot, once
    both consumers have retired the previous item's scores (``n_q``: items whose queries were loaded before)."""
    row, b, s, g, head0, _ = _item(item, S, H_kv, group, head_blocks_per_kv)  # (recomputed: fewer values live)
    q_row = (b * S + s) * H + head0
    mbarrier.wait(q_free.index(0), (n_q & 1) ^ 1)  # a fresh barrier passes parity 1
    ready = q_ready.index(0)
    if TAIL > 0:
        mbarrier.expect(ready, 2 * q_desc.block_type.nbytes + qpe_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(qpe_desc, [q_row, 2 * HALF], ready, qpe_smem.index(0))
    else:
        mbarrier.expect(ready, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], ready, q_lo.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row, HALF], ready, q_hi.index(0))


@gluon.jit
def _loader(q_desc, qpe_desc, kv_ptr, clean_ptr, count_ptr, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, q_ready,
            q_free, k_ready, kv_free, n_items, S, H, H_kv, group, head_blocks_per_kv, stride_kb, stride_kt, stride_kh,
            TAIL: gl.constexpr, BLOCK_K: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
            CHUNK: gl.constexpr, HALF_READY: gl.constexpr, SPLIT_FREE: gl.constexpr):
    """Per work item: the selected rows of every tile by cp.async gathers (``_gather``) and the query heads by TMA
    (``_load_queries``): a program's first queries before their item's tiles (nothing to wait for: issued after
    the first ring fill they reached the consumers ~4 tile gathers late), later ones after their item's first ring
    fill (those tiles wait only for the slots of the previous item's last tiles, the queries for its last scores;
    loaded first, they would hold the tiles back). ``HALF_READY``: each thread arrives on its slot's first ready
    barrier once its copies of the low latent half have landed, on the second after the rest. ``SPLIT_FREE``
    (``latent_alt``, "Split frees"): the half that the block's scoring warpgroup frees first (warpgroup 0 the low,
    1 the high; blocks alternate from each item's first), once it is free, then the other half and the rope
    channels once that one is."""
    r0 = 0  # ring position of the item's first tile
    n_q = 0  # items whose queries were loaded before this one
    for item in range(gl.program_id(0), n_items, gl.num_programs(0)):
        row, b, s, g, head0, _, count, n_tiles = _item_tiles(item, count_ptr, S, H_kv, group, head_blocks_per_kv,
                                                             BLOCK_N)
        kv_base = b.to(gl.int64) * stride_kb + g.to(gl.int64) * stride_kh
        idx_row = clean_ptr + row.to(gl.int64) * BLOCK_K
        if (n_q == 0) & (n_tiles > 0):  # the program's first queries: nothing to wait for, so before its tiles
            _load_queries(q_desc, qpe_desc, q_lo, q_hi, qpe_smem, q_ready, q_free, item, n_q, S, H, H_kv, group,
                          head_blocks_per_kv, TAIL)
        # Each tile's slot indices are loaded one tile ahead, before the wait for its slot: the index load (an L2
        # round trip) then overlaps the wait and the previous tile's copies instead of sitting between the slot
        # coming free and its gathers being issued (docs/perf/attn-mla.md, "DSA: where the 0.55-0.60x goes").
        lanes = gl.arange(0, BLOCK_N, layout=index_layout(CHUNK))
        idx = gl.load(idx_row + lanes, mask=lanes < count, other=0)
        for r in range(r0, r0 + n_tiles):
            slot = r % STAGES
            n = lanes + (r - r0) * BLOCK_N  # (recomputed, not carried: one value fewer live in the loader)
            sel = n < count
            n_next = n + BLOCK_N
            idx_next = gl.load(idx_row + n_next, mask=n_next < count, other=0)
            phase = ((r // STAGES) & 1) ^ 1  # a fresh barrier passes parity 1
            if SPLIT_FREE:  # each half once its warpgroup has freed it, the block's owner's first (latent_alt)
                owner = (r - r0) % 2
                mbarrier.wait(kv_free.index(owner * STAGES + slot), phase)
            else:
                mbarrier.wait(kv_free.index(slot), phase)
            # every row starts on 16 bytes (the launcher keeps the cache strides multiples of 8 elements,
            # ws_launch.refusal): said here so that the 16-byte cp.async pieces compile for padded rows too (Triton
            # only specializes strides that are multiples of 16 elements)
            offsets = gl.multiple_of(kv_base + idx.to(gl.int64) * stride_kt, 8)
            key_rows = kv_ptr + offsets
            # (two branches, not one order chosen by a value: with the half a constant 0, the non-split builds' LLVM
            # lowering failed in Triton 3.6, sm_90 offline 2026-12-07)
            if SPLIT_FREE:
                _gather_half(k_lo, k_hi, slot, owner, key_rows, sel, CHUNK)
                async_copy.mbarrier_arrive(k_ready.index(slot), increment_count=False)
                mbarrier.wait(kv_free.index((1 - owner) * STAGES + slot), phase)
                _gather_half(k_lo, k_hi, slot, 1 - owner, key_rows, sel, CHUNK)
            else:
                _gather(k_lo.index(slot), key_rows, 0, sel, HALF, CHUNK)
                if HALF_READY:  # (an arrival counts only the copies this thread issued before it)
                    async_copy.mbarrier_arrive(k_ready.index(slot), increment_count=False)
                _gather(k_hi.index(slot), key_rows, HALF, sel, HALF, CHUNK)
            if TAIL > 0:
                _gather(kpe_smem.index(slot), key_rows, 2 * HALF, sel, TAIL, TAIL)
            if HALF_READY:
                async_copy.mbarrier_arrive(k_ready.index(STAGES + slot), increment_count=False)
            else:  # once this thread's copies land
                async_copy.mbarrier_arrive(k_ready.index(slot), increment_count=False)
            if (n_q > 0) & (r - r0 == gl.minimum(n_tiles, STAGES) - 1):  # the item's first ring fill is issued
                _load_queries(q_desc, qpe_desc, q_lo, q_hi, qpe_smem, q_ready, q_free, item, n_q, S, H, H_kv, group,
                              head_blocks_per_kv, TAIL)
            idx = idx_next
        r0 += n_tiles
        n_q += (n_tiles > 0).to(gl.int32)


@gluon.jit
def dsa_decode_ws_kernel(q_desc, qpe_desc, kv_ptr, clean_ptr, count_ptr, out_ptr, n_items, S, H, H_kv, group,
                         head_blocks_per_kv, qk_scale, stride_kb, stride_kt, stride_kh, stride_ob, stride_os,
                         stride_oh, TAIL: gl.constexpr, BLOCK_K: gl.constexpr, BLOCK_N: gl.constexpr,
                         STAGES: gl.constexpr, ALTERNATING: gl.constexpr, HALF_READY: gl.constexpr,
                         THREAD_RELEASE: gl.constexpr, LAZY_RESCALE: gl.constexpr, SPLIT_FREE: gl.constexpr):
    """Grid: programs over ``n_items`` work items (head blocks per KV head x B·S·H_kv rows), program p taking items
    p, p + grid, ... (one each, or a persistent grid: the ring, query slot and hand-offs carry on from item to
    item, so the next item's keys and queries load during the last tiles and the stores of the one before).
    ``q_desc``: q as ``[B·S·H, D + TAIL]`` in [64, 256] boxes; ``qpe_desc``: the same rows in [64, TAIL] boxes (any
    descriptor when TAIL = 0). num_warps = 4 (consumer 0), plus the worker partitions (consumer 1: 4 warps, loader:
    4 warps). ``HALF_READY`` (alternating only): two ready barriers a ring slot (``latent_alt._block_scores``);
    ``THREAD_RELEASE`` (alternating only): the consumers free ring slots one arrival per thread;
    ``LAZY_RESCALE`` (alternating only): O is rescaled only when some row's reference max moves (``latent_alt``);
    ``SPLIT_FREE`` (with ``HALF_READY``): ring slots freed and refilled by latent halves (``latent_alt``)."""
    gl.static_assert(ALTERNATING or not LAZY_RESCALE, "lazy rescale: the alternating consumer only")
    gl.static_assert(ALTERNATING or not HALF_READY, "half-slot ready barriers: the alternating consumer only")
    gl.static_assert(ALTERNATING or not THREAD_RELEASE, "per-thread releases: the alternating consumer only")
    gl.static_assert(HALF_READY or not SPLIT_FREE, "split frees: with half-slot ready barriers only")
    # both consumers release a slot, or each its half of it
    FREES: gl.constexpr = release_count(1 if SPLIT_FREE else 2, THREAD_RELEASE)
    READY_PARTS: gl.constexpr = 2 if HALF_READY else 1
    FREE_PARTS: gl.constexpr = 2 if SPLIT_FREE else 1
    dtype: gl.constexpr = q_desc.dtype
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HALF], dtype)
    # the queries as one-slot buffers (the alternating consumer reads them through a runtime index: latent_alt)
    q_lo = gl.allocate_shared_memory(dtype, [1, HEADS, HALF], q_desc.layout)
    q_hi = gl.allocate_shared_memory(dtype, [1, HEADS, HALF], q_desc.layout)
    k_lo = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HALF], k_layout)
    k_hi = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HALF], k_layout)
    if TAIL > 0:
        qpe_smem = gl.allocate_shared_memory(dtype, [1, HEADS, TAIL], qpe_desc.layout)
        kpe_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, TAIL],
                                             gl.NVMMASharedLayout.get_default_for([BLOCK_N, TAIL], dtype))
    else:  # (never read: no rope channels)
        qpe_smem = q_lo
        kpe_smem = k_lo
    q_ready, q_free = ring_barriers(1, 1, 2)  # the query slot: TMA fills it, both consumers release it
    k_ready, kv_free = ring_barriers(STAGES, 32 * LOADER_WARPS, FREES, READY_PARTS, FREE_PARTS)
    if ALTERNATING:
        # each warpgroup's P hand-off slot (64-key tiles with the rope tail: the rope slots) and its row maxima / sums
        p0, p1, st0, st1, full, empty = handoff_buffers(kpe_smem, BLOCK_N, TAIL, LAZY_RESCALE)
        fence_async_shared()
        consumer_args = (q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, p0, p1, q_ready, p0, p1, st0, st1, full, empty,
                         q_ready, q_free, k_ready, kv_free, out_ptr, count_ptr, n_items, S, H_kv, group,
                         head_blocks_per_kv, qk_scale, stride_ob, stride_os, stride_oh)
        consumer_flags: gl.constexpr = (BLOCK_N, STAGES, TAIL > 0, True, HALF_READY, THREAD_RELEASE, LAZY_RESCALE,
                                         SPLIT_FREE)
        gl.warp_specialize([
            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
            (_loader, (q_desc, qpe_desc, kv_ptr, clean_ptr, count_ptr, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem,
                       q_ready, q_free, k_ready, kv_free, n_items, S, H, H_kv, group, head_blocks_per_kv, stride_kb,
                       stride_kt, stride_kh, TAIL, BLOCK_K, BLOCK_N, STAGES, 64, HALF_READY, SPLIT_FREE)),
        ], [4, LOADER_WARPS], _alternating_registers(BLOCK_N, LAZY_RESCALE))
        invalidate_ring(full, empty, 2)
    else:
        x_lo = gl.allocate_shared_memory(gl.float32, [2, HEADS, BLOCK_N], EXCHANGE_LAYOUT)
        x_hi = gl.allocate_shared_memory(gl.float32, [2, HEADS, BLOCK_N], EXCHANGE_LAYOUT)
        xchg = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(xchg.index(i), count=2)
        fence_async_shared()
        consumer_args = (q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem, x_lo, x_hi, xchg, x_lo, x_hi, x_lo, x_hi, xchg,
                         xchg, q_ready, q_free, k_ready, kv_free, out_ptr, count_ptr, n_items, S, H_kv, group,
                         head_blocks_per_kv, qk_scale, stride_ob, stride_os, stride_oh)
        consumer_flags: gl.constexpr = (BLOCK_N, STAGES, TAIL > 0, False, False, False, False, False)
        gl.warp_specialize([
            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
            (_loader, (q_desc, qpe_desc, kv_ptr, clean_ptr, count_ptr, q_lo, q_hi, qpe_smem, k_lo, k_hi, kpe_smem,
                       q_ready, q_free, k_ready, kv_free, n_items, S, H, H_kv, group, head_blocks_per_kv, stride_kb,
                       stride_kt, stride_kh, TAIL, BLOCK_K, BLOCK_N, STAGES, HALF, False, False)),
        ], [4, LOADER_WARPS], [224, 56])  # (224 + 224 + 56) x 128 <= 64 K registers; 232 / 40 spilled 32 B (loader)
        for i in gl.static_range(2):
            mbarrier.invalidate(xchg.index(i))
    invalidate_ring(q_ready, q_free, 1)
    invalidate_ring(k_ready, kv_free, STAGES, READY_PARTS, FREE_PARTS)
