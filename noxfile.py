"""Sessions for every package of the monorepo (one noxfile, parametrized by package name via posargs).

    nox -s tests [-- kvcache-ops ...]       CPU tests (Triton interpreter), all packages + examples by default
    nox -s gpu_tests [-- attn-core]         GPU-marked tests (needs CUDA)
    nox -s fuzz [-- kvcache-ops]            many seeded fuzz cases per op (ATTNOPS_FUZZ_CASES)
    nox -s bench [-- kvcache-ops]           benchmark + report (GPU), or interpreter smoke + report (CPU)
    nox -s main                              the main job: bench of every family, then the report
    nox -s report                            docs/benchmarks.md + .html from committed results
    nox -s build [-- kvcache-ops]           wheels into dist/
    nox -s lint                              ruff + layout check
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

PACKAGES = ("kernel-utils", "kvcache-ops", "attn-core", "attn-mla", "attn-nsa")
FAMILIES = PACKAGES[1:]
# torch 2.13.0 CPU lies on local disk (uv or an unpinned torch would pull a CUDA build); triton pinned to the
# GPU machine's 3.6.0; NumPy 2.4 breaks loops with run-time bounds in Triton 3.6's interpreter.
RUNTIME = ("torch==2.13.0", "triton==3.6.0", "numpy<2.4")
TEST = ("pytest>=7", "pytest-xdist")

nox.options.sessions = ("lint", "tests")
nox.options.reuse_existing_virtualenvs = True


def _chosen(session: nox.Session, allowed=PACKAGES) -> list[str]:
    chosen = [a for a in session.posargs if not a.startswith("-")] or list(allowed)
    unknown = sorted(set(chosen) - set(allowed))
    if unknown:
        session.error(f"unknown package(s) {unknown}; choose from {allowed}")
    return chosen


def _install(session: nox.Session, *extra: str):
    session.install(*RUNTIME, *extra)
    session.install(*[a for p in PACKAGES for a in ("-e", f"packages/{p}")])


@nox.session
def tests(session: nox.Session):
    """CPU tests of the chosen packages; kernels run through Triton's interpreter."""
    _install(session, *TEST, "transformers")
    paths = [f"packages/{p}/tests" for p in _chosen(session)]
    if not session.posargs:
        paths.append("examples/tests")  # attnops inside a transformers Llama
    session.run("python", "-m", "pytest", "-q", "-n", "2", "--durations=15", *paths,
                env={"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})


@nox.session
def fuzz(session: nox.Session):
    """Many more seeded fuzz cases per op than CI runs (ATTNOPS_FUZZ_CASES, default 500)."""
    _install(session, *TEST)
    # Reliability files, plus the op test files that hold their own fuzz tests (attn-core's forward ops).
    tests = [Path(f"packages/{p}/tests") for p in _chosen(session, FAMILIES)]
    paths = [str(t) for d in tests for t in sorted(d.glob("test_*.py")) if "def test_fuzz" in t.read_text()]
    cases = os.environ.get("ATTNOPS_FUZZ_CASES", "500")
    session.run("python", "-m", "pytest", "-q", "-n", "2", "-k", "fuzz", *paths, env={"ATTNOPS_FUZZ_CASES": cases})


@nox.session
def gpu_tests(session: nox.Session):
    _install(session, *TEST)
    paths = [f"packages/{p}/tests" for p in _chosen(session)]
    session.run("python", "-m", "pytest", "-q", "-m", "gpu", *paths)


@nox.session
def bench(session: nox.Session):
    """Benchmark the chosen families (GPU) or check them on shrunk rows (CPU), then render the report."""
    _install(session)
    for family in _chosen(session, FAMILIES):
        session.run("python", "-m", "benchmarks.run", "--family", family)
    session.run("python", "tools/report.py")


@nox.session
def main(session: nox.Session):
    """The main job: every family benchmarked (or interpreter-checked without a GPU), then the report."""
    _install(session)
    session.run("python", "-m", "benchmarks.run", "--family", "all")
    session.run("python", "tools/report.py")


@nox.session
def report(session: nox.Session):
    _install(session)
    session.run("python", "tools/report.py")


@nox.session
def build(session: nox.Session):
    session.install("build", "hatchling")
    for package in _chosen(session):
        session.run("python", "-m", "build", "--wheel", "--no-isolation", "--outdir", "dist", f"packages/{package}")


@nox.session
def lint(session: nox.Session):
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("python", "tools/check_layout.py")
