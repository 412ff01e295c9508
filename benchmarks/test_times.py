"""How long each GPU test case ran, from a log of ``issue_rows.sh``'s ``gpu_tests``: pytest-xdist's ``-v`` lines,
each prefixed with the second it was printed. xdist prints a case's node id when a worker starts it and
``[gwN] [ p%] OUTCOME <node id>`` when it ends; a case started but never ended was running when the deadline cut
the run. Prints the run's wall time and end line, the cases still running at the cut, then the slowest cases.
xdist's terminal prints a start line only once the line before it is finished (six 2 s cases on two workers, -v: a
case's start printed 2 s after it began), so these times are lower bounds, and a case "running at the cut" may have
been waiting for its full-size turn all along: the turn log beside the log (``<log>-turns.log``) has those seconds.

    python3 -m benchmarks.test_times <log> [--slowest N]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ENDED = re.compile(r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR) (.+?)\s*$")
STARTED = re.compile(r"^(\S+\.py::.+?)\s*$")
SUMMARY = re.compile(r"^=+ .* in [\d.]+s")


def read(log: Path):
    """(first and last second of the log, {node id: start}, {node id: (end, outcome)}, the summary line or None)."""
    started, ended, summary, seconds = {}, {}, None, []
    for raw in log.read_text(errors="replace").splitlines():
        stamp, _, text = raw.partition(" ")
        if not stamp.isdigit():
            continue
        t = int(stamp)
        seconds.append(t)
        if m := ENDED.match(text):
            ended[m.group(2)] = (t, m.group(1))
        elif m := STARTED.match(text):
            started.setdefault(m.group(1), t)
        elif SUMMARY.match(text):
            summary = text
    return (min(seconds, default=0), max(seconds, default=0)), started, ended, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--slowest", type=int, default=10)
    args = parser.parse_args()
    (first, last), started, ended, summary = read(args.log)
    summary = summary or "no summary (cut by the deadline)"
    print(f"{args.log.name}: {last - first} s, {len(ended)} cases ended; {summary}")
    for node in sorted(set(started) - set(ended), key=started.get):
        print(f"  running at the cut ({last - started[node]} s): {node}")
    durations = sorted((t - started[n], outcome, n) for n, (t, outcome) in ended.items() if n in started)[::-1]
    for seconds, outcome, node in durations[: args.slowest]:
        print(f"  {seconds:4d} s {outcome:7s} {node}")


if __name__ == "__main__":
    main()
