from .op import mla_decode_with_kvcache_fwd

__all__ = ["mla_decode_with_kvcache_fwd"]
