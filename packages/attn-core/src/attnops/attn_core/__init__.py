"""attnops.attn_core: GQA/MHA attention forward (dense, varlen, paged) and backward."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__
from .gqa_bwd import GQAAttention, gqa_attention, gqa_attention_fwd, gqa_bwd  # training pair (issue 5)
from .gqa_dense_fwd import gqa_dense_fwd
from .gqa_paged_fwd import PagedAttentionPlan, gqa_paged_fwd, gqa_paged_plan  # paged ops (issue 4)
from .gqa_prefill_paged_with_kv_cache_fwd import (  # paged ops (issue 4)
    PrefillPagedPlan,
    gqa_prefill_paged_plan,
    gqa_prefill_paged_with_kv_cache_fwd,
)
from .gqa_varlen_fwd import gqa_varlen_fwd
from .mha_decode_paged_with_kv_cache_fwd import (  # paged ops (issue 4)
    mha_decode_paged_plan,
    mha_decode_paged_with_kv_cache_fwd,
)

__all__ = ["__version__"]
__all__ += ["gqa_dense_fwd", "gqa_varlen_fwd"]
__all__ += ["PagedAttentionPlan", "gqa_paged_fwd", "gqa_paged_plan"]
__all__ += ["PrefillPagedPlan", "gqa_prefill_paged_plan", "gqa_prefill_paged_with_kv_cache_fwd"]
__all__ += ["mha_decode_paged_plan", "mha_decode_paged_with_kv_cache_fwd"]
__all__ += ["GQAAttention", "gqa_attention", "gqa_attention_fwd", "gqa_bwd"]
