"""Pytest hooks every attnops package's ``tests/conftest.py`` re-exports: the ``gpu`` marker, skipped
where no CUDA device exists (CPU runs go through Triton's interpreter), and the interpreter's bounds check
(:mod:`.bounds`: every load, store and atomic of a kernel must stay inside its tensor arguments)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import bounds, runtime


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (bf16, full size, TMA, warp specialization)")
    # Triton 3.6's interpreter converts 1-element arrays to scalars, deprecated in NumPy (pinned < 2.4).
    message = "Conversion of an array with ndim > 0 to a scalar"
    config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")
    if runtime.interpreting() and os.environ.get("ATTNOPS_BOUNDS_CHECK", "1") != "0":
        bounds.install()


def pytest_collection_modifyitems(config, items):
    if not runtime.interpreting():
        return
    skip = pytest.mark.skip(reason="GPU-only case: no CUDA device, kernels run in Triton's interpreter")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def device():
    return runtime.device()


def seed_rows(spec):
    """An op's seed workloads as pytest params: rows the interpreter computes wrongly (``interpreter_ok``)
    carry the ``gpu`` mark, so CPU runs skip them and the GPU runs them all."""
    return [w if spec.interpreter_ok(w) else pytest.param(w, marks=pytest.mark.gpu) for w in spec.workloads]


def run_offline_compile(test_file: str, tool: str, *args: str, timeout: int = 600) -> str:
    """Run ``python -m benchmarks.<tool> args`` — an offline sm_90 compile of GPU-only kernel paths (TMA,
    wgmma, atomics, pipelining: what the interpreter never lowers) — from the repository root above
    ``test_file``, with the interpreter off. Fails on a non-zero exit (compile error, shared memory over the
    limit); returns the listing. Skips in a checkout without ``benchmarks/`` (tests of an installed wheel)."""
    root = Path(test_file).resolve().parents[3]
    if not (root / "benchmarks" / f"{tool}.py").exists():
        pytest.skip("benchmarks/ not in this checkout")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", f"benchmarks.{tool}", *args], cwd=root, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout
