"""Warp-specialized flash forward for Hopper, written in Gluon (Triton's explicit-layout dialect) — experimental.

Why: the Triton flash kernel (``kernel.py``) tops out at ~320-410 TF/s on the compute-bound prefill rows,
0.65-0.75x FA3, because every warp loads, multiplies and runs the softmax in turn. Triton 3.6's automatic warp
specialization computed wrong results on our loops (docs/perf/attn-core.md, tenth session); Gluon states the
partitions, barriers and wgmma waits by hand, as FA3 does:

* a 1-warp loader partition issues the TMA copies: the two 64-row Q tiles once, then K and V tiles into a ring
  of ``STAGES`` shared-memory slots (``k_ready`` / ``v_ready`` barriers count the bytes; a slot is refilled
  after both consumers released it on ``kv_free``);
* two 4-warp consumer partitions (the default partition and one worker) own 64 query rows each: S = Q·Kᵀ by
  wgmma from shared memory, the online softmax in registers (base 2, ``sm_scale·log2 e`` folded into exp2),
  then O += P·V with P in registers. While one consumer runs its softmax the other's wgmma keeps the tensor
  cores busy.

Scope of this first version: varlen layout (``q`` ``[T_q, H·D]``, ``k`` / ``v`` ``[T_kv, H_kv·D]`` as 2-D
views), one query head per program (K/V reuse across the G heads of a KV head through L2), bottom-right causal
or no mask, D in {64, 128}, fp16 / bf16, no window / softcap / sinks / splits. Keys past a request's end
(the next request's rows, or TMA zero fill past the tensor) are masked; query rows past it are not stored.
Not on any default path: ``ws_launch.gqa_fwd_ws`` runs it for the GPU tests and the sweep.
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

ROWS_PER_CONSUMER = gl.constexpr(64)  # one warpgroup's wgmma M (a constexpr: kernels read it)


@gluon.jit
def _scores(q_tile, k_smem, k_ready, j, zero_s, STAGES: gl.constexpr):
    """Issue S = Q·Kᵀ of key tile j (async) once its K has landed."""
    slot = j % STAGES
    mbarrier.wait(k_ready.index(slot), (j // STAGES) & 1)
    return warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)


@gluon.jit
def _pv(p_op, acc, v_smem, v_ready, j, STAGES: gl.constexpr):
    """Issue O += P·V of key tile j (async) once its V has landed."""
    slot = j % STAGES
    mbarrier.wait(v_ready.index(slot), (j // STAGES) & 1)
    return warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)


@gluon.jit
def _softmax(s, n0, m_i, l_i, q_pos, diag0, kv_len, qk_scale, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr,
             p_layout: gl.constexpr, o_layout: gl.constexpr, s_layout: gl.constexpr, dtype: gl.constexpr):
    """Online-softmax step of the scores of key tile [n0, n0 + BLOCK_N): (P as the next wgmma's register
    operand, the rows' rescale factor in the accumulator's layout, m, l). Only tiles past kv_len or (causal)
    past the warpgroup's first diagonal ``diag0`` apply the mask (a uniform branch). The arithmetic is
    ``kernel_utils.attention_fns.online_softmax_step``'s; a Gluon kernel cannot call ``triton.jit`` functions
    (their tensors carry no layout), so it is restated here with the wgmma layouts."""
    masked = n0 + BLOCK_N > kv_len
    if CAUSAL:
        masked = masked | (n0 + BLOCK_N > diag0 + 1)
    if masked:
        k_pos = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        ok = k_pos[None, :] < kv_len
        if CAUSAL:
            ok = ok & (k_pos[None, :] <= q_pos[:, None])
        s = gl.where(ok, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no visible key yet: p = 0, no NaN
    p = gl.exp2(s * qk_scale - m_safe[:, None])
    alpha = gl.exp2(m_i - m_safe)
    l_new = l_i * alpha + gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    return p_op, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), m_new, l_new


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_free, o_ptr,
              q_start, q_len, kv_len, head, n_hi, qk_scale, stride_ot, stride_oh,
              WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr):
    """Rows [m0 + 64·WG, +64) of the program's query block: every key tile of [0, n_hi), then the store.
    ``OVERLAP`` (FA3's intra-warpgroup pipelining): S of tile j + 1 and P·V of tile j are in flight while the
    softmax of tile j + 1 runs; else each tile's two wgmmas are waited for in turn."""
    R: gl.constexpr = ROWS_PER_CONSUMER
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = q_smem.dtype

    m0 = gl.program_id(0) * BLOCK_M + WG * R
    diag0 = kv_len - q_len + m0  # key position of this warpgroup's first row (bottom-right)
    q_pos = diag0 + gl.arange(0, R, layout=gl.SliceLayout(1, s_layout))
    m_i = gl.full([R], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([R], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([R, HEAD_DIM], gl.float32, layout=o_layout)
    zero_s = gl.zeros([R, BLOCK_N], gl.float32, layout=s_layout)
    q_tile = q_smem.index(WG)
    mbarrier.wait(q_ready, 0)
    n_tiles = gl.cdiv(n_hi, BLOCK_N)
    if OVERLAP:
        if n_tiles > 0:
            s = warpgroup_mma_wait(num_outstanding=0, deps=(_scores(q_tile, k_smem, k_ready, 0, zero_s, STAGES), ))
            p_op, alpha, m_i, l_i = _softmax(s, 0, m_i, l_i, q_pos, diag0, kv_len, qk_scale, CAUSAL, BLOCK_N,
                                             p_layout, o_layout, s_layout, dtype)
            for j in range(1, n_tiles):
                s_next = _scores(q_tile, k_smem, k_ready, j, zero_s, STAGES)
                acc = _pv(p_op, acc, v_smem, v_ready, j - 1, STAGES)
                s_next = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))  # S of tile j; P·V may still run
                p_next, alpha, m_i, l_i = _softmax(s_next, j * BLOCK_N, m_i, l_i, q_pos, diag0, kv_len, qk_scale,
                                                   CAUSAL, BLOCK_N, p_layout, o_layout, s_layout, dtype)
                # p_op stays live until its wgmma is waited for: its registers are read asynchronously
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
                mbarrier.arrive(kv_free.index((j - 1) % STAGES), count=1)
                acc = acc * alpha[:, None]
                p_op = p_next
            acc = _pv(p_op, acc, v_smem, v_ready, n_tiles - 1, STAGES)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
            mbarrier.arrive(kv_free.index((n_tiles - 1) % STAGES), count=1)
    else:
        for j in range(n_tiles):
            s = warpgroup_mma_wait(num_outstanding=0, deps=(_scores(q_tile, k_smem, k_ready, j, zero_s, STAGES), ))
            p_op, alpha, m_i, l_i = _softmax(s, j * BLOCK_N, m_i, l_i, q_pos, diag0, kv_len, qk_scale, CAUSAL,
                                             BLOCK_N, p_layout, o_layout, s_layout, dtype)
            acc = _pv(p_op, acc * alpha[:, None], v_smem, v_ready, j, STAGES)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))[0]
            mbarrier.arrive(kv_free.index(j % STAGES), count=1)

    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    out = acc / gl.where(l_o == 0.0, 1.0, l_o)[:, None]  # rows that saw no key: 0
    o_rows = m0 + gl.arange(0, R, layout=gl.SliceLayout(1, o_layout))
    o_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    ptrs = (o_ptr + (q_start + o_rows).to(gl.int64)[:, None] * stride_ot + head * stride_oh + o_cols[None, :])
    gl.store(ptrs, out.to(dtype), mask=(o_rows < q_len)[:, None])


@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_free,
            q_start, kv_start, head, kv_head, n_hi,
            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr):
    """TMA producer: both Q tiles, then K / V of every key tile of [0, n_hi) through the slot ring."""
    R: gl.constexpr = ROWS_PER_CONSUMER
    m0 = gl.program_id(0) * BLOCK_M
    mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_start + m0, head * HEAD_DIM], q_ready, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_start + m0 + R, head * HEAD_DIM], q_ready, q_smem.index(1))
    n_tiles = gl.cdiv(n_hi, BLOCK_N)
    for j in range(n_tiles):
        slot = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(kv_free.index(slot), phase ^ 1)  # a fresh barrier passes parity 1: the first lap is free
        row = kv_start + j * BLOCK_N
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, kv_head * HEAD_DIM], k_ready.index(slot), k_smem.index(slot))
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, kv_head * HEAD_DIM], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def gqa_fwd_ws_kernel(q_desc, k_desc, v_desc, o_ptr, cu_q_ptr, cu_kv_ptr, qk_scale, group, stride_ot, stride_oh,
                      CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                      STAGES: gl.constexpr, OVERLAP: gl.constexpr):
    """Grid: (cdiv(max_seqlen_q, BLOCK_M), H, B); num_warps = 4 (the first consumer), plus the worker
    partitions (second consumer: 4 warps, loader: 1 warp)."""
    gl.static_assert(BLOCK_M == 2 * ROWS_PER_CONSUMER)
    b = gl.program_id(2)
    head = gl.program_id(1)
    q_start = gl.load(cu_q_ptr + b)
    q_len = gl.load(cu_q_ptr + b + 1) - q_start
    kv_start = gl.load(cu_kv_ptr + b)
    kv_len = gl.load(cu_kv_ptr + b + 1) - kv_start
    m0 = gl.program_id(0) * BLOCK_M
    if m0 < q_len:
        n_hi = kv_len
        if CAUSAL:  # keys past the block's last row's diagonal are masked for every row
            n_hi = gl.minimum(kv_len, gl.maximum(kv_len - q_len + m0 + BLOCK_M, 0))
        dtype: gl.constexpr = q_desc.dtype
        q_smem = gl.allocate_shared_memory(dtype, [2, ROWS_PER_CONSUMER, HEAD_DIM], q_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(kv_free.index(i), count=2)  # both consumers release a slot
        fence_async_shared()  # the initialized barriers visible to the TMA unit (async proxy) before any copy
        kv_head = head // group
        gl.warp_specialize([
            (_consumer, (q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_free, o_ptr, q_start, q_len, kv_len,
                         head, n_hi, qk_scale, stride_ot, stride_oh, 0, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES,
                         OVERLAP)),
            (_consumer, (q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_free, o_ptr, q_start, q_len, kv_len,
                         head, n_hi, qk_scale, stride_ot, stride_oh, 1, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES,
                         OVERLAP)),
            (_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, kv_free,
                       q_start, kv_start, head, kv_head, n_hi, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES)),
        ], [4, 1], [240, 24])  # FA3's split: 240 + 240 + 24 registers x 128 threads = 168 x 384
        mbarrier.invalidate(q_ready)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(k_ready.index(i))
            mbarrier.invalidate(v_ready.index(i))
            mbarrier.invalidate(kv_free.index(i))
