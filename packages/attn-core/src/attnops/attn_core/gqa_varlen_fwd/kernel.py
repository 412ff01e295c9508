"""GQAVarlenFwd runs the shared flash forward kernel (``..flash_fwd.kernel``) with ``VARLEN=True``:
request bounds from ``cu_seqlens``, batch strides 0; see that module for the algorithm."""

from attnops.attn_core.flash_fwd.kernel import gqa_fwd_kernel
from attnops.kernel_utils.split_combine import split_combine_kernel

__all__ = ["gqa_fwd_kernel", "split_combine_kernel"]
