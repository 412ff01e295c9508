from .op import mha_decode_paged_plan, mha_decode_paged_with_kv_cache_fwd

__all__ = ["mha_decode_paged_plan", "mha_decode_paged_with_kv_cache_fwd"]
