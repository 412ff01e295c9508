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
