"""Plain-torch reference of PagedKVCacheWriteFwd (spec: kvcache-ops.md), one token at a time."""

import torch

from attnops.kernel_utils.fp8 import quantize_e4m3


def paged_kv_cache_write_fwd_ref(k, v, k_pages, v_pages, slot_mapping, k_scale=None, v_scale=None) -> None:
    page_size = k_pages.shape[1]
    for n, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue  # padding token
        page, offset = divmod(slot, page_size)
        for src, pool, scale in ((k, k_pages, k_scale), (v, v_pages, v_scale)):
            row = src[n]
            pool[page, offset] = quantize_e4m3(row, scale) if pool.dtype == torch.float8_e4m3fn else row
