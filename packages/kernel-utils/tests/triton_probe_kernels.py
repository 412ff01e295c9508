"""Tiny kernels that expose shared device functions to the tests (kernel files hold Triton only)."""

import triton
import triton.language as tl

from attnops.kernel_utils.triton_fns import segment_of, to_e4m3


@triton.jit
def to_e4m3_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, to_e4m3(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@triton.jit
def segment_of_kernel(cu_ptr, out_ptr, total, num_segments, BLOCK: tl.constexpr, SEGMENT_BLOCK: tl.constexpr):
    t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + t, segment_of(cu_ptr, t, num_segments, SEGMENT_BLOCK), mask=t < total)


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, limit, BLOCK: tl.constexpr):
    """y[i] = x[i] for i < n, reading and writing up to ``limit`` (masks at ``limit``, not ``n``: a bad call
    touches memory past the tensors)."""
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < limit), mask=offs < limit)


@triton.jit
def atomic_add_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(x_ptr + offs, tl.full([BLOCK], 1.0, tl.float32), mask=offs < n)


@triton.jit
def load_at_kernel(x_ptr, other_ptr, out_ptr, offset):
    """out[0] = x[offset]; ``other_ptr`` is only there to be an argument of the launch."""
    tl.store(out_ptr, tl.load(x_ptr + offset) + 0 * tl.load(other_ptr))
