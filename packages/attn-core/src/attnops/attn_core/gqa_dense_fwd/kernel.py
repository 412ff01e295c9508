"""GQADenseFwd runs the shared flash forward kernel (``..flash_fwd.kernel``) with ``VARLEN=False``:
uniform lengths ``S_q / S_kv`` and BSHD batch strides; see that module for the algorithm."""

from attnops.attn_core.flash_fwd.kernel import gqa_fwd_kernel
from attnops.kernel_utils.split_combine import split_combine_kernel

__all__ = ["gqa_fwd_kernel", "split_combine_kernel"]
