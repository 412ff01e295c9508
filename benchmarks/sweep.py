"""The loop every tuning sweep runs: its command line, the seed rows it visits (full size, with their reference
outputs), and per row: check each variant of an op against one reference output, then time it like the
benchmark (device time, cold L2, median). A variant that does not compile, raises or fails the check is
reported with its error and never timed."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
from collections.abc import Callable, Iterable, Iterator

import torch

from .timing import L2Flusher, profile_iterations

# (label, fn, pin): fn(**case.inputs) runs one implementation; pin() is a context manager held around its
# check and timing (a launcher's forced config), or None.
Variant = tuple[str, Callable, Callable[[], contextlib.AbstractContextManager] | None]


def matches(row_id: str, row_filter: str) -> bool:
    """``--filter a,b``: rows whose id contains any of the comma-separated parts (empty: every row)."""
    return not row_filter or any(part in row_id for part in row_filter.split(","))


def record(path: str, results: list, rec: dict) -> None:
    """Append one row's record and rewrite the JSON file: a sweep cut by its time cap keeps every row it
    finished (the eighth session's capped steps left no JSON when they wrote only at the end)."""
    results.append(rec)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def sweep_arguments(description: str, out: str, iters: int = 30) -> argparse.ArgumentParser:
    """The options every sweep takes (``--filter``, ``--iters``, ``--out``); a sweep adds its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--filter", default="", help="only rows whose id contains one of these (comma-separated)")
    p.add_argument("--iters", type=int, default=iters)
    p.add_argument("--out", default=out)
    return p


def seed_cases(specs, row_filter: str, ops=None, device: str = "cuda") -> Iterator[tuple]:
    """``(spec, workload, case, expected)`` for every seed row of ``specs`` (only the ops named in ``ops``, if
    given) whose id matches ``row_filter``: the case at full size and its reference outputs. Before each next
    row is built, the cached GPU memory is released: a caller whose rows are large (up to 8.6 GB) drops its
    own references to the last one at the end of its loop body."""
    for spec in specs:
        if ops is not None and spec.name not in ops:
            continue
        for w in spec.workloads:
            if not matches(w.id, row_filter):
                continue
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
            case = spec.make_case(w, torch.device(device), False, 0)
            yield spec, w, case, case.fresh().run(spec.reference)
            del case


def check_and_time(spec, case, expected: dict, variants: Iterable[Variant], iters: int,
                   flush: L2Flusher) -> tuple[dict[str, float], dict[str, str]]:
    """``(timed ms, failed reason)`` per variant label."""
    timed, failed = {}, {}
    for label, fn, pin in variants:
        try:
            with pin() if pin else contextlib.nullcontext():
                spec.compare(case.fresh().run(fn), expected, case)
                run = lambda fn=fn, inputs=case.inputs: fn(**inputs)  # noqa: E731
                run()  # compile / first-use setup outside the timing
                timed[label] = statistics.median(profile_iterations(run, iters, flush))
        except Exception as e:  # reported, the sweep goes on
            failed[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return timed, failed
