"""A flat scaled cast of a contiguous tensor into another dtype: ``dst = (float(src) · scale)``, rounded once.

torch's own cast of e4m3 to 16 bits runs its unvectorized elementwise loop: on the H200 (2026-12-03) it took
11.8 µs of qwen3-fp8-ragged's 127 µs for a 3.1 MB V (about a fifth of the copy bandwidth). Here every program moves
``CAST_BLOCK`` elements with wide loads and stores.
"""

import torch
import triton
import triton.language as tl

CAST_BLOCK = 4096


@triton.jit
def scaled_cast_kernel(src_ptr, dst_ptr, n, scale, BLOCK: tl.constexpr):
    """``dst[i] = dst_dtype(f32(src[i]) · scale)`` for ``i < n``; both contiguous."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs, mask=offs < n).to(tl.float32)
    tl.store(dst_ptr + offs, (x * scale).to(dst_ptr.dtype.element_ty), mask=offs < n)


def scaled_cast(src: torch.Tensor, dst: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Fill ``dst`` (contiguous, as many elements as ``src``, contiguous) with ``src · scale``; returns ``dst``."""
    if not (src.is_contiguous() and dst.is_contiguous()) or src.numel() != dst.numel():
        raise ValueError(f"scaled_cast: contiguous tensors of one size expected, got src {tuple(src.shape)} "
                         f"{tuple(src.stride())} and dst {tuple(dst.shape)} {tuple(dst.stride())}")
    n = src.numel()
    if n:
        scaled_cast_kernel[(triton.cdiv(n, CAST_BLOCK),)](src, dst, n, float(scale), BLOCK=CAST_BLOCK, num_warps=4)
    return dst
