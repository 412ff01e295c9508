"""PagedKVCacheGatherFwd: checks, launch, torch custom-op registration."""

from __future__ import annotations

import math

import torch
import triton

from attnops.kernel_utils import checks, runtime
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.triton_fns import COPY_DEQUANT, COPY_PLAIN, row_copy_config, segment_block

from .kernel import paged_kv_cache_gather_kernel

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def launch(dst, cache, block_table, cu_seq_lens, seq_starts, scale, config: tuple[int, int, int] | None = None):
    """Launch the kernel; ``config`` = (BLOCK_T, BLOCK_E, num_warps) overrides the tuned heuristic."""
    num_rows = dst.shape[0]
    row = math.prod(cache.shape[2:])
    block_t, block_e, num_warps = config or row_copy_config(num_rows, row, runtime.num_sms())
    num_requests = block_table.shape[0]
    dequant = cache.dtype == E4M3
    grid = (triton.cdiv(num_rows, block_t), triton.cdiv(row, block_e))
    paged_kv_cache_gather_kernel[grid](
        dst, cache, block_table, cu_seq_lens,
        seq_starts if seq_starts is not None else cu_seq_lens,
        scale if dequant else cu_seq_lens,
        num_rows, num_requests, cache.shape[0], cache.shape[1], block_table.shape[1],
        dst.stride(0), cache.stride(0), cache.stride(1), block_table.stride(0),
        ROW=row, BLOCK_T=block_t, BLOCK_E=block_e, SEGMENT_BLOCK=segment_block(num_requests),
        HAS_STARTS=seq_starts is not None, MODE=COPY_DEQUANT if dequant else COPY_PLAIN,
        num_warps=num_warps,
    )


@torch.library.custom_op("attnops::paged_kv_cache_gather_fwd", mutates_args=("dst",))
def _gather(
    dst: torch.Tensor,
    cache: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    seq_starts: torch.Tensor | None,
    scale: torch.Tensor | None,
) -> None:
    if dst.shape[0]:
        launch(dst, cache, block_table, cu_seq_lens, seq_starts, scale)


@_gather.register_fake
def _(dst, cache, block_table, cu_seq_lens, seq_starts, scale) -> None:
    return None


def _check_ranges(cache, block_table, cu_seq_lens, seq_starts):
    """Every consulted table entry exists and names a real page (host-side; reads the metadata)."""
    page_size, width = cache.shape[1], block_table.shape[1]
    lens = (cu_seq_lens[1:] - cu_seq_lens[:-1]).long().cpu()
    starts = seq_starts.long().cpu() if seq_starts is not None else torch.zeros_like(lens)
    if bool((starts < 0).any()):
        raise ValueError(f"seq_starts: must be >= 0, got {starts.min().item()}")
    used = lens > 0
    last_page = (starts + lens - 1).div(page_size, rounding_mode="floor")
    if bool((last_page[used] >= width).any()):
        raise ValueError(f"block_table: width {width} is too narrow for the requested ranges "
                         f"(need {int(last_page[used].max()) + 1} columns)")
    table = block_table.cpu()
    for b in torch.nonzero(used).flatten().tolist():
        first = int(starts[b]) // page_size
        checks.check_index_range(f"block_table[{b}]", table[b, first : int(last_page[b]) + 1], 0, cache.shape[0])


def paged_kv_cache_gather_fwd(
    dst: torch.Tensor,
    cache: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    seq_starts: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> None:
    """Gather ragged logical token ranges of a paged cache into a packed ``dst``, in place
    (vLLM ``gather_and_maybe_dequant_cache`` / ``cp_gather_cache``).

    Args:
        dst: ``[T, *E]`` written whole; dtype = the cache's, or ``out_dtype`` (f16/bf16) for an fp8 cache.
            ``*E`` contiguous.
        cache: ``[NP, PS, *E]`` f16/bf16/float8_e4m3fn (``*E`` e.g. ``[576]`` or ``[H_kv, D]``); any page
            and slot strides, ``*E`` contiguous.
        block_table: ``[B, W]`` int32; only the entries a range reaches are read.
        cu_seq_lens: ``[B+1]`` int32; request b fills dst rows ``[cu[b], cu[b+1])``, ``cu[B] = T``.
        seq_starts: ``[B]`` int32 first logical position of each range (default 0; need not be page-aligned).
        scale: ``[1]`` f32, required iff the cache is fp8: ``dst = rne(float(cache) · scale)``.
        out_dtype: dtype of ``dst`` for an fp8 cache (checked against ``dst``).

    Example::

        dst = torch.empty(T, 576, dtype=torch.bfloat16, device="cuda")
        paged_kv_cache_gather_fwd(dst, cache_fp8, block_table, cu_seq_lens, scale=scale)
    """
    dev = runtime.device()
    checks.check_tensor("cache", cache, dtype=(*_SIXTEEN_BIT, E4M3), device=dev)
    if cache.dim() < 3:
        raise ValueError(f"cache: expected [NP, PS, *E] with at least 3 dims, got shape {tuple(cache.shape)}")
    elem = tuple(cache.shape[2:])
    fp8 = cache.dtype == E4M3
    if fp8:
        want = out_dtype if out_dtype is not None else dst.dtype
        if want not in _SIXTEEN_BIT:
            raise TypeError(f"out_dtype: an fp8 cache gathers into float16 or bfloat16, got {want}")
    elif out_dtype is not None and out_dtype != cache.dtype:
        raise TypeError(f"out_dtype: must be the cache dtype {cache.dtype} for a 16-bit cache, got {out_dtype}")
    else:
        want = cache.dtype
    checks.check_tensor("cache", cache, inner_contiguous=len(elem))
    checks.check_tensor("dst", dst, dtype=want, shape=(None, *elem), device=dev, inner_contiguous=len(elem))
    checks.check_tensor("block_table", block_table, dtype=torch.int32, ndim=2, device=dev, inner_contiguous=1)
    batch = block_table.shape[0]
    checks.check_tensor("cu_seq_lens", cu_seq_lens, dtype=torch.int32, shape=(batch + 1,), device=dev,
                        inner_contiguous=1)
    if seq_starts is not None:
        checks.check_tensor("seq_starts", seq_starts, dtype=torch.int32, shape=(batch,), device=dev,
                            inner_contiguous=1)
    if fp8:
        if scale is None:
            raise ValueError("scale: required (f32 [1]) for a float8_e4m3fn cache")
        scale = checks.check_scale("scale", scale, dev)
    elif scale is not None:
        raise ValueError(f"scale: only for a float8_e4m3fn cache, got a {cache.dtype} cache")
    if checks.validate_values(cu_seq_lens, block_table):
        checks.check_cu_seqlens("cu_seq_lens", cu_seq_lens.cpu(), total=dst.shape[0])
        _check_ranges(cache, block_table, cu_seq_lens, seq_starts)
    _gather(dst, cache, block_table, cu_seq_lens, seq_starts, scale)
