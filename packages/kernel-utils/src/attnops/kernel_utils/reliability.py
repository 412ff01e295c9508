"""Reliability checks every family runs over its ops (``tests/test_<family>_reliability.py``): seeded fuzzing against
the reference and bitwise determinism. ``ATTNOPS_FUZZ_CASES`` raises the number of fuzz cases per op (CI
runs a few; ``nox -s fuzz`` and the GPU run many); ``ATTNOPS_FUZZ_BASE`` starts their seeds further on, so a long
run can cover seeds an earlier one did not."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from . import checks, runtime, testing
from .opspec import Case, OpSpec


def fuzz_cases(default: int) -> int:
    return int(os.environ.get("ATTNOPS_FUZZ_CASES", default))


def fuzz_seeds(spec: OpSpec, count: int, base: int | None = None) -> list[int]:
    """Fixed seeds per op, so a failing case is reproducible from its id; ``base`` (default ``ATTNOPS_FUZZ_BASE``,
    else 0) shifts them."""
    if base is None:
        base = int(os.environ.get("ATTNOPS_FUZZ_BASE", 0))
    offset = sum(map(ord, spec.name)) * 1000
    return [offset + base + i for i in range(count)]


def run_fuzz_case(spec: OpSpec, seed: int) -> Case:
    case = spec.fuzz(seed, runtime.device())
    spec.check(case)
    return case


def first_fuzz_case(spec: OpSpec, wanted: Callable[[Case], bool], tries: int = 1000) -> Case:
    """The first fuzz case (seeds 0, 1, ...) for which ``wanted(case)`` holds: a reproducible case with the
    structure a test needs (several requests, several key blocks ...)."""
    for seed in range(tries):
        case = spec.fuzz(seed, runtime.device())
        if wanted(case):
            return case
    raise AssertionError(f"{spec.name}: no fuzz case in {tries} seeds has the wanted structure")


def assert_deterministic(spec: OpSpec, case: Case):
    """Two identical calls on copies of the same inputs give the same bits."""
    first = case.fresh().run(spec.fn)
    second = case.fresh().run(spec.fn)
    for name in first:
        testing.assert_bitwise(f"{name} (second call)", second[name], first[name])


def random_choice(gen: torch.Generator, options):
    return options[int(torch.randint(len(options), (1,), generator=gen))]


def random_int(gen: torch.Generator, low: int, high: int) -> int:
    """Uniform in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def assert_compiles_whole(spec: OpSpec, case: Case, fullgraph: bool = True):
    """The public function under ``torch.compile(backend="aot_eager")`` passes ``spec.check`` (reference, inputs
    untouched) and gives the eager call's bits; with ``fullgraph`` it must trace as one graph (no host read of a
    tensor's values, no untraceable Python in the wrapper). The value checks, which read index tensors on the host,
    are off, as they are by default for CUDA tensors (``checks.validate_values``): with them on, tracing would break
    at the first such read. ``aot_eager`` traces through the custom ops' fake impls and runs the kernels."""
    eager = case.fresh().run(spec.fn)
    validate_values = checks.validate_values
    checks.validate_values = lambda *tensors: False
    torch._dynamo.reset()
    try:
        compiled = spec.check(case, torch.compile(spec.fn, backend="aot_eager", fullgraph=fullgraph))
    finally:
        checks.validate_values = validate_values
        torch._dynamo.reset()
    for name in eager:
        testing.assert_bitwise(f"{name} (compiled call)", compiled[name], eager[name])
