from .op import nsa_varlen_fwd

__all__ = ["nsa_varlen_fwd"]
