from .op import paged_kv_cache_write_fwd

__all__ = ["paged_kv_cache_write_fwd"]
