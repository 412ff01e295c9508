"""attnops.attn_mla: MLA and DeepSeek sparse decode, FP8 lightning indexer, top-k selection."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__

__all__ = ["__version__"]
