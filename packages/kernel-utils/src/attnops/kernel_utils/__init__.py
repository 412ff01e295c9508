"""attnops.kernel_utils: what every attnops family shares.

``runtime`` is imported first: it switches Triton to its CPU interpreter when no CUDA device exists,
which must happen before any kernel module is imported.
"""

from . import runtime  # noqa: I001  (first: decides interpreter vs GPU before kernels are defined)
from . import cast, checks, cost, fp8, opspec, testing, triton_fns, workloads
from . import attention_fns, split_combine
from .__about__ import __version__

__all__ = [
    "__version__", "attention_fns", "cast", "checks", "cost", "fp8", "opspec", "runtime", "split_combine", "testing",
    "triton_fns", "workloads",
]
