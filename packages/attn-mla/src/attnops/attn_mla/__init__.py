"""attnops.attn_mla: MLA and DeepSeek sparse decode, FP8 lightning indexer, top-k selection."""

import attnops.kernel_utils  # noqa: F401  (first: selects the interpreter on CPU-only machines)

from .__about__ import __version__
from .dsa_decode_with_kvcache_fwd import dsa_decode_with_kvcache_fwd
from .fp8_lightning_indexer_fwd import fp8_lightning_indexer_fwd
from .mla_decode_with_kvcache_fwd import mla_decode_with_kvcache_fwd
from .topk_select_fwd import topk_select_fwd

__all__ = [
    "__version__",
    "dsa_decode_with_kvcache_fwd",
    "fp8_lightning_indexer_fwd",
    "mla_decode_with_kvcache_fwd",
    "topk_select_fwd",
]
