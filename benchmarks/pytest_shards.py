"""Run test files on the GPU in N parallel pytest processes: the tests are collected once, dealt round-robin
(neighbouring parametrizations, which tend to cost alike, land in different shards), and each shard runs in its
own process with outputs NaN-poisoned (``ATTNOPS_POISON=1``). One process per file left most CPU cores idle
while a file's kernels compiled (ninth session: five attn-core files cut at 165 s); shards finish together.

    python -m benchmarks.pytest_shards --shards 14 --deadline <epoch s> --logs /tmp/out/shards -- \
        packages/attn-core/tests -k "not seed_row_full_size"

Prints one line per shard (its last pytest line) and every failed test id; the shards' logs end up in one file,
``<logs>/shards.log``; exits 1 if any shard failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path


def collect(pytest_args: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *pytest_args],
                          capture_output=True, text=True)
    ids = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit(f"no tests collected:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--deadline", type=float, default=time.time() + 300, help="epoch seconds: shards are killed then")
    ap.add_argument("--logs", type=Path, required=True)
    ap.add_argument("--timeout", type=int, default=240, help="per-test timeout (pytest-timeout)")
    ap.add_argument("pytest_args", nargs="+", help="after --: files / folders and options such as -k")
    args = ap.parse_args()
    ids = collect(args.pytest_args)
    shards = [ids[i::args.shards] for i in range(args.shards) if ids[i::args.shards]]
    args.logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, ATTNOPS_POISON="1")
    has_timeout = importlib.util.find_spec("pytest_timeout") is not None
    per_test_timeout = ["--timeout", str(args.timeout)] if has_timeout else []
    procs = []
    for n, shard in enumerate(shards):
        log = open(args.logs / f"shard-{n:02d}.log", "w")
        # the ids carry the selection (-k / -m were applied when collecting)
        cmd = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *per_test_timeout, *shard]
        procs.append((n, len(shard), log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)))
    print(f"{len(ids)} tests in {len(shards)} shards", flush=True)
    failed_any = False
    for n, count, log, proc in procs:
        try:
            rc = proc.wait(timeout=max(1.0, args.deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "cut at the deadline"
        log.close()
        lines = (args.logs / f"shard-{n:02d}.log").read_text(errors="replace").splitlines()
        failures = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
        failed_any |= rc != 0
        print(f"shard {n:02d} ({count} tests) rc={rc}: {lines[-1] if lines else ''}")
        for ln in failures:
            print("   ", ln[:300])
    # one file back from the device (at most 8 come back from $OUT)
    shard_logs = sorted(args.logs.glob("shard-*.log"))
    with open(args.logs / "shards.log", "w") as combined:
        for path in shard_logs:
            combined.write(f"== {path.name}\n{path.read_text(errors='replace')}\n")
            path.unlink()
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
