"""Plain-torch reference of PagedKVCacheGatherFwd (spec: kvcache-ops.md), one token at a time."""

import torch

from attnops.kernel_utils.fp8 import dequantize_e4m3


def paged_kv_cache_gather_fwd_ref(dst, cache, block_table, cu_seq_lens, seq_starts=None, scale=None,
                                  out_dtype=None) -> None:
    page_size = cache.shape[1]
    cu = cu_seq_lens.tolist()
    for b in range(len(cu) - 1):
        start = int(seq_starts[b]) if seq_starts is not None else 0
        for i in range(cu[b + 1] - cu[b]):
            p = start + i
            row = cache[int(block_table[b, p // page_size]), p % page_size]
            if cache.dtype == torch.float8_e4m3fn:
                row = dequantize_e4m3(row, scale, dst.dtype)
            dst[cu[b] + i] = row
