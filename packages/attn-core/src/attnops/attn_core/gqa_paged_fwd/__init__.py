from .op import gqa_paged_fwd, gqa_paged_plan
from .plan import PagedAttentionPlan

__all__ = ["PagedAttentionPlan", "gqa_paged_fwd", "gqa_paged_plan"]
