"""``gluon_fns.warpgroup_partition``: the two consumer warpgroups of a warp-specialized kernel share one argument
list, and each still gets its index and every compile-time flag as a constexpr (Triton 3.6 would turn constexprs
kept in a plain tuple into tensors). Checked by compiling a probe kernel for sm_90 on the CPU
(``gluon_partition_probe.py``): its partitions static-assert the flags, and a wrong flag must stop the build."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnops.kernel_utils import runtime


@pytest.mark.skipif(not runtime.interpreting(), reason="on a GPU the ws kernels' gpu-marked tests build it")
def test_partitions_get_their_index_and_constexpr_flags():
    try:
        from triton.backends.nvidia import compiler  # noqa: F401
        from triton.experimental import gluon  # noqa: F401
    except ImportError:
        pytest.skip("Triton's NVIDIA backend or Gluon is not installed")
    script = Path(__file__).with_name("gluon_partition_probe.py")
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines == ["shared-args ok", "wrong-flag rejected"], \
        done.stdout[-2000:] + done.stderr[-4000:]
