"""Warp-specialized flash forward for Hopper, written in Gluon (Triton's explicit-layout dialect).

Why: the Triton flash kernel (``kernel.py``) tops out at ~320-410 TF/s on the compute-bound prefill rows,
0.65-0.75x FA3, because every warp loads, multiplies and runs the softmax in turn. Triton 3.6's automatic warp
specialization computed wrong results on our loops (docs/perf/attn-core.md, tenth session); Gluon states the
partitions, barriers and wgmma waits by hand, as FA3 does:

* a 1-warp loader partition issues the TMA copies: a work tile's two 64-row Q tiles into one of ``Q_BUFS`` Q
  buffers (two up to D = 128: the next tile's Q loads while the current tile computes; one at D = 256, for
  shared memory; a buffer is refilled after both consumers released it on ``q_free``), then K and V tiles into
  a ring of ``STAGES`` shared-memory slots (``k_ready`` / ``v_ready`` count the bytes; a slot is refilled after
  both consumers released it on ``kv_free``);
* two 4-warp consumer partitions (the default partition and one worker) own 64 query rows each: S = Q·Kᵀ by
  wgmma from shared memory, the online softmax in registers (base 2, ``sm_scale·log2 e`` folded into exp2),
  then O += P·V with P in registers. While one consumer runs its softmax the other's wgmma keeps the tensor
  cores busy.

Work tiles are (query block of 128 rows, query head, request), the heads of a block consecutive (the G heads
of a KV head read the same K/V: L2 hits), the most expensive query blocks first (the last blocks of a causal
request see the most keys): block-major over all requests when they are equally long, else request by request
(``_tile``). A program walks tiles ``pid, pid + grid,
...``: with a grid of one program per tile it is a plain launch (the hardware hands out tiles as SMs free up);
with one per SM it is persistent, and the next tile's Q and first K/V load while the current tile computes
and stores (paged: rounds of the plan's heaviest-first items in alternate directions, ``_round_tile``). The
ring's slot counter and the Q buffer index run on across tiles (every partition skips the same empty tiles).

Layouts (``LAYOUT``): dense (``q`` ``[B·S, H·D]``, ``k`` / ``v`` ``[B·S_kv, H_kv·D]`` as 2-D views, request ``b``
at row ``b·S``), varlen (request offsets from ``cu_seqlens``) or paged (K / V pools ``[pages·PAGE_SIZE, H_kv·D]``,
key n of request b at row ``table[b, n // PAGE_SIZE]·PAGE_SIZE + n % PAGE_SIZE``, a key tile loaded in chunks of
``gcd(PAGE_SIZE, BLOCK_N)`` rows (one chunk when the page size is a multiple of the tile); the work tiles are a
host plan's (request, query block) items, heaviest first; ``kv_len`` = ``cache_lens[b]``, plus the request's
query tokens with ``KV_PLUS_Q``).
Masks: keys ``P − WL <= j <= P + WR`` (bottom-right positions P; causal is WR = 0;
``attention_fns.window_bounds``). Keys past a request's end (the next request's rows, the rest of its last
page, or TMA zero fill past the tensor) are masked; query rows past it are not stored. One query head per
work tile, or with ``PACK`` the G heads of a KV head (rows (token, head), 128 / G tokens a tile). D in {64, 128,
256}, fp16 / bf16, softcap (``SOFTCAP``), attention sinks (``HAS_SINK``); fp8 e4m3 q / k
(dense / varlen, ``FP8``: Q·Kᵀ on fp8 tensor cores, P·V in 16 bits over V widened by a cast kernel first: fp8
wgmma reads B K-major only, and V's rows are keys); no RoPE / splits / lse (the Triton kernels serve those calls).
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

from attnops.kernel_utils.gluon_fns import (
    RESCALE_SLACK,
    reference_max,
    release,
    release_count,
    rescaled,
    store_layout,
    to_store_layout,
    warpgroup_partition,
)

ROWS_PER_CONSUMER = gl.constexpr(64)  # one warpgroup's wgmma M (a constexpr: kernels read it)


DENSE = gl.constexpr(0)
VARLEN = gl.constexpr(1)
PAGED = gl.constexpr(2)


@gluon.jit
def _tile(tile, cu_q_ptr, kv_ptr, items_ptr, order_ptr, s_q, s_kv, n_units, n_work, n_m_blocks, BLOCK_M: gl.constexpr,
          LAYOUT: gl.constexpr, KV_PLUS_Q: gl.constexpr, BLOCK_MAJOR: gl.constexpr, SORT_B: gl.constexpr,
          ITEM_COLS: gl.constexpr):
    """Work tile -> (request b, head unit, first query token m0, q_start, q_len, kv_start, kv_len); ``BLOCK_M``:
    query tokens per block, ``n_units``: head units per block (a query head, or a packed group). Unit fastest; then
    paged: the plan's items in order (``items[i] = (b, query block, ...)``, ``ITEM_COLS`` ints each); dense /
    varlen with ``BLOCK_MAJOR`` (every request as long as the longest): query block from the last (the heaviest
    under a causal mask) to the first, each over every request, so a round of one tile per program holds blocks of
    one weight; else request by request, within one its blocks from the last (requests of unequal lengths: the
    block index alone does not order the work) — with ``SORT_B``, the requests in ``order_ptr``'s order (most keys
    first, ``_sort_requests``).
    ``kv_ptr``: varlen cu_seqlens_kv, paged the per-request key counts."""
    unit = tile % n_units
    rest = tile // n_units
    if LAYOUT == PAGED:
        b = gl.load(items_ptr + ITEM_COLS * rest)
        m0 = gl.load(items_ptr + ITEM_COLS * rest + 1) * BLOCK_M
    elif BLOCK_MAJOR:
        batch = n_work // n_m_blocks
        b = rest % batch
        m0 = (n_m_blocks - 1 - rest // batch) * BLOCK_M
    else:
        if SORT_B > 0:
            b = gl.load(order_ptr + rest // n_m_blocks)
        else:
            b = rest // n_m_blocks
        m0 = (n_m_blocks - 1 - rest % n_m_blocks) * BLOCK_M
    if LAYOUT == DENSE:
        q_start = b * s_q
        q_len = s_q
        kv_start = b * s_kv
        kv_len = s_kv
    else:
        q_start = gl.load(cu_q_ptr + b)
        q_len = gl.load(cu_q_ptr + b + 1) - q_start
        if LAYOUT == VARLEN:
            kv_start = gl.load(kv_ptr + b)
            kv_len = gl.load(kv_ptr + b + 1) - kv_start
        else:
            kv_start = q_start * 0
            kv_len = gl.load(kv_ptr + b)
            if KV_PLUS_Q:
                kv_len += q_len
    return b, unit, m0, q_start, q_len, kv_start, kv_len


@gluon.jit
def _round_tile(r, pid, n_prog, SNAKE: gl.constexpr):
    """The work tile of program ``pid`` in round ``r`` (``n_prog`` tiles a round): ``r·n_prog + pid``; with
    ``SNAKE`` (the work is sorted heaviest first: the paged plan's items, sorted requests) in alternate
    directions: a program that took one of the heavier tiles of a round takes one of the lighter of the next."""
    if SNAKE:
        return r * n_prog + pid + (r % 2) * (n_prog - 1 - 2 * pid)
    else:
        return r * n_prog + pid


@gluon.jit
def _round_work(r, pid, n_prog, cu_q_ptr, kv_ptr, items_ptr, order_ptr, s_q, s_kv, n_heads, n_work, n_m_blocks, wl,
                wr, n_splits, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, LAYOUT: gl.constexpr,
                KV_PLUS_Q: gl.constexpr, BLOCK_MAJOR: gl.constexpr, SORT_B: gl.constexpr, PACK: gl.constexpr,
                SPLITS: gl.constexpr):
    """Program ``pid``'s work tile of round ``r``, the same for the loader and both consumers: (live, b, head,
    m0, q_start, q_len, kv_start, kv_len, n_lo, n_hi); ``head``: the tile's (first) query head, ``m0``:
    its first query token (``PACK`` heads share a tile: BLOCK_M / PACK tokens). Not live: the round has no tile for
    this program (the index is clamped so every read stays inside) or the query block is past its request's end.
    ``SPLITS`` (paged): items ``(b, query block, split, part)``; an item of ``part`` >= 0 is split ``split`` of
    ``n_splits`` of its block's keys (``[n_lo, n_hi)``: its share of the block's key tiles, possibly none; the
    kernel writes partials of part ``part``), of part -1 the whole block; without ``SPLITS`` every item is whole."""
    TOKENS: gl.constexpr = BLOCK_M // PACK
    n_units = n_heads // PACK
    n_total = n_work * n_units
    tile = _round_tile(r, pid, n_prog, (LAYOUT == PAGED) or (SORT_B > 0))
    in_range = tile < n_total
    tile = gl.minimum(tile, n_total - 1)
    b, unit, m0, q_start, q_len, kv_start, kv_len = _tile(tile, cu_q_ptr, kv_ptr, items_ptr, order_ptr, s_q, s_kv,
                                                          n_units, n_work, n_m_blocks, TOKENS, LAYOUT, KV_PLUS_Q,
                                                          BLOCK_MAJOR, SORT_B, 4 if SPLITS else 2)
    live = in_range & (m0 < q_len)
    n_lo, n_hi = _block_keys(m0, q_len, kv_len, wl, wr, TOKENS, BLOCK_N)  # (not live: unused)
    if SPLITS:
        split, part = _item_split(items_ptr, tile // n_units)
        # a whole block is its one split: the same range
        per = gl.cdiv(gl.cdiv(n_hi - n_lo, BLOCK_N), gl.where(part >= 0, n_splits, 1)) * BLOCK_N
        lo = gl.minimum(n_lo + split * per, n_hi)
        n_hi = gl.minimum(lo + per, n_hi)
        n_lo = lo
    return live, b, unit * PACK, m0, q_start, q_len, kv_start, kv_len, n_lo, n_hi


@gluon.jit
def _item_split(items_ptr, item):
    """(split, part) of a paged item of four ints (``SPLITS``, see ``_round_work``)."""
    return gl.load(items_ptr + 4 * item + 2), gl.load(items_ptr + 4 * item + 3)


@gluon.jit
def _key_range(p_lo, p_hi, kv_len, wl, wr, BLOCK_N: gl.constexpr):
    """Keys rows at positions [p_lo, p_hi] visit: ``[n_lo, n_hi)`` from a multiple of BLOCK_N (empty: equal),
    and ``[full_lo, full_hi)`` (multiples of BLOCK_N, possibly empty) where every key is visible from every row:
    tiles inside it need no mask. ``attention_fns.kv_block_range``'s arithmetic, restated because a Gluon
    kernel cannot call ``triton.jit`` functions."""
    lo = gl.maximum(p_lo - wl, 0)
    hi = gl.minimum(p_hi + wr + 1, kv_len)
    n_lo = (lo // BLOCK_N) * BLOCK_N
    n_hi = gl.where(hi > lo, hi, n_lo)
    f_lo = gl.maximum(gl.maximum(p_hi - wl, lo), 0)
    f_hi = gl.maximum(gl.minimum(p_lo + wr + 1, hi), 0)
    full_lo = ((f_lo + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
    full_hi = (f_hi // BLOCK_N) * BLOCK_N
    empty = full_hi <= full_lo
    return n_lo, n_hi, gl.where(empty, 0, full_lo), gl.where(empty, 0, full_hi)


@gluon.jit
def _block_keys(m0, q_len, kv_len, wl, wr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """The key range ``[n_lo, n_hi)`` the whole query block visits (its real rows only)."""
    p0 = kv_len - q_len + m0
    n_lo, n_hi, _, _ = _key_range(p0, p0 + gl.minimum(BLOCK_M, q_len - m0) - 1, kv_len, wl, wr, BLOCK_N)
    return n_lo, n_hi


@gluon.jit
def _scores(q_tile, k_smem, k_ready, i, zero_s, STAGES: gl.constexpr, Q_SPLIT: gl.constexpr):
    """Issue S = Q·Kᵀ of the ring's i-th key tile (async) once its K has landed. ``Q_SPLIT`` > 0: ``q_tile`` is
    (Q's first Q_SPLIT columns in registers, the rest in shared memory), two chained wgmmas."""
    slot = i % STAGES
    mbarrier.wait(k_ready.index(slot), (i // STAGES) & 1)
    k = k_smem.index(slot)
    if Q_SPLIT > 0:
        s = warpgroup_mma(q_tile[0], k.slice(0, Q_SPLIT, dim=1).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)
        s = warpgroup_mma(q_tile[1], k.slice(Q_SPLIT, k.shape[1] - Q_SPLIT, dim=1).permute((1, 0)), s,
                          is_async=True)
    else:
        s = warpgroup_mma(q_tile, k.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    return s


@gluon.jit
def _pv(p_op, acc, v_smem, v_ready, i, STAGES: gl.constexpr):
    """Issue O += P·V of the ring's i-th key tile (async) once its V has landed."""
    slot = i % STAGES
    mbarrier.wait(v_ready.index(slot), (i // STAGES) & 1)
    return warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)


@gluon.jit
def _turn_begin(sched, turn, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """FA3's warp-scheduler barrier (``PINGPONG``): the two consumers issue their wgmmas in turns, warpgroup 0
    first, so that one's softmax runs while the other's products hold the tensor cores. ``turn``: this
    consumer's issue rounds so far (both run the same number)."""
    if PINGPONG:
        mbarrier.wait(sched.index(WG), (turn & 1) ^ (1 - WG))  # warpgroup 0's first wait passes (parity 1)


@gluon.jit
def _turn_end(sched, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Hand the issue turn to the other consumer."""
    if PINGPONG:
        mbarrier.arrive(sched.index(1 - WG), count=1)


@gluon.jit
def _pv_tail(p_op, acc, v_smem, v_ready, i, v_own, valid, STAGES: gl.constexpr, BLOCK_N: gl.constexpr):
    """O += P·V of the ring's i-th key tile, the last of a paged work tile: its rows from ``valid`` on are the
    rest of a page (anything, NaN included), and P's zeros there would still meet them in the MMA. The
    warpgroup copies the tile into ``v_own`` with those rows zeroed and multiplies from there. ``v_own`` is its
    own buffer, or the ring slot itself (``TAIL_IN_PLACE``): then both warpgroups rewrite the slot, each with the
    same bytes (the loaded rows, zeros past the keys), and each multiplies after its own rewrite, so whichever
    order the two take, every read sees those bytes; the loader refills the slot only after both release it."""
    slot = i % STAGES
    mbarrier.wait(v_ready.index(slot), (i // STAGES) & 1)
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # 16-byte pieces, 4 warps
    v = v_smem.index(slot).load(rows_layout)
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, rows_layout))
    v_own.store(gl.where((rows < valid)[:, None], v, gl.zeros_like(v)))
    fence_async_shared()  # this thread's stores visible to the async proxy (wgmma) ...
    gl.thread_barrier()  # ... and every thread of the warpgroup done before the wgmma reads the buffer
    return warpgroup_mma(p_op, v_own, acc, is_async=True)


@gluon.jit
def _softmax(s, n0, m_i, l_i, q_pos, full_lo, full_hi, kv_len, wl, wr, qk_scale, cap_scale, cap_log2,
             BLOCK_N: gl.constexpr, o_layout: gl.constexpr, s_layout: gl.constexpr, SOFTCAP: gl.constexpr,
             SLACK: gl.constexpr):
    """Online-softmax step of the scores of key tile [n0, n0 + BLOCK_N): (P in fp32, in the scores' layout; the
    rows' rescale factor in the accumulator's layout; m; l). ``_p_operand`` makes P the next wgmma's operand.
    Only tiles outside the warpgroup's all-visible range apply the mask (a uniform branch). The arithmetic is
    ``kernel_utils.attention_fns.online_softmax_step``'s (``softcap_scores`` first with ``SOFTCAP``: then the
    scores are in base-2 units and the mask follows the cap), restated with the wgmma layouts (see _key_range).
    ``SLACK`` > 0: m is the lazy rescale's reference max (``gluon_fns.reference_max``), not the running one."""
    if SOFTCAP:  # cap_log2 · tanh(s · sm_scale / softcap), tanh from exp2 as attention_fns.tanh_f32
        s = cap_log2 * (1.0 - 2.0 / (gl.exp2(s * cap_scale) + 1.0))
        qk_scale = 1.0
    if (n0 < full_lo) | (n0 + BLOCK_N > full_hi):
        k_pos = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        ok = ((k_pos[None, :] < kv_len) & (k_pos[None, :] >= q_pos[:, None] - wl)
              & (k_pos[None, :] <= q_pos[:, None] + wr))
        s = gl.where(ok, s, float("-inf"))
    m_new = reference_max(m_i, gl.max(s, axis=1) * qk_scale, SLACK)
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no visible key yet: p = 0, no NaN
    p = gl.exp2(s * qk_scale - m_safe[:, None])
    alpha = gl.exp2(m_i - m_safe)
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), m_new, l_new


@gluon.jit
def _p_operand(p, dtype: gl.constexpr, p_layout: gl.constexpr):
    """P (fp32, scores' layout) as the P·V wgmma's register operand."""
    return gl.convert_layout(p.to(dtype), p_layout)


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, v_scratch, q_ready, q_free, k_ready, v_ready, k_free, kv_free, sched, o_ptr,
              cu_q_ptr, kv_ptr, items_ptr, order_ptr, sink_ptr, q_scale_ptr, k_scale_ptr, v_scale_ptr, part_o_ptr,
              part_lse_ptr, s_q, s_kv, n_heads, n_work, n_m_blocks, group, wl, wr, n_splits, qk_scale, cap_scale,
              cap_log2, stride_ot, stride_oh, WG: gl.constexpr, LAYOUT: gl.constexpr, KV_PLUS_Q: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, Q_BUFS: gl.constexpr, BLOCK_MAJOR: gl.constexpr,
              SOFTCAP: gl.constexpr, HAS_SINK: gl.constexpr, SORT_B: gl.constexpr, TAIL_IN_PLACE: gl.constexpr,
              FP8: gl.constexpr, PACK: gl.constexpr, THREAD_RELEASE: gl.constexpr, SPLITS: gl.constexpr,
              K_EARLY: gl.constexpr, Q_REGS: gl.constexpr, LAZY_RESCALE: gl.constexpr):
    """Rows [64·WG, +64) of each of the program's work tiles (``PACK`` > 1: row r is query token r // PACK of the
    warpgroup's tokens, head ``head + r % PACK``): every key tile of the block's range, then
    the store. ``OVERLAP`` (FA3's intra-warpgroup pipelining): S of tile j + 1 and P·V of tile j are in flight
    while the softmax of tile j + 1 runs (as issued: ptxas waits for P·V before the softmax, see the loop); else
    each tile's two wgmmas are waited for in turn. Paged layouts (overlap configs only) take the last key tile's V
    through ``_pv_tail`` and ``v_scratch[WG]`` (or the ring slot itself, ``TAIL_IN_PLACE``). ``PINGPONG``
    (overlap configs only): each round of wgmma issues (a tile's first S; S of j + 1 with P·V of j; the last
    P·V) waits for this consumer's turn. ``FP8``: Q and K are raw e4m3 (S on fp8 tensor cores), V holds the raw
    e4m3 values in 16 bits (exact); request b's ``[B, H_kv]`` dequant multipliers scale the scores
    (q_scale·k_scale, folded into the exp2 scale) and the output (v_scale). ``THREAD_RELEASE``: K / V slots are
    freed one arrival per thread (``kernel_utils.gluon_fns.release``). ``SPLITS``: a split item's rows go to the
    workspace as partials (``_store_partial``; its sink is the combine's). ``K_EARLY``: a slot's K is released
    (``k_free``) as soon as the scores of it are done, its V (``kv_free``) after P·V; else both after P·V.
    ``Q_REGS``: the first Q_REGS columns of the warpgroup's Q tile are loaded into registers once per work tile,
    the score wgmmas' A operand from there (they then read only K's slice from shared memory: see
    ``ws_launch.WsConfig.q_registers``); all of them (Q_REGS = HEAD_DIM): the Q buffer is released at once.
    ``LAZY_RESCALE`` (overlap configs): a row's reference max moves only past ``gluon_fns.RESCALE_SLACK``
    (``gluon_fns.reference_max``), and the warpgroup multiplies O by the rescale factors only after a tile that
    moved one of its 64 rows (a max over the warpgroup, taken before the P·V wait): else every factor is 1."""
    gl.static_assert(Q_REGS == 0 or not FP8, "Q in registers: 16-bit queries")
    Q_SPLIT: gl.constexpr = Q_REGS if Q_REGS < HEAD_DIM else 0  # (Q partly in registers: _scores' two wgmmas)
    Q_HELD: gl.constexpr = Q_REGS == HEAD_DIM  # (Q wholly in registers: its buffer freed before the key loop)
    if LAYOUT == PAGED or PINGPONG or K_EARLY or LAZY_RESCALE:
        gl.static_assert(OVERLAP, "the paged layout, the pingpong turns, K_EARLY and LAZY_RESCALE run the overlap "
                                  "configs")
    SLACK: gl.constexpr = RESCALE_SLACK if LAZY_RESCALE else 0.0
    R: gl.constexpr = ROWS_PER_CONSUMER
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 32 if FP8 else 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    q_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)  # (Q_REGS)
    dtype: gl.constexpr = v_smem.dtype  # P's (16-bit: fp8 calls run P·V on 16-bit V)
    zero_s = gl.zeros([R, BLOCK_N], gl.float32, layout=s_layout)
    pid = gl.program_id(0)
    done = pid * 0  # work tiles this program has run (Q buffer done % Q_BUFS, its barriers' phase from done // Q_BUFS)
    ring = pid * 0  # key tiles through the K/V ring so far (slot and phase of the next)
    turn = pid * 0  # rounds of wgmma issues so far (PINGPONG)
    n_prog = gl.num_programs(0)
    for r in range(gl.cdiv(n_work * (n_heads // PACK), n_prog)):
        live, b, head, m0, q_start, q_len, kv_start, kv_len, n_lo, n_hi = _round_work(
            r, pid, n_prog, cu_q_ptr, kv_ptr, items_ptr, order_ptr, s_q, s_kv, n_heads, n_work, n_m_blocks, wl, wr,
            n_splits, BLOCK_M, BLOCK_N, LAYOUT, KV_PLUS_Q, BLOCK_MAJOR, SORT_B, PACK, SPLITS)
        if live:
            r0 = m0 + WG * (R // PACK)  # this warpgroup's first query token
            p0 = kv_len - q_len + r0  # its key position (bottom-right)
            _, _, full_lo, full_hi = _key_range(p0, p0 + R // PACK - 1, kv_len, wl, wr, BLOCK_N)
            if PACK > 1:
                q_pos = p0 + gl.arange(0, R, layout=gl.SliceLayout(1, s_layout)) // PACK
            else:
                q_pos = p0 + gl.arange(0, R, layout=gl.SliceLayout(1, s_layout))
            tile_qk_scale = qk_scale
            tile_cap_scale = cap_scale
            sc = b * (n_heads // group) + head // group  # (b, KV head): FP8's dequant multipliers
            if FP8:  # kernel.py's fp8 rule
                dequant = gl.load(q_scale_ptr + sc) * gl.load(k_scale_ptr + sc)
                tile_qk_scale = qk_scale * dequant
                tile_cap_scale = cap_scale * dequant
            m_i = gl.full([R], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
            l_i = gl.full([R], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
            acc = gl.zeros([R, HEAD_DIM], gl.float32, layout=o_layout)
            n_tiles = gl.cdiv(n_hi - n_lo, BLOCK_N)
            q_buf = done % Q_BUFS
            q_tile = q_smem.index(2 * q_buf + WG)
            mbarrier.wait(q_ready.index(q_buf), (done // Q_BUFS) & 1)
            if Q_HELD:
                q_tile = q_tile.load(q_op_layout)
                mbarrier.arrive(q_free.index(q_buf), count=1)  # (after the warpgroup's loads: Triton's bar.sync)
            elif Q_SPLIT > 0:
                q_tile = (q_tile.slice(0, Q_SPLIT, dim=1).load(q_op_layout),
                          q_tile.slice(Q_SPLIT, HEAD_DIM - Q_SPLIT, dim=1))
            if OVERLAP:
                if n_tiles > 0:
                    _turn_begin(sched, turn, WG, PINGPONG)
                    s = _scores(q_tile, k_smem, k_ready, ring, zero_s, STAGES, Q_SPLIT)
                    _turn_end(sched, WG, PINGPONG)
                    turn += 1
                    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
                    if K_EARLY:
                        release(k_free.index(ring % STAGES), THREAD_RELEASE)
                    p, alpha, m_i, l_i = _softmax(s, n_lo, m_i, l_i, q_pos, full_lo, full_hi, kv_len, wl, wr,
                                                  tile_qk_scale, tile_cap_scale, cap_log2, BLOCK_N, o_layout,
                                                  s_layout, SOFTCAP, SLACK)
                    p_op = _p_operand(p, dtype, p_layout)
                    for j in range(1, n_tiles):
                        _turn_begin(sched, turn, WG, PINGPONG)
                        s_next = _scores(q_tile, k_smem, k_ready, ring + j, zero_s, STAGES, Q_SPLIT)
                        acc = _pv(p_op, acc, v_smem, v_ready, ring + j - 1, STAGES)
                        _turn_end(sched, WG, PINGPONG)
                        turn += 1
                        s_next = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))  # S of j; P·V may run
                        if K_EARLY:
                            release(k_free.index((ring + j) % STAGES), THREAD_RELEASE)
                        # (ptxas places the P·V wait below at the top of the softmax's block: P·V overlaps the other
                        # warpgroup's softmax, not this one's. Holding it below with the softmax in a block of its
                        # own was 0-19 % slower on every row timed, 2026-12-03, docs/perf/attn-core.md.)
                        m_before = m_i
                        p, alpha, m_i, l_i = _softmax(s_next, n_lo + j * BLOCK_N, m_i, l_i, q_pos, full_lo, full_hi,
                                                      kv_len, wl, wr, tile_qk_scale, tile_cap_scale, cap_log2,
                                                      BLOCK_N, o_layout, s_layout, SOFTCAP, SLACK)
                        moved = 1
                        if LAZY_RESCALE:  # (before the P·V wait: the cross-warp max runs while P·V does; rows
                            # whose m stayed -inf have O = 0, so skipping their factor 0 is exact)
                            moved = gl.max((m_i != m_before).to(gl.int32), axis=0)
                        # p_op stays live until its wgmma is waited for: its registers are read asynchronously
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
                        release(kv_free.index((ring + j - 1) % STAGES), THREAD_RELEASE)
                        acc = rescaled(acc, alpha, moved, LAZY_RESCALE)
                        # packed after the wait (FA3's order): the new operand may take the old one's registers
                        p_op = _p_operand(p, dtype, p_layout)
                    if not Q_HELD:
                        mbarrier.arrive(q_free.index(q_buf), count=1)  # every S of this tile is done: Q may go
                    _turn_begin(sched, turn, WG, PINGPONG)
                    if LAYOUT == PAGED:
                        n_last = n_lo + (n_tiles - 1) * BLOCK_N
                        last = ring + n_tiles - 1
                        v_own = v_smem.index(last % STAGES) if TAIL_IN_PLACE else v_scratch.index(WG)
                        acc = _pv_tail(p_op, acc, v_smem, v_ready, last, v_own, kv_len - n_last, STAGES, BLOCK_N)
                    else:
                        acc = _pv(p_op, acc, v_smem, v_ready, ring + n_tiles - 1, STAGES)
                    _turn_end(sched, WG, PINGPONG)
                    turn += 1
                    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
                    release(kv_free.index((ring + n_tiles - 1) % STAGES), THREAD_RELEASE)
                elif not Q_HELD:
                    mbarrier.arrive(q_free.index(q_buf), count=1)
            else:
                for j in range(n_tiles):
                    s = warpgroup_mma_wait(num_outstanding=0,
                                           deps=(_scores(q_tile, k_smem, k_ready, ring + j, zero_s, STAGES,
                                                          Q_SPLIT), ))
                    p, alpha, m_i, l_i = _softmax(s, n_lo + j * BLOCK_N, m_i, l_i, q_pos, full_lo, full_hi, kv_len,
                                                  wl, wr, tile_qk_scale, tile_cap_scale, cap_log2, BLOCK_N, o_layout,
                                                  s_layout, SOFTCAP, 0.0)
                    p_op = _p_operand(p, dtype, p_layout)
                    acc = _pv(p_op, acc * alpha[:, None], v_smem, v_ready, ring + j, STAGES)
                    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
                    release(kv_free.index((ring + j) % STAGES), THREAD_RELEASE)
                if not Q_HELD:
                    mbarrier.arrive(q_free.index(q_buf), count=1)

            if SPLITS:  # (read again here: fewer registers held through the key loop)
                split, part = _item_split(items_ptr, gl.minimum(_round_tile(r, pid, n_prog, True), n_work * n_heads - 1)
                                          // n_heads)
                if part >= 0:
                    _store_partial(acc, m_i, l_i, part_o_ptr, part_lse_ptr, part, split, n_splits, head, n_heads, WG,
                                   HEAD_DIM, o_layout, s_layout)
                else:
                    _store_tile(acc, m_i, l_i, o_ptr, sink_ptr, v_scale_ptr, sc, q_start, q_len, r0, head,
                                stride_ot, stride_oh, HEAD_DIM, o_layout, s_layout, HAS_SINK, FP8, PACK)
            else:
                _store_tile(acc, m_i, l_i, o_ptr, sink_ptr, v_scale_ptr, sc, q_start, q_len, r0, head, stride_ot,
                            stride_oh, HEAD_DIM, o_layout, s_layout, HAS_SINK, FP8, PACK)
            done += 1
            ring += n_tiles


@gluon.jit
def _store_tile(acc, m_i, l_i, o_ptr, sink_ptr, v_scale_ptr, sc, q_start, q_len, r0, head, stride_ot, stride_oh,
                HEAD_DIM: gl.constexpr, o_layout: gl.constexpr, s_layout: gl.constexpr, HAS_SINK: gl.constexpr,
                FP8: gl.constexpr, PACK: gl.constexpr):
    """A warpgroup's 64 rows of a whole block (query tokens from ``r0``), sink added, normalized, into ``o``."""
    R: gl.constexpr = ROWS_PER_CONSUMER
    st_layout: gl.constexpr = store_layout(HEAD_DIM, o_ptr.dtype.element_ty.primitive_bitwidth)  # o_layout's tile
    if HAS_SINK:  # attention_fns.add_sink: 2^sink2 joins each row's denominator (no value vector)
        if PACK > 1:  # each row's own head
            row_heads = head + gl.arange(0, R, layout=gl.SliceLayout(1, s_layout)) % PACK
            sink2 = gl.load(sink_ptr + row_heads) * 1.4426950408889634
        else:
            sink2 = gl.load(sink_ptr + head) * 1.4426950408889634
        m_sink = gl.maximum(m_i, sink2)
        m_safe = gl.where(m_sink == float("-inf"), 0.0, m_sink)
        rescale = gl.exp2(m_i - m_safe)
        l_i = l_i * rescale + gl.exp2(sink2 - m_safe)
        acc = acc * gl.convert_layout(rescale, gl.SliceLayout(1, o_layout))[:, None]
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    out = acc / gl.where(l_o == 0.0, 1.0, l_o)[:, None]  # rows that saw no key: 0
    if FP8:
        out = out * gl.load(v_scale_ptr + sc)
    # moved to 16-byte pieces along the rows first (``gluon_fns.store_layout``, warp shuffles): HEAD_DIM / 16
    # ``STG.E.128`` a thread instead of HEAD_DIM / 4 4-byte ``STG.E``
    vals = to_store_layout(out.to(o_ptr.dtype.element_ty))
    o_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, st_layout))
    if PACK > 1:
        rows = gl.arange(0, R, layout=gl.SliceLayout(1, st_layout))
        o_rows = r0 + rows // PACK  # query tokens
        ptrs = (o_ptr + (q_start + o_rows).to(gl.int64)[:, None] * stride_ot
                + (head + rows % PACK)[:, None] * stride_oh + o_cols[None, :])
    else:
        o_rows = r0 + gl.arange(0, R, layout=gl.SliceLayout(1, st_layout))
        ptrs = (o_ptr + (q_start + o_rows).to(gl.int64)[:, None] * stride_ot + head * stride_oh
                + o_cols[None, :])
    gl.store(ptrs, vals, mask=(o_rows < q_len)[:, None])


@gluon.jit
def _store_partial(acc, m_i, l_i, part_o_ptr, part_lse_ptr, part, split, n_splits, head, n_heads, WG: gl.constexpr,
                   HEAD_DIM: gl.constexpr, o_layout: gl.constexpr, s_layout: gl.constexpr):
    """A warpgroup's 64 rows of split ``split`` of a split block as the combine reads them
    (``kernel_utils.split_combine``): fp32 rows normalized by their own sum and their base-2 lse (``-inf``, zeros
    where the split saw no key), at workspace row ``((part·BLOCK_M + t)·H + head)·n_splits + split`` for the block's
    query token t."""
    R: gl.constexpr = ROWS_PER_CONSUMER
    st_layout: gl.constexpr = store_layout(HEAD_DIM, 32)
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    vals = to_store_layout(acc / gl.where(l_o == 0.0, 1.0, l_o)[:, None])
    first = part * (2 * R) + WG * R  # the block's token of this warpgroup's first row
    rows = first + gl.arange(0, R, layout=gl.SliceLayout(1, st_layout))
    ws_rows = (rows.to(gl.int64) * n_heads + head) * n_splits + split
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, st_layout))
    gl.store(part_o_ptr + ws_rows[:, None] * HEAD_DIM + cols[None, :], vals)
    lse_rows = ((first + gl.arange(0, R, layout=gl.SliceLayout(1, s_layout))).to(gl.int64) * n_heads + head) \
        * n_splits + split
    gl.store(part_lse_ptr + lse_rows, gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(gl.where(l_i == 0.0, 1.0,
                                                                                                  l_i))))


@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_free, k_ready, v_ready, k_free, kv_free,
            cu_q_ptr, kv_ptr, items_ptr, order_ptr, table_ptr, stride_tb, s_q, s_kv, n_heads, n_work, n_m_blocks,
            group, wl, wr, n_splits,
            LAYOUT: gl.constexpr, KV_PLUS_Q: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_M: gl.constexpr,
            BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, Q_BUFS: gl.constexpr,
            BLOCK_MAJOR: gl.constexpr, SORT_B: gl.constexpr, PACK: gl.constexpr, SPLITS: gl.constexpr,
            K_EARLY: gl.constexpr):
    """TMA producer: per work tile both Q tiles, then K / V of every key tile of the block's range (paged: the
    tile's page from the table, read only for tiles inside the request's keys). ``PACK`` > 1: a Q tile is
    [64 / PACK tokens, PACK heads, D] of a 3-D descriptor ``[tokens, H, D]``, landing as 64 rows of (token, head).
    ``K_EARLY``: a slot's K is refilled once ``k_free`` says both consumers' scores of it are done, its V once
    ``kv_free`` says their P·V is (else ``k_free`` is ``kv_free``: both wait for P·V)."""
    R: gl.constexpr = ROWS_PER_CONSUMER
    pid = gl.program_id(0)
    done = pid * 0
    ring = pid * 0
    n_prog = gl.num_programs(0)
    for r in range(gl.cdiv(n_work * (n_heads // PACK), n_prog)):
        live, b, head, m0, q_start, q_len, kv_start, kv_len, n_lo, n_hi = _round_work(
            r, pid, n_prog, cu_q_ptr, kv_ptr, items_ptr, order_ptr, s_q, s_kv, n_heads, n_work, n_m_blocks, wl, wr,
            n_splits, BLOCK_M, BLOCK_N, LAYOUT, KV_PLUS_Q, BLOCK_MAJOR, SORT_B, PACK, SPLITS)
        if live:
            q_buf = done % Q_BUFS
            # a fresh barrier passes parity 1: each buffer's first tile finds it free
            mbarrier.wait(q_free.index(q_buf), ((done // Q_BUFS) & 1) ^ 1)
            ready = q_ready.index(q_buf)
            mbarrier.expect(ready, 2 * q_desc.block_type.nbytes)
            if PACK > 1:
                for w in gl.static_range(2):
                    box = q_smem.index(2 * q_buf + w).reshape([R // PACK, PACK, HEAD_DIM])
                    tma.async_copy_global_to_shared(q_desc, [q_start + m0 + w * (R // PACK), head, 0], ready, box)
            else:
                tma.async_copy_global_to_shared(q_desc, [q_start + m0, head * HEAD_DIM], ready,
                                                q_smem.index(2 * q_buf))
                tma.async_copy_global_to_shared(q_desc, [q_start + m0 + R, head * HEAD_DIM], ready,
                                                q_smem.index(2 * q_buf + 1))
            n_tiles = gl.cdiv(n_hi - n_lo, BLOCK_N)
            kv_col = (head // group) * HEAD_DIM
            for j in range(n_tiles):
                slot = (ring + j) % STAGES
                phase = (((ring + j) // STAGES) & 1) ^ 1
                mbarrier.wait(k_free.index(slot), phase)
                n = n_lo + j * BLOCK_N
                if LAYOUT == PAGED:
                    table_row = table_ptr + b.to(gl.int64) * stride_tb
                    if K_EARLY:
                        _load_paged_tile(k_desc, v_desc, k_smem.index(slot), v_smem.index(slot), k_ready.index(slot),
                                         v_ready.index(slot), table_row, n, kv_len, kv_col, PAGE_SIZE, BLOCK_N, 1)
                        mbarrier.wait(kv_free.index(slot), phase)
                        _load_paged_tile(k_desc, v_desc, k_smem.index(slot), v_smem.index(slot), k_ready.index(slot),
                                         v_ready.index(slot), table_row, n, kv_len, kv_col, PAGE_SIZE, BLOCK_N, 2)
                    else:
                        _load_paged_tile(k_desc, v_desc, k_smem.index(slot), v_smem.index(slot), k_ready.index(slot),
                                         v_ready.index(slot), table_row, n, kv_len, kv_col, PAGE_SIZE, BLOCK_N, 3)
                else:
                    row = kv_start + n
                    mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(k_desc, [row, kv_col], k_ready.index(slot), k_smem.index(slot))
                    if K_EARLY:
                        mbarrier.wait(kv_free.index(slot), phase)
                    mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(v_desc, [row, kv_col], v_ready.index(slot), v_smem.index(slot))
            done += 1
            ring += n_tiles


@gluon.jit
def _load_paged_tile(k_desc, v_desc, k_slot, v_slot, k_ready, v_ready, table_row, n, kv_len, kv_col,
                     PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, PARTS: gl.constexpr):
    """K (``PARTS`` bit 1) and / or V (bit 2) of keys [n, n + BLOCK_N) of one request into a ring slot, in chunks of
    the descriptors' box rows (``gcd(PAGE_SIZE, BLOCK_N)``: each chunk lies in one page, ``table_row[key //
    PAGE_SIZE]``). Each chunk arrives once on the slot's barriers (they count ``BLOCK_N // CHUNK``): with its bytes,
    or, past the request's keys, with none and no copy (its table entry need not exist). Rows not loaded keep older
    data: scores there are masked, and the consumers copy the last V tile with those rows zeroed (``_pv_tail``)."""
    CHUNK: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert(PAGE_SIZE % CHUNK == 0 and BLOCK_N % CHUNK == 0)
    for c in gl.static_range(BLOCK_N // CHUNK):
        key = n + c * CHUNK
        live = key < kv_len
        # (a clamped index: a chunk past the keys reads the request's last entry, then copies nothing)
        row = gl.load(table_row + gl.minimum(key, kv_len - 1) // PAGE_SIZE) * PAGE_SIZE + key % PAGE_SIZE
        if PARTS & 1:
            mbarrier.expect(k_ready, k_desc.block_type.nbytes, pred=live)
            mbarrier.expect(k_ready, 0, pred=key >= kv_len)
            tma.async_copy_global_to_shared(k_desc, [row, kv_col], k_ready, k_slot.slice(c * CHUNK, CHUNK),
                                            pred=live)
        if PARTS & 2:
            mbarrier.expect(v_ready, v_desc.block_type.nbytes, pred=live)
            mbarrier.expect(v_ready, 0, pred=key >= kv_len)
            tma.async_copy_global_to_shared(v_desc, [row, kv_col], v_ready, v_slot.slice(c * CHUNK, CHUNK),
                                            pred=live)


@gluon.jit
def _sort_requests(cu_kv_ptr, order_ptr, batch, SORT_B: gl.constexpr):
    """``order_ptr[i]`` = the request with the i-th most keys (ties: lower index first), for ``batch <= SORT_B``
    requests: each request's rank is the count of requests before it, over ``[SORT_B, 32]`` blocks of
    comparisons. Every program writes the same permutation (the identical writes of other programs are
    harmless); the default warps' barrier orders this program's writes before its partitions read them (the
    partitions start after it). Runs on the 4 default warps before the partitions split."""
    CH: gl.constexpr = 32 if SORT_B > 32 else SORT_B
    cmp_layout: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, SORT_B, layout=gl.SliceLayout(1, cmp_layout))
    live = rows < batch
    keys = gl.where(live, gl.load(cu_kv_ptr + rows + 1, mask=live, other=0) - gl.load(cu_kv_ptr + rows, mask=live,
                                                                                       other=0), -1)
    rank = gl.zeros([SORT_B], gl.int32, layout=gl.SliceLayout(1, cmp_layout))
    for c0 in gl.static_range(0, SORT_B, CH):
        cols = c0 + gl.arange(0, CH, layout=gl.SliceLayout(0, cmp_layout))
        c_live = cols < batch
        c_keys = gl.where(c_live, gl.load(cu_kv_ptr + cols + 1, mask=c_live, other=0)
                          - gl.load(cu_kv_ptr + cols, mask=c_live, other=0), -1)
        ahead = ((c_keys[None, :] > keys[:, None])
                 | ((c_keys[None, :] == keys[:, None]) & (cols[None, :] < rows[:, None])))
        rank += gl.sum(ahead.to(gl.int32), axis=1)
    gl.store(order_ptr + rank, rows, mask=live)
    gl.thread_barrier()


@gluon.jit
def gqa_fwd_ws_kernel(q_desc, k_desc, v_desc, o_ptr, cu_q_ptr, kv_ptr, items_ptr, order_ptr, table_ptr, sink_ptr,
                      q_scale_ptr, k_scale_ptr, v_scale_ptr, part_o_ptr, part_lse_ptr, s_q, s_kv, n_heads, n_work,
                      n_m_blocks, group, wl, wr, n_splits, qk_scale, cap_scale, cap_log2,
                      stride_ot, stride_oh, stride_tb, LAYOUT: gl.constexpr, KV_PLUS_Q: gl.constexpr,
                      PAGE_SIZE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                      STAGES: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, Q_BUFS: gl.constexpr,
                      BLOCK_MAJOR: gl.constexpr, SOFTCAP: gl.constexpr, HAS_SINK: gl.constexpr,
                      SORT_B: gl.constexpr, TAIL_IN_PLACE: gl.constexpr, FP8: gl.constexpr, PACK: gl.constexpr,
                      THREAD_RELEASE: gl.constexpr, SPLITS: gl.constexpr, K_EARLY: gl.constexpr,
                      Q_REGS: gl.constexpr, LAZY_RESCALE: gl.constexpr = False):
    """Grid: (programs,), at most n_work · n_heads / PACK work tiles (n_work: dense / varlen n_m_blocks · batch, paged
    the plan's items); num_warps = 4 (the first consumer), plus the worker partitions (second consumer: 4 warps,
    loader: 1 warp). ``TAIL_IN_PLACE`` (paged): the last V tile's rows past the keys are zeroed in the ring slot
    instead of in two per-consumer buffers (configs whose ring leaves no room for them). ``FP8`` (dense / varlen):
    q / k descriptors over raw e4m3 rows, v over the same values in 16 bits, scales ``[B, H_kv]`` f32 (see
    ``_consumer``). ``PACK`` (a power of two dividing 64): the G query heads of a KV head share each work tile,
    rows (token, head), ``q_desc`` 3-D (``_loader``); 1: one query head per tile. ``THREAD_RELEASE``: the consumers
    free K / V slots one arrival per thread, without the warpgroup barrier before a one-thread arrival. ``SPLITS``
    (paged, one head a tile): items ``(b, query block, split, part)`` (``_round_work``); split items write fp32
    partials and base-2 lse (``part_o_ptr`` / ``part_lse_ptr``, ``_store_partial``) for ``split_combine``.
    ``K_EARLY``: each slot's K and V are freed apart, K once its scores are done (FA3's separate K / V pipelines): with
    2 slots the next K no longer waits for the P·V of the tile two back. ``Q_REGS``: each consumer holds that many
    of its Q tile's columns in registers (16-bit queries; see ``_consumer``). ``LAZY_RESCALE``: the consumers skip
    the O rescale after tiles that moved no row's reference max (``_consumer``)."""
    gl.static_assert(BLOCK_M == 2 * ROWS_PER_CONSUMER)
    gl.static_assert(not SPLITS or (LAYOUT == PAGED and PACK == 1), "splits: paged items, one head a tile")
    gl.static_assert(not FP8 or LAYOUT != PAGED, "fp8 runs the dense / varlen layouts")
    # [buf, WG]; packed Q tiles take K's layout (a [rows, D] tile of the same dtype), q_desc's is their 3-D view
    q_layout: gl.constexpr = k_desc.layout if PACK > 1 else q_desc.layout
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2 * Q_BUFS, ROWS_PER_CONSUMER, HEAD_DIM], q_layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    if LAYOUT == PAGED and not TAIL_IN_PLACE:  # each consumer's copy of its last V tile, rows past the keys zeroed
        v_scratch = gl.allocate_shared_memory(v_desc.dtype, [2, BLOCK_N, HEAD_DIM], v_desc.layout)
    else:
        v_scratch = v_smem  # not used: dense / varlen rows past a request are other requests' or TMA's zeros
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if K_EARLY:
        k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    else:
        k_free = kv_free  # a slot's K and V freed together, after P·V
    sched = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # issue turns (PINGPONG)
    for i in gl.static_range(Q_BUFS):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_free.index(i), count=2)  # both consumers release a Q buffer
    for i in gl.static_range(2):
        mbarrier.init(sched.index(i), count=1)
    for i in gl.static_range(STAGES):  # (paged: one arrival per chunk of a key tile, _load_paged_tile)
        mbarrier.init(k_ready.index(i), count=BLOCK_N // k_desc.block_type.shape[0])
        mbarrier.init(v_ready.index(i), count=BLOCK_N // v_desc.block_type.shape[0])
        mbarrier.init(kv_free.index(i), count=release_count(2, THREAD_RELEASE))  # both consumers release a slot
        if K_EARLY:
            mbarrier.init(k_free.index(i), count=release_count(2, THREAD_RELEASE))
    fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
    if SORT_B > 0:
        _sort_requests(kv_ptr, order_ptr, n_work // n_m_blocks, SORT_B)
    consumer_args = (q_smem, k_smem, v_smem, v_scratch, q_ready, q_free, k_ready, v_ready, k_free, kv_free, sched,
                     o_ptr, cu_q_ptr, kv_ptr, items_ptr, order_ptr, sink_ptr, q_scale_ptr, k_scale_ptr, v_scale_ptr,
                     part_o_ptr, part_lse_ptr, s_q, s_kv, n_heads, n_work, n_m_blocks, group, wl, wr, n_splits,
                     qk_scale, cap_scale, cap_log2, stride_ot, stride_oh)
    consumer_flags: gl.constexpr = (LAYOUT, KV_PLUS_Q, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, OVERLAP, PINGPONG, Q_BUFS,
                                    BLOCK_MAJOR, SOFTCAP, HAS_SINK, SORT_B, TAIL_IN_PLACE, FP8, PACK, THREAD_RELEASE,
                                    SPLITS, K_EARLY, Q_REGS, LAZY_RESCALE)
    gl.warp_specialize([
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
        (_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_free, k_ready, v_ready, k_free,
                   kv_free, cu_q_ptr, kv_ptr, items_ptr, order_ptr, table_ptr, stride_tb, s_q, s_kv, n_heads, n_work,
                   n_m_blocks, group, wl, wr, n_splits, LAYOUT, KV_PLUS_Q, PAGE_SIZE, BLOCK_M, BLOCK_N, HEAD_DIM,
                   STAGES, Q_BUFS, BLOCK_MAJOR, SORT_B, PACK, SPLITS, K_EARLY)),
    ], [4, 1], [240, 24])  # FA3's split: 240 + 240 + 24 registers x 128 threads = 168 x 384
    for i in gl.static_range(Q_BUFS):
        mbarrier.invalidate(q_ready.index(i))
        mbarrier.invalidate(q_free.index(i))
    for i in gl.static_range(2):
        mbarrier.invalidate(sched.index(i))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_ready.index(i))
        mbarrier.invalidate(v_ready.index(i))
        mbarrier.invalidate(kv_free.index(i))
        if K_EARLY:
            mbarrier.invalidate(k_free.index(i))
