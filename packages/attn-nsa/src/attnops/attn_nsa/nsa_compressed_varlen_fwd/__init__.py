from .op import nsa_compressed_varlen_fwd

__all__ = ["nsa_compressed_varlen_fwd"]
