"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .gqa_bwd.spec import SPEC as GQA_BWD  # training pair (issue 5)
from .gqa_dense_fwd.spec import SPEC as GQA_DENSE_FWD
from .gqa_paged_fwd.spec import SPEC as GQA_PAGED_FWD  # paged ops (issue 4)
from .gqa_prefill_paged_with_kv_cache_fwd.spec import SPEC as GQA_PREFILL_PAGED_FWD  # paged ops (issue 4)
from .gqa_varlen_fwd.spec import SPEC as GQA_VARLEN_FWD
from .mha_decode_paged_with_kv_cache_fwd.spec import SPEC as MHA_DECODE_PAGED_FWD  # paged ops (issue 4)

SPECS = ()
SPECS += (GQA_DENSE_FWD, GQA_VARLEN_FWD)
SPECS += (GQA_PAGED_FWD, MHA_DECODE_PAGED_FWD, GQA_PREFILL_PAGED_FWD)
SPECS += (GQA_BWD,)
