"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .nsa_compressed_varlen_fwd.spec import SPEC as NSA_COMPRESSED_VARLEN_FWD
from .nsa_topk_varlen_fwd.spec import SPEC as NSA_TOPK_VARLEN_FWD
from .nsa_varlen_fwd.spec import SPEC as NSA_VARLEN_FWD

SPECS = (NSA_COMPRESSED_VARLEN_FWD, NSA_TOPK_VARLEN_FWD, NSA_VARLEN_FWD)
