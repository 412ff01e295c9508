from .op import gqa_dense_fwd

__all__ = ["gqa_dense_fwd"]
