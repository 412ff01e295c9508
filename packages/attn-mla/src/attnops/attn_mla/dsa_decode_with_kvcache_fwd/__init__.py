from .op import dsa_decode_with_kvcache_fwd

__all__ = ["dsa_decode_with_kvcache_fwd"]
