"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .topk_select_fwd.spec import SPEC as TOPK_SELECT_FWD

SPECS = (TOPK_SELECT_FWD,)
