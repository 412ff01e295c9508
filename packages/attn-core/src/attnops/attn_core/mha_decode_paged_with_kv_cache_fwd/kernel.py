"""MHADecodePagedWithKVCacheFwd runs the paged attention kernel of GQAPagedFwd with G = 1, the flat pool
given as page / token strides and uniform query lengths (``Q_UNIFORM = S_q``: no cu_seqlens tensor)."""

from attnops.attn_core.gqa_paged_fwd.kernel import paged_attention_combine_kernel, paged_attention_kernel

__all__ = ["paged_attention_combine_kernel", "paged_attention_kernel"]
