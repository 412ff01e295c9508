"""attnops.attn_core: GQA/MHA attention forward (dense, varlen, paged) and backward."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__

__all__ = ["__version__"]
