"""Device time as the spec (README §9) defines it: per iteration, the union of the execution intervals of
the kernels the call launched, read from CUPTI activity records (through torch.profiler); cold L2 before
every iteration; median over a budgeted number of iterations; no CUDA graphs.

Iterations are separated by a dedicated flush kernel, so every kernel between two flushes belongs to one
call of the implementation. Runs without CUPTI fail rather than fall back to host clocks.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

WARMUP_BUDGET_S = 25e-3
MEASURE_BUDGET_S = 100e-3
# ATTNOPS_BENCH_MAX_ITERS caps the measured iterations (spec: >= 10): a 200-sample median of each of ~7
# implementations per row was half of a full run's wall time on one GPU (2026-12-01 22:48: 204 of 422 s of rows)
MIN_ITERS, MAX_ITERS = 10, max(10, int(os.environ.get("ATTNOPS_BENCH_MAX_ITERS", "200")))


@triton.jit
def attnops_l2_flush_kernel(buf_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros([BLOCK], dtype=tl.int32), mask=offs < n)


FLUSH_NAME = "attnops_l2_flush_kernel"


class L2Flusher:
    """Zeroes a buffer of twice the L2 size before each iteration. (No code in this process sets a
    persisting-L2 window, so there is none to reset.)"""

    def __init__(self):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")

    def __call__(self):
        n = self.buf.numel()
        attnops_l2_flush_kernel[(triton.cdiv(n, 8192),)](self.buf, n, BLOCK=8192)


@dataclass
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples_ms: list[float]

    @staticmethod
    def of(samples_ms: list[float]) -> Timing:
        s = sorted(samples_ms)
        pick = lambda q: s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]
        return Timing(statistics.median(s), pick(0.1), pick(0.9), samples_ms)


def _union_ms(intervals: list[tuple[int, int]]) -> float:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start >= end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total / 1e6  # ns -> ms


def _kernel_intervals(prof) -> list[tuple[str, int, int]]:
    """(name, start_ns, end_ns) of every GPU activity (kernels, memsets, copies) in launch order."""
    out = []
    for evt in prof.profiler.kineto_results.events():
        if evt.device_type() == torch.autograd.DeviceType.CUDA:
            start = evt.start_ns()
            out.append((evt.name(), start, start + evt.duration_ns()))
    out.sort(key=lambda e: e[1])
    return out


def profile_iterations(
    fn: Callable[[], object], iters: int, flush: L2Flusher, count_copies: bool = False
) -> list[float]:
    """Device time (ms) of each of ``iters`` calls of ``fn``, each after an L2 flush and synchronized.
    Device-to-device copies the call issues are not device time (spec §9) unless ``count_copies``."""
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(iters):
            flush()
            fn()
            torch.cuda.synchronize()
    per_iter = _split_iterations(_kernel_intervals(prof), iters, count_copies)
    return [_union_ms([(start, stop) for _, start, stop in it]) for it in per_iter]


def kernel_breakdown(fn: Callable[[], object], iters: int, flush: L2Flusher) -> dict[str, float]:
    """Median device time (ms) per kernel name over ``iters`` calls of ``fn`` (each after an L2 flush): which
    launch of a multi-kernel call (attention vs split combine, say) the time goes to."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush()
            fn()
            torch.cuda.synchronize()
    per_name: dict[str, list[float]] = {}
    for it in _split_iterations(_kernel_intervals(prof), iters, False):
        totals: dict[str, float] = {}
        for name, start, stop in it:
            totals[name] = totals.get(name, 0.0) + (stop - start) / 1e6
        for name, ms in totals.items():
            per_name.setdefault(name, []).append(ms)
    return {name: statistics.median(v) for name, v in per_name.items()}


def _split_iterations(events, iters: int, count_copies: bool) -> list[list[tuple[str, int, int]]]:
    """The activities between consecutive flush kernels, one list per iteration."""
    per_iter: list[list[tuple[str, int, int]]] = []
    for name, start, stop in events:
        if FLUSH_NAME in name:
            per_iter.append([])
        elif per_iter and (count_copies or "Memcpy" not in name):
            per_iter[-1].append((name, start, stop))
    if len(per_iter) != iters:
        raise RuntimeError(f"CUPTI saw {len(per_iter)} flushes for {iters} iterations: no device timing")
    if not any(per_iter):
        raise RuntimeError("CUPTI recorded no kernels for the timed call")
    return per_iter


def iteration_budget(fn: Callable[[], object], flush: L2Flusher) -> tuple[int, int]:
    """(warm-up, measured) iteration counts from a 3-iteration calibration, each clamped to [10, 200]."""
    per_iter_ms = statistics.median(profile_iterations(fn, 3, flush))
    per_iter_s = max(per_iter_ms * 1e-3, 1e-6)
    clamp = lambda n: max(MIN_ITERS, min(MAX_ITERS, int(n)))
    return clamp(WARMUP_BUDGET_S / per_iter_s), clamp(MEASURE_BUDGET_S / per_iter_s)


def measure(impls: dict[str, Callable[[], object]], flush: L2Flusher) -> dict[str, Timing]:
    """Time every implementation on the same tensors, in forward then reverse order; the samples of
    both passes make one median per implementation."""
    samples: dict[str, list[float]] = {name: [] for name in impls}
    budgets = {name: iteration_budget(fn, flush) for name, fn in impls.items()}
    order = list(impls)
    for pass_order in (order, order[::-1]):
        for name in pass_order:
            warmup, iters = budgets[name]
            fn = impls[name]
            for _ in range(warmup // 2):
                fn()
            torch.cuda.synchronize()
            samples[name] += profile_iterations(fn, max(iters // 2, MIN_ITERS // 2), flush)
    return {name: Timing.of(s) for name, s in samples.items()}
