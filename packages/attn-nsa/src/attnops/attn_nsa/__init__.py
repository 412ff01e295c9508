"""attnops.attn_nsa: native sparse attention (compressed, top-k block selection, selected-block)."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__
from .nsa_compressed_varlen_fwd import nsa_compressed_varlen_fwd
from .nsa_topk_varlen_fwd import nsa_topk_varlen_fwd
from .nsa_varlen_fwd import nsa_varlen_fwd

__all__ = ["__version__", "nsa_compressed_varlen_fwd", "nsa_topk_varlen_fwd", "nsa_varlen_fwd"]
