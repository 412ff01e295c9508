"""Pytest hooks every attnops package's ``tests/conftest.py`` re-exports: the ``gpu`` marker, skipped
where no CUDA device exists (CPU runs go through Triton's interpreter), the interpreter's bounds check
(:mod:`.bounds`: every load, store and atomic of a kernel must stay inside its tensor arguments), and on a GPU
full-size cases in turns across pytest processes (``full_size_turn``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest
import torch

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


FULL_SIZE_LOCKS = Path(tempfile.gettempdir()) / "attnops-full-size"
GIB_PER_FULL_SIZE_CASE = 32  # two ran side by side on an 80 GB H100 (2026-12-06: 59 passed, none out of memory)


def full_size_slots() -> int:
    """How many full-size cases may run at once on this machine's GPU: one per ``GIB_PER_FULL_SIZE_CASE`` of its
    memory (2 on an H100, 4 on an H200), or ``ATTNOPS_FULL_SIZE_SLOTS``."""
    if "ATTNOPS_FULL_SIZE_SLOTS" in os.environ:
        return max(1, int(os.environ["ATTNOPS_FULL_SIZE_SLOTS"]))
    return max(1, torch.cuda.get_device_properties(0).total_memory // (GIB_PER_FULL_SIZE_CASE << 30))


@contextlib.contextmanager
def full_size_turn(prefix: Path, slots: int = 1):
    """Hold one of ``slots`` machine-wide turns for a full-size case: an exclusive ``flock`` on one of the files
    ``<prefix>.<i>``, polled until one is free."""
    files = [open(f"{prefix}.{i}", "a") for i in range(slots)]
    try:
        while True:
            for f in files:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
                return
            time.sleep(0.2)
    finally:
        for f in files:
            f.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """On a GPU, every case hands its cached memory back after it runs, and cases named ``*full_size*`` (seed rows
    at their real size: up to tens of GB with their fp32 references) take turns across pytest processes,
    ``full_size_slots()`` at a time. Why: ``-m gpu -n 15`` on an 80 GB H100 (2026-12-06) failed 184 cases, every
    one with torch's out-of-memory error, where several full-size cases ran at once and each worker's caching
    allocator kept what its last one freed; with turns for those, attn-nsa's mid-size cases (a few GB of fp32
    reference each) still failed 7 of 155 the same way, beside eleven workers that each held 8-10 GB cached from
    their last case (H100, 2026-12-06)."""
    if runtime.interpreting():
        yield
        return
    full_size = "full_size" in item.name
    asked = time.monotonic()
    with full_size_turn(FULL_SIZE_LOCKS, full_size_slots()) if full_size else contextlib.nullcontext():
        got = time.monotonic()
        if full_size:
            _log_turn("took", got - asked, item.nodeid)
        try:
            yield
        finally:
            torch.cuda.empty_cache()
            if full_size:
                _log_turn("gave", time.monotonic() - got, item.nodeid)


def _log_turn(event: str, seconds: float, nodeid: str) -> None:
    """A line in ``$ATTNOPS_TURN_LOG`` (if set) when a full-size case takes its turn (``took``, seconds waited) and
    when it gives it back (``gave``, seconds run): ``<epoch second> <event> <seconds> <node id>``. Why: xdist's log
    times a case from its start, turn included, so a slow case and a queued one look alike, and a deadline's cut
    hides which cases held the turns (``benchmarks/test_times.py`` reads both)."""
    path = os.environ.get("ATTNOPS_TURN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{time.time():.0f} {event} {seconds:.1f} {nodeid}\n")


def device():
    return runtime.device()


def seed_rows(spec):
    """An op's seed workloads as pytest params: rows the interpreter computes wrongly (``interpreter_ok``)
    carry the ``gpu`` mark, so CPU runs skip them and the GPU runs them all."""
    return [w if spec.interpreter_ok(w) else pytest.param(w, marks=pytest.mark.gpu) for w in spec.workloads]


def row_seed(w) -> int:
    """A seed for workload ``w``'s random inputs, the same in every process: CRC-32 of its id. (Python's
    ``hash()`` of a string is salted per process, so inputs drawn from it differ between runs and between xdist
    workers, and a failure would not reproduce.)"""
    return zlib.crc32(w.id.encode()) % 1000


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
