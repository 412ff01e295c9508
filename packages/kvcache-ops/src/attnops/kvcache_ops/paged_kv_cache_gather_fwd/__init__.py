from .op import paged_kv_cache_gather_fwd

__all__ = ["paged_kv_cache_gather_fwd"]
