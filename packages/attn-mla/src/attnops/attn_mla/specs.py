"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .fp8_lightning_indexer_fwd.spec import SPEC as FP8_LIGHTNING_INDEXER_FWD
from .topk_select_fwd.spec import SPEC as TOPK_SELECT_FWD

SPECS = (FP8_LIGHTNING_INDEXER_FWD, TOPK_SELECT_FWD)
