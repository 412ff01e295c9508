"""attnops.attn_nsa: native sparse attention (compressed, top-k block selection, selected-block)."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__

__all__ = ["__version__"]
