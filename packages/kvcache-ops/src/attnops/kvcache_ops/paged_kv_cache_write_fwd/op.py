"""PagedKVCacheWriteFwd: checks, launch, torch custom-op registration."""

from __future__ import annotations

import torch
import triton

from attnops.kernel_utils import checks, runtime
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.triton_fns import COPY_PLAIN, COPY_QUANT_E4M3, row_copy_config

from .kernel import paged_kv_cache_write_kernel

_ACTIVATIONS = (torch.float16, torch.bfloat16)


def launch(k, v, k_pages, v_pages, slot_mapping, k_scale, v_scale, config: tuple[int, int, int] | None = None):
    """Launch the kernel; ``config`` = (BLOCK_T, BLOCK_E, num_warps) overrides the tuned heuristic."""
    num_tokens = k.shape[0]
    num_pages, page_size = k_pages.shape[:2]
    row = k.shape[1] * k.shape[2]
    quant = k_pages.dtype == E4M3
    # The e4m3 rounding holds more registers per element: one-token tiles measured 13% faster on the
    # qwen3-235b-fp8 row (docs/perf/kvcache-ops.md).
    tile_elems = 512 if quant else 4096
    block_t, block_e, num_warps = config or row_copy_config(num_tokens, row, runtime.num_sms(), tile_elems)
    grid = (triton.cdiv(num_tokens, block_t), triton.cdiv(row, block_e))
    paged_kv_cache_write_kernel[grid](
        k, v, k_pages, v_pages, slot_mapping,
        k_scale if quant else slot_mapping, v_scale if quant else slot_mapping,
        num_tokens, num_pages * page_size, page_size,
        k.stride(0), v.stride(0),
        k_pages.stride(0), k_pages.stride(1), v_pages.stride(0), v_pages.stride(1),
        ROW=row, BLOCK_T=block_t, BLOCK_E=block_e,
        MODE=COPY_QUANT_E4M3 if quant else COPY_PLAIN,
        num_warps=num_warps,
    )


@torch.library.custom_op("attnops::paged_kv_cache_write_fwd", mutates_args=("k_pages", "v_pages"))
def _write(
    k: torch.Tensor,
    v: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    if k.shape[0]:
        launch(k, v, k_pages, v_pages, slot_mapping, k_scale, v_scale)


@_write.register_fake
def _(k, v, k_pages, v_pages, slot_mapping, k_scale, v_scale) -> None:
    return None


def paged_kv_cache_write_fwd(
    k: torch.Tensor,
    v: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Write one K and one V row per new token into paged pools, in place (vLLM ``reshape_and_cache_flash``).

    Args:
        k, v: ``[N, H_kv, D]`` f16/bf16, one row per new token; the last two dims contiguous.
        k_pages, v_pages: ``[NP, PS, H_kv, D]`` pools of k's dtype or ``float8_e4m3fn``; mutated. Any page
            and slot strides (e.g. views of a ``[NP, 2, PS, H_kv, D]`` cache); ``[H_kv, D]`` contiguous.
        slot_mapping: ``[N]`` int64 flat slot ``page · PS + offset`` of each token; negative = padding,
            nothing written. Duplicate slots are the caller's error (which one lands is undefined).
        k_scale, v_scale: ``[1]`` f32, required iff the pools are fp8: stored value is
            ``sat_e4m3(rne(x / scale))``.

    Example::

        k_pages = torch.empty(4096, 16, 8, 128, dtype=torch.bfloat16, device="cuda")
        paged_kv_cache_write_fwd(k, v, k_pages, v_pages, slot_mapping)
    """
    dev = runtime.device()
    checks.check_tensor("k", k, dtype=_ACTIVATIONS, ndim=3, device=dev, inner_contiguous=2)
    n, h_kv, d = k.shape
    checks.check_tensor("v", v, dtype=k.dtype, shape=(n, h_kv, d), device=dev, inner_contiguous=2)
    checks.check_tensor("k_pages", k_pages, dtype=(k.dtype, E4M3), shape=(None, None, h_kv, d), device=dev,
                        inner_contiguous=2)
    checks.check_tensor("v_pages", v_pages, dtype=k_pages.dtype, shape=tuple(k_pages.shape), device=dev,
                        inner_contiguous=2)
    checks.check_tensor("slot_mapping", slot_mapping, dtype=torch.int64, shape=(n,), device=dev,
                        inner_contiguous=1)
    if k_pages.dtype == E4M3:
        if k_scale is None or v_scale is None:
            raise ValueError("k_scale, v_scale: required (f32 [1]) when the pools are float8_e4m3fn")
        k_scale = checks.check_scale("k_scale", k_scale, dev)
        v_scale = checks.check_scale("v_scale", v_scale, dev)
    elif k_scale is not None or v_scale is not None:
        raise ValueError(f"k_scale, v_scale: only for float8_e4m3fn pools, got pools of {k_pages.dtype}")
    if checks.validate_values(slot_mapping):
        num_slots = k_pages.shape[0] * k_pages.shape[1]
        checks.check_index_range("slot_mapping", slot_mapping, 0, num_slots, ignore_below=0)
    _write(k, v, k_pages, v_pages, slot_mapping, k_scale, v_scale)
