from .op import nsa_topk_varlen_fwd

__all__ = ["nsa_topk_varlen_fwd"]
