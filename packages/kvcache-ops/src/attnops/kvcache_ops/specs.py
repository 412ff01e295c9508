"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

from .paged_kv_cache_gather_fwd.spec import SPEC as PAGED_KV_CACHE_GATHER_FWD
from .paged_kv_cache_write_fwd.spec import SPEC as PAGED_KV_CACHE_WRITE_FWD

SPECS = (PAGED_KV_CACHE_WRITE_FWD, PAGED_KV_CACHE_GATHER_FWD)
