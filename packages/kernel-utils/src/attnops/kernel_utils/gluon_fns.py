"""Gluon (Hopper) device helpers shared by the families' warp-specialized kernels: the layouts of one 4-warp
warpgroup's wgmma, and the allocation / init / teardown of a TMA ring's mbarriers. Imported only by Gluon
kernels (Triton 3.4+), never by the portable Triton ones."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.constexpr_function
def wgmma_acc_layout(n):
    """The fp32 accumulator layout of a 4-warp warpgroup's m64·n·k16 wgmma (64 rows, ``n`` columns)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def wgmma_lhs_layout(n):
    """The register left-operand layout of a 16-bit wgmma whose accumulator is ``wgmma_acc_layout(n)``."""
    return gl.DotOperandLayout(operand_index=0, parent=wgmma_acc_layout(n), k_width=2)


@gluon.jit
def init_ring(ready, free, STAGES: gl.constexpr, READY_COUNT: gl.constexpr, FREE_COUNT: gl.constexpr):
    """Each slot's ``ready`` barrier (arrivals per fill: 1 for a TMA expect, one per thread for cp.async) and
    ``free`` barrier (one arrival per consumer partition)."""
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=READY_COUNT)
        mbarrier.init(free.index(i), count=FREE_COUNT)


@gluon.jit
def ring_barriers(STAGES: gl.constexpr, READY_COUNT: gl.constexpr, FREE_COUNT: gl.constexpr):
    """A ring's ``ready`` and ``free`` mbarriers ([STAGES, 1] each), allocated and initialized (``init_ring``)."""
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    init_ring(ready, free, STAGES, READY_COUNT, FREE_COUNT)
    return ready, free


@gluon.jit
def invalidate_ring(ready, free, STAGES: gl.constexpr):
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(free.index(i))
