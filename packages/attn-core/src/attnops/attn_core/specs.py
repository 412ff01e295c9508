"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .gqa_bwd.spec import SPEC as GQA_BWD  # training pair (issue 5)
from .gqa_dense_fwd.spec import SPEC as GQA_DENSE_FWD
from .gqa_paged_fwd.spec import SPEC as GQA_PAGED_FWD  # paged ops (issue 4)
from .gqa_varlen_fwd.spec import SPEC as GQA_VARLEN_FWD

SPECS = ()
SPECS += (GQA_DENSE_FWD, GQA_VARLEN_FWD)
SPECS += (GQA_PAGED_FWD,)
SPECS += (GQA_BWD,)
