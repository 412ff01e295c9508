"""attnops.kvcache_ops: paged KV-cache data movement (write new tokens into pages, gather ranges out)."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__
from .paged_kv_cache_gather_fwd import paged_kv_cache_gather_fwd
from .paged_kv_cache_write_fwd import paged_kv_cache_write_fwd

__all__ = ["__version__", "paged_kv_cache_gather_fwd", "paged_kv_cache_write_fwd"]
