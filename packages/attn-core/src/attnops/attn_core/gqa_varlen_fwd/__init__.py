from .op import gqa_varlen_fwd

__all__ = ["gqa_varlen_fwd"]
