import os

# One BLAS / OpenMP thread: the interpreter runs every tl.dot through numpy and the references through
# torch; on a shared or single core, spinning worker threads make both several times slower. Must be set
# before numpy / torch load (this conftest is normally the first importer).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

from attnops.kernel_utils.pytest_plugin import (  # noqa: E402, F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
)

if not torch.cuda.is_available():
    torch.set_num_threads(1)
