"""How long each GPU test case ran, from a log of ``issue_rows.sh``'s ``gpu_tests``: pytest-xdist's ``-v`` lines,
each prefixed with the second it was printed. xdist prints a case's node id when a worker starts it and
``[gwN] [ p%] OUTCOME <node id>`` when it ends; a case started but never ended was running when the deadline cut
the run. Prints the run's wall time and end line, the cases still running at the cut, then the slowest cases.
xdist's terminal prints a start line only once the line before it is finished (six 2 s cases on two workers, -v: a
case's start printed 2 s after it began), so these times are lower bounds, and a case "running at the cut" may have
been waiting for its full-size turn all along. The turn log beside it (``<log>-turns.log``, written by kernel-utils'
pytest plugin) says when each full-size case took and gave back its turn: printed are the cases holding one at the cut
and the longest turns.

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


def read_turns(log: Path):
    """({node id: (second, seconds waited)} of the turns taken, {node id: seconds run} of those given back) from the
    turn log beside ``log``; empty where there is none."""
    took, gave = {}, {}
    path = log.with_name(log.stem + "-turns.log")
    for line in path.read_text().splitlines() if path.exists() else ():
        stamp, event, seconds, node = line.split(" ", 3)
        if event == "took":
            took[node] = (int(stamp), float(seconds))
        else:
            gave[node] = float(seconds)
    return took, gave


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
    took, gave = read_turns(args.log)
    for node in sorted(set(took) - set(gave), key=lambda n: took[n][0]):
        since, waited = took[node]
        print(f"  holding a full-size turn at the cut ({last - since} s, after {waited:.0f} s of wait): {node}")
    for node in sorted(gave, key=gave.get, reverse=True)[:5]:
        print(f"  turn {gave[node]:6.1f} s ran, {took.get(node, (0, 0.0))[1]:6.1f} s waited: {node}")


if __name__ == "__main__":
    main()
