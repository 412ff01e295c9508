from .autograd import GQAAttention, gqa_attention, gqa_attention_fwd
from .op import gqa_bwd

__all__ = ["GQAAttention", "gqa_attention", "gqa_attention_fwd", "gqa_bwd"]
