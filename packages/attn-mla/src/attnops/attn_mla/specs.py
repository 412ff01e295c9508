"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .dsa_decode_with_kvcache_fwd.spec import SPEC as DSA_DECODE_WITH_KVCACHE_FWD
from .fp8_lightning_indexer_fwd.spec import SPEC as FP8_LIGHTNING_INDEXER_FWD
from .mla_decode_with_kvcache_fwd.spec import SPEC as MLA_DECODE_WITH_KVCACHE_FWD
from .topk_select_fwd.spec import SPEC as TOPK_SELECT_FWD

SPECS = (MLA_DECODE_WITH_KVCACHE_FWD, DSA_DECODE_WITH_KVCACHE_FWD, FP8_LIGHTNING_INDEXER_FWD, TOPK_SELECT_FWD)
