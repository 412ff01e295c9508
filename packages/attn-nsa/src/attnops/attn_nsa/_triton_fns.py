"""``@triton.jit`` helpers of the NSA family: row-wise bitonic top-k / merge on integer keys.

Same networks as ``triton.language.standard`` (sort on a hypercube reshape of the tensor), except that the
compare-and-swap finds each element's partner as ``sum(pair) - x`` instead of ``xor_sum(pair) ^ x``: one
reduction over a size-2 axis either way on the GPU, but ``tl.sum`` has a vectorized path in Triton's
interpreter while ``xor_sum`` falls back to an element-by-element Python loop (~100x slower). Keys must
therefore stay within ``(-2^62, 2^62)`` so that a pair sum cannot overflow.
"""

import triton
import triton.language as tl
from triton.language.standard import _log2


@triton.jit
def _merge_cube(h, stage: tl.constexpr, order: tl.constexpr):
    """``stage`` rounds of a bitonic merge on a [2, ..., 2] hypercube: compare-and-swap along the innermost
    ``stage`` axes; order 0 ascending, 1 descending, 2 alternating blocks of 2^stage. (Written out in one
    function: each nested ``@triton.jit`` call costs the interpreter ~0.2 ms.)"""
    n_dims: tl.constexpr = _log2(h.numel)
    if order == 2:
        flip = tl.reshape(tl.arange(0, 2), [1] * (n_dims - stage - 1) + [2] + [1] * stage)
    else:
        flip = order
    for k in tl.static_range(stage):  # compare along the (stage - 1 - k)-th innermost axis
        partner = tl.sum(h, n_dims - stage + k, keep_dims=True) - h
        is_right = tl.reshape(tl.arange(0, 2), [1] * (n_dims - stage + k) + [2] + [1] * (stage - 1 - k))
        h = tl.where((h > partner) != (flip ^ is_right), partner, h)
    return h


@triton.jit
def row_topk(x, K: tl.constexpr, DESCENDING: tl.constexpr):
    """The K largest entries of each row of ``x [R, N]`` (R, N, K powers of two, K <= N), sorted descending
    (``DESCENDING=1``) or ascending (``0``)."""
    log_n: tl.constexpr = _log2(x.shape[1])
    log_k: tl.constexpr = _log2(K)
    n_dims: tl.constexpr = _log2(x.numel)
    h = tl.reshape(x, [2] * n_dims if n_dims else [1])
    for i in tl.static_range(1, log_k + 1):
        h = _merge_cube(h, i, 2 if i < log_n else DESCENDING)
    for i in tl.static_range(log_k + 1, log_n + 1):
        h = tl.max(h, axis=_log2(h.numel) - 1 - log_k)  # keep the larger half of each bitonic pair of blocks
        h = _merge_cube(h, log_k, 2 if i < log_n else DESCENDING)
    return tl.reshape(h, [x.shape[0], K])


@triton.jit
def merge_topk_desc(top, new_asc):
    """Rows of ``top`` sorted descending and ``new_asc`` sorted ascending (same shape): the largest
    ``top.shape[1]`` of their union per row, sorted descending (max of the two is bitonic; merge it)."""
    cand = tl.maximum(top, new_asc)
    n_dims: tl.constexpr = _log2(cand.numel)
    h = _merge_cube(tl.reshape(cand, [2] * n_dims if n_dims else [1]), _log2(cand.shape[1]), 1)
    return tl.reshape(h, top.shape)
