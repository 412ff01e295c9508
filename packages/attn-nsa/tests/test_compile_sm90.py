"""Every launch config of the three kernels compiles for sm_90 (no GPU needed): catches lowering errors the
interpreter cannot see (it never compiles). Skipped where Triton's NVIDIA backend is missing."""

from pathlib import Path

import pytest

from attnops.kernel_utils import runtime, testing


@pytest.mark.skipif(not runtime.interpreting(), reason="on a GPU the gpu-marked tests compile every config")
def test_every_config_compiles_for_sm90():
    done = testing.run_compile_script(Path(__file__).with_name("sm90_compile.py"), timeout=900)
    assert done.returncode == 0 and "FAILS 0" in done.stdout, done.stdout[-4000:] + done.stderr[-4000:]
