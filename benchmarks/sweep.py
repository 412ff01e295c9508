"""The loop every tuning sweep runs: check each variant of an op against one reference output, then time it
like the benchmark (device time, cold L2, median). A variant that does not compile, raises or fails the
check is reported with its error and never timed."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterable

from .timing import L2Flusher, profile_iterations

# (label, fn, pin): fn(**case.inputs) runs one implementation; pin() is a context manager held around its
# check and timing (a launcher's forced config), or None.
Variant = tuple[str, Callable, Callable[[], contextlib.AbstractContextManager] | None]


def matches(row_id: str, row_filter: str) -> bool:
    """``--filter a,b``: rows whose id contains any of the comma-separated parts (empty: every row)."""
    return not row_filter or any(part in row_id for part in row_filter.split(","))


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
