from .op import PrefillPagedPlan, gqa_prefill_paged_plan, gqa_prefill_paged_with_kv_cache_fwd

__all__ = ["PrefillPagedPlan", "gqa_prefill_paged_plan", "gqa_prefill_paged_with_kv_cache_fwd"]
