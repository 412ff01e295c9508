from attnops.kernel_utils import runtime
from attnops.kernel_utils.pytest_plugin import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
)


def _single_thread_blas():
    """Interpreter runs only: numpy's OpenBLAS on one thread.

    Triton's interpreter evaluates each ``tl.dot`` tile with a small numpy matmul. On a loaded multi-core
    host, OpenBLAS' thread pool turns every such call into ~25 ms of contention (vs ~0.05 ms on one thread),
    which made this family's CPU tests several times slower. Same results either way; no effect on a GPU run.
    """
    if not runtime.interpreting():
        return
    import ctypes
    import glob
    import os

    import numpy

    libs = os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs", "*openblas*.so*")
    for path in glob.glob(libs):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(1)
                return


_single_thread_blas()
