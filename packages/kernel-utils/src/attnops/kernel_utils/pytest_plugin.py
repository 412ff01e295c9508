"""Pytest hooks every attnops package's ``tests/conftest.py`` re-exports: the ``gpu`` marker, skipped
where no CUDA device exists (CPU runs go through Triton's interpreter)."""

from __future__ import annotations

import pytest

from . import runtime


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (bf16, full size, TMA, warp specialization)")
    # Triton 3.6's interpreter converts 1-element arrays to scalars, deprecated in NumPy (pinned < 2.4).
    message = "Conversion of an array with ndim > 0 to a scalar"
    config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


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
