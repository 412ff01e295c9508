"""``gluon_fns.warpgroup_partition``: the two consumer warpgroups of a warp-specialized kernel share one argument
list, and each still gets its index and every compile-time flag as a constexpr (Triton 3.6 would turn constexprs
kept in a plain tuple into tensors). Checked by compiling a probe kernel for sm_90 on the CPU
(``gluon_partition_probe.py``): its partitions static-assert the flags, and a wrong flag must stop the build."""

from pathlib import Path

import pytest

from attnops.kernel_utils import runtime, testing


@pytest.mark.skipif(not runtime.interpreting(), reason="on a GPU the ws kernels' gpu-marked tests build it")
def test_partitions_get_their_index_and_constexpr_flags():
    done = testing.run_compile_script(Path(__file__).with_name("gluon_partition_probe.py"), timeout=600)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines == ["shared-args ok", "wrong-flag rejected"], \
        done.stdout[-2000:] + done.stderr[-4000:]
