"""Gluon (Hopper) device helpers shared by the families' warp-specialized kernels: the layouts of one 4-warp
warpgroup's wgmma, the move of its accumulator tile to 16-byte row pieces for the output stores
(``store_layout`` / ``to_store_layout``), the allocation / init / teardown of a TMA ring's mbarriers, and the
partition wrapper that lets two consumer warpgroups share one argument list (``warpgroup_partition``).
Imported only by Gluon kernels (Triton 3.4+), never by the portable Triton ones."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

WARPGROUP_THREADS = gl.constexpr(128)


@gluon.constexpr_function
def wgmma_acc_layout(n):
    """The fp32 accumulator layout of a 4-warp warpgroup's m64·n·k16 wgmma (64 rows, ``n`` columns)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def wgmma_lhs_layout(n):
    """The register left-operand layout of a 16-bit wgmma whose accumulator is ``wgmma_acc_layout(n)``."""
    return gl.DotOperandLayout(operand_index=0, parent=wgmma_acc_layout(n), k_width=2)


# Output stores from the accumulator. In ``wgmma_acc_layout(n)`` a thread holds 2 consecutive columns, 4 lanes share
# a row and a warp instruction covers 8 rows: a 16-bit [64, n] tile takes n / 4 4-byte stores a thread, each writing
# 8 rows x 16 bytes (half sectors). In attn-mla's DSA ws kernel (n = 256) those stores held 11.9 % of the warp-stall
# samples, mostly LSU-queue (lg) throttle (Nsight Compute, mla-d512-h64-kv32k, H200, 2026-12-04; docs/perf/attn-mla.md,
# thirtieth session); moved first to ``store_layout`` the d512-h64 rows ran 11-14 % faster. ``store_layout`` holds
# 16 bytes of consecutive columns a thread and puts 8 lanes along a row's 128 contiguous bytes (4 rows a warp
# instruction: n / 16 ``STG.E.128`` a thread in 16 bits, n / 8 in fp32), with the accumulator's warp bases (warp w:
# rows 16w..16w + 15), so the data only moves inside each warp: shuffles, no shared-memory scratch. It swaps lane
# bits of the accumulator layout with register bits, and Triton 3.6 lowers a conversion by warp shuffles only when
# it swaps at most one such pair (else through shared memory: in the DSA kernel 7.6 KB more, over the limit): hence
# ``to_store_layout``'s chain, one swap per conversion.
# The accumulator's bases over [64, n] (Triton 3.6's ``to_linear_layout`` of ``wgmma_acc_layout(n)``, n a power of
# two >= 16): registers column 1, row 8, then columns 8, 16, ..., n / 2; lanes columns 2 and 4, rows 1, 2 and 4;
# warps rows 16 and 32.
_ACC_LANES = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
_ACC_WARPS = ((16, 0), (32, 0))
# (lane bit, register bit) swapped by each conversion, the same for every n: 16-bit, columns 2 and 4 into the thread,
# its columns 8, 16 and 32 onto lanes (and row 4 into the thread); fp32, column 2 into the thread, columns 8 and 16
# onto lanes. Hence n >= 64 in 16 bits (register bit 4: column 32), n >= 32 in fp32 (register bit 3: column 16).
_STORE_SWAPS = {16: ((0, 2), (1, 3), (4, 4)), 32: ((0, 2), (4, 3))}
_STORE_MIN_N = {16: 64, 32: 32}


@gluon.constexpr_function
def _acc_regs(n):
    """The accumulator's register bases over [64, ``n``] (see above)."""
    return ((0, 1), (8, 0)) + tuple((0, c) for c in (8 << i for i in range(n.bit_length())) if c < n)


@gluon.constexpr_function
def store_swaps(bits):
    """How many conversions ``to_store_layout`` takes for elements of ``bits`` bits (16 or 32)."""
    return len(_STORE_SWAPS[bits])


@gluon.constexpr_function
def store_layout(n, bits, steps=None):
    """The store layout of a [64, ``n``] tile of one warpgroup's wgmma accumulator (``wgmma_acc_layout(n)``) in
    ``bits``-bit elements (16 or 32; ``n`` a power of two, >= 64 in 16 bits, >= 32 in fp32), or the accumulator
    layout after the first ``steps`` swaps (an intermediate of ``to_store_layout``; 0: the accumulator's own). The
    final one lists the registers of a thread's 16 bytes first (what the store vectorizes)."""
    assert bits in _STORE_SWAPS, f"16-bit or fp32 elements, got {bits} bits"
    assert n >= _STORE_MIN_N[bits] and n & (n - 1) == 0, f"n a power of two >= {_STORE_MIN_N[bits]}, got {n}"
    swaps = _STORE_SWAPS[bits]
    steps = len(swaps) if steps is None else steps
    regs = [list(b) for b in _acc_regs(n)]
    lanes = [list(b) for b in _ACC_LANES]
    for lane, reg in swaps[:steps]:
        regs[reg], lanes[lane] = lanes[lane], regs[reg]
    if steps == len(swaps):
        vec = 128 // bits  # elements in 16 bytes
        piece = [[0, 1 << i] for i in range(vec.bit_length() - 1)]
        assert all(b in regs for b in piece), (bits, regs)
        regs = piece + [b for b in regs if b not in piece]
    return gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes, warp_bases=[list(b) for b in _ACC_WARPS],
                                      block_bases=[], shape=[64, n])


@gluon.jit
def to_store_layout(x):
    """``x`` [64, n] (16-bit or fp32) from the accumulator layout ``wgmma_acc_layout(n)`` to ``store_layout(n,
    bits)``: one lane / register swap per conversion, each lowered to warp shuffles (n / 8 a thread per swap in 16
    bits, n / 4 in fp32). Build the store's row / column indices in slices of ``store_layout``."""
    gl.static_assert(x.shape[0] == 64, "one warpgroup's 64 accumulator rows")
    N: gl.constexpr = x.shape[1]
    BITS: gl.constexpr = x.dtype.primitive_bitwidth
    STEPS: gl.constexpr = store_swaps(BITS)
    gl.static_assert(STEPS == 2 or STEPS == 3)
    x = gl.convert_layout(x, store_layout(N, BITS, 1))
    x = gl.convert_layout(x, store_layout(N, BITS, 2))
    if STEPS == 3:
        x = gl.convert_layout(x, store_layout(N, BITS, 3))
    return x


# Lazy O rescale (FA4's, for Hopper's register accumulators): a row's reference max m moves only when a key tile's
# maximum exceeds it by more than ``SLACK`` (base-2 units), so P <= 2^SLACK between moves and the rescale factor
# exp2(m_old - m_new) is exactly 1 on most tiles; a warpgroup whose rows all kept their m skips the O multiply. The
# (m, l) pair stays the rows' exact log-sum-exp (l is summed against the same m), so O / l and the lse do not change.
# SLACK = 8: P <= 256, exact in 16 bits up to the usual rounding, l and O in fp32.
RESCALE_SLACK = gl.constexpr(8.0)


@gluon.jit
def reference_max(m_i, m_tile, SLACK: gl.constexpr):
    """A row's new max of the online softmax: the running maximum (``SLACK`` 0), or with ``SLACK`` > 0 the old one
    unless ``m_tile`` exceeds it by more than ``SLACK`` (from m = -inf any finite maximum moves it)."""
    if SLACK > 0:
        return gl.where(m_tile > m_i + SLACK, m_tile, m_i)
    else:
        return gl.maximum(m_i, m_tile)


@gluon.jit
def rescaled(acc, scale, moved, LAZY: gl.constexpr):
    """O·scale per row, or O itself where the lazy rescale (``LAZY``) knows every factor is 1 (``moved`` == 0: a
    scalar every thread holds, so the branch is uniform)."""
    if LAZY:
        if moved != 0:
            acc = acc * scale[:, None]
    else:
        acc = acc * scale[:, None]
    return acc


@gluon.jit
def warpgroup_partition(fn: gl.constexpr, args, WG: gl.constexpr, flags: gl.constexpr):
    """Runs ``fn(*args, WG, *flags)``: one consumer warpgroup's partition of ``gl.warp_specialize``, for kernels
    whose consumer warpgroups differ only in their index ``WG``, so that the kernel names their arguments once::

        consumer_args = (q_smem, ..., stride_oh)        # values: tensors, shared buffers, barriers
        consumer_flags: gl.constexpr = (LAYOUT, ...)   # the compile-time parameters after WG
        gl.warp_specialize([(warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
                            (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)), ...

    Why the indirection (Triton 3.6): the frontend turns constexprs assigned to a plain name into tensors, also
    inside a tuple, so a shared argument tuple would lose its compile-time parameters; kept as one constexpr tuple,
    they are unpacked here (``gl.tuple``) and reach ``fn`` as constexprs. ``fn`` goes in as a constexpr because a
    worker partition's arguments are flattened to IR values."""
    fn(*args, WG, *gl.tuple(flags))


@gluon.jit
def init_ring(ready, free, STAGES: gl.constexpr, READY_COUNT: gl.constexpr, FREE_COUNT: gl.constexpr,
              READY_PARTS: gl.constexpr = 1, FREE_PARTS: gl.constexpr = 1):
    """Each slot's ``ready`` barriers (arrivals per fill: 1 for a TMA expect, one per thread for cp.async; with
    ``READY_PARTS`` > 1 one per part of the slot, part j of slot s at ``j·STAGES + s``) and ``free`` barriers (one
    arrival per releasing consumer partition; with ``FREE_PARTS`` > 1 one per part, laid out the same way)."""
    for i in gl.static_range(STAGES):
        for j in gl.static_range(READY_PARTS):
            mbarrier.init(ready.index(j * STAGES + i), count=READY_COUNT)
        for j in gl.static_range(FREE_PARTS):
            mbarrier.init(free.index(j * STAGES + i), count=FREE_COUNT)


@gluon.jit
def ring_barriers(STAGES: gl.constexpr, READY_COUNT: gl.constexpr, FREE_COUNT: gl.constexpr,
                  READY_PARTS: gl.constexpr = 1, FREE_PARTS: gl.constexpr = 1):
    """A ring's ``ready`` ([READY_PARTS·STAGES, 1]: a barrier per part of a slot, ``init_ring``) and ``free``
    ([FREE_PARTS·STAGES, 1]) mbarriers, allocated and initialized."""
    ready = gl.allocate_shared_memory(gl.int64, [READY_PARTS * STAGES, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [FREE_PARTS * STAGES, 1], mbarrier.MBarrierLayout())
    init_ring(ready, free, STAGES, READY_COUNT, FREE_COUNT, READY_PARTS, FREE_PARTS)
    return ready, free


@gluon.constexpr_function
def release_count(partitions, per_thread):
    """A free barrier's arrivals per phase when ``partitions`` consumer warpgroups each ``release`` it once."""
    return partitions * (WARPGROUP_THREADS.value if per_thread else 1)


@gluon.jit
def release(free, PER_THREAD: gl.constexpr):
    """A consumer warpgroup's arrival on ``free`` once its reads of the slot have retired (its wgmma waits done).
    ``mbarrier.arrive`` is one thread's arrival, and Triton 3.6 puts a warpgroup barrier (``bar.sync``, 128 threads)
    before it so that every thread is past its reads. ``PER_THREAD``: every thread arrives by itself instead
    (``release_count``: 128 a warpgroup), through ``cp.async.mbarrier.arrive.noinc``, which takes effect once the
    thread's earlier cp.async copies have landed (a consumer issues none: at once) and which Triton lowers without
    that barrier (sm_90 PTX, 2026-12-04)."""
    if PER_THREAD:
        async_copy.mbarrier_arrive(free, increment_count=False)
    else:
        mbarrier.arrive(free, count=1)


@gluon.jit
def invalidate_ring(ready, free, STAGES: gl.constexpr, READY_PARTS: gl.constexpr = 1, FREE_PARTS: gl.constexpr = 1):
    for i in gl.static_range(STAGES):
        for j in gl.static_range(READY_PARTS):
            mbarrier.invalidate(ready.index(j * STAGES + i))
        for j in gl.static_range(FREE_PARTS):
            mbarrier.invalidate(free.index(j * STAGES + i))
