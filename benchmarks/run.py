"""The benchmark harness: ``python -m benchmarks.run --family kvcache-ops`` (or ``all``).

On a GPU: measure the ceilings, then for every seed row of the family check ours and each available peer
against the reference on the same tensors, time those that pass (``timing.measure``), and write JSONL
(environment header, one line per row). Without a GPU: run every implemented op on shrunk rows through
Triton's interpreter and check it (no timings).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from attnops.kernel_utils import runtime
from attnops.kernel_utils.opspec import OpSpec

from . import baselines
from .sweep import matches

FAMILIES = ("kvcache-ops", "attn-core", "attn-mla", "attn-nsa")
OURS = "attnops"
RESULTS = Path(__file__).parent / "results" / "h200"


def family_specs(family: str) -> tuple[OpSpec, ...]:
    return importlib.import_module(f"attnops.{family.replace('-', '_')}.specs").SPECS


def git_sha() -> str:
    if os.environ.get("ATTNOPS_GIT_SHA"):
        return os.environ["ATTNOPS_GIT_SHA"]
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], text=True, stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment(ceilings: dict) -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], text=True
        ).splitlines()[0].strip()  # one line per GPU on the host; they share the driver
    except (OSError, subprocess.CalledProcessError):
        driver = "unknown"
    import triton

    return {
        "type": "env",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "git_sha": git_sha(),
        "ceilings": ceilings,
    }


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def bench_row(spec: OpSpec, w, flush, use_peers: bool, exclude: frozenset[str] = frozenset()) -> dict:
    from .timing import measure

    # Wall seconds per phase, recorded with the row: where a run's time goes (a full run is ~5 s a row).
    phases, t = {}, time.perf_counter()

    def lap(name: str):
        nonlocal t
        torch.cuda.synchronize()
        now = time.perf_counter()
        phases[name] = round(now - t, 3)
        t = now

    case = spec.make_case(w, torch.device("cuda"), False, 0)
    cost = spec.cost(case)
    lap("case")
    expected = case.fresh().run(spec.reference)
    lap("reference")
    impls, record = {}, {}
    candidates = [(OURS, lambda c: baselines.runner_of(spec.fn, c))]
    if use_peers:
        candidates += [(a.name, a.prepare) for a in baselines.adapters_for(spec.name, spec.family)
                       if a.name not in exclude]
    for name, prepare in candidates:
        entry: dict = {}
        try:
            runner = prepare(case)
            runner.run()
            torch.cuda.synchronize()
            spec.compare(runner.outputs(), expected, case)
            entry.update(check="pass", note=runner.note, setup_s=round(runner.setup_s, 3))
            impls[name] = runner.run
        except baselines.Unsupported as e:
            entry.update(check="unsupported", note=str(e))
        except AssertionError as e:
            entry.update(check="fail", note=_short(e))
        except Exception as e:  # a peer that crashes on a row is reported, the run goes on
            if type(e).__name__ == "MissingJITCacheError":  # FlashInfer, FLASHINFER_DISABLE_JIT=1
                module = getattr(getattr(e, "spec", None), "name", "?")
                entry.update(check="unsupported",
                             note=f"FlashInfer module not prebuilt ({module}); JIT disabled in this run")
            else:
                entry.update(check="error", note=_short(e))
        record[name] = entry
    lap("checks")
    for name, timing in measure(impls, flush).items():
        record[name].update(ms=timing.median_ms, p10=timing.p10_ms, p90=timing.p90_ms, n=len(timing.samples_ms))
    lap("timing")
    return {
        "type": "row",
        "id": w.id,
        "op": w.op,
        "workload": w.name,
        "dtype": w.dtype,
        "cost": {"flops": cost.flops, "bytes": cost.bytes, "roof": cost.roof},
        "impls": record,
        "wall_s": phases,
    }


def run_gpu(families, row_filter: str, use_peers: bool, out: Path, exclude: frozenset[str],
            warm_workers: int = 0, warm_only: bool = False) -> list[dict]:
    from .ceilings import measure_ceilings
    from .timing import L2Flusher
    from .warm import warm

    rows = [(spec, w) for f in families for spec in family_specs(f) for w in spec.workloads
            if matches(w.id, row_filter)]
    warm_s, first_calls = (warm([(spec.family, w.id) for spec, w in rows], warm_workers, peers=use_peers,
                                exclude=exclude) if warm_workers else (None, {}))
    if warm_only:  # a call that only fills the compile caches (FlashInfer's JIT modules) for the next one
        print(f"warm-only: {len(rows)} rows in {warm_s:.0f} s", file=sys.stderr)
        return []
    flush = L2Flusher()
    header = environment(measure_ceilings(flush))
    header["warm"] = {"workers": warm_workers, "wall_s": warm_s}
    print(f"# {header['gpu']}  copy {header['ceilings']['copy_tb_s']:.2f} TB/s  "
          f"bf16 mm {header['ceilings']['bf16_matmul_tflop_s']:.0f} TFLOP/s  ({len(rows)} rows)", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    with out.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for i, (spec, w) in enumerate(rows, 1):
            t0 = time.perf_counter()
            try:
                rec = bench_row(spec, w, flush, use_peers, exclude)
            except Exception as e:
                traceback.print_exc()
                rec = {"type": "row", "id": w.id, "op": w.op, "workload": w.name, "dtype": w.dtype,
                       "error": _short(e), "impls": {}}
            for name, seconds in first_calls.get(w.id, {}).items():  # the warm-up's first calls (JIT compiles)
                if name in rec["impls"]:
                    rec["impls"][name]["first_call_s"] = seconds
            records.append(rec)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            ours = rec["impls"].get(OURS, {})
            print(f"[{i}/{len(rows)}] {w.id}: ours {ours.get('ms', float('nan')):.4f} ms "
                  f"({ours.get('check', rec.get('error', '?'))}) in {time.perf_counter() - t0:.1f}s "
                  f"{rec.get('wall_s', '')}", file=sys.stderr)
            gc.collect()
            torch.cuda.empty_cache()
    return records


def run_cpu(families, row_filter: str) -> int:
    """Interpreter smoke: every implemented op on every shrunk row the interpreter computes right."""
    failures = 0
    for family in families:
        for spec in family_specs(family):
            for w in spec.workloads:
                if not matches(w.id, row_filter) or not spec.interpreter_ok(w):
                    continue
                t0 = time.perf_counter()
                try:
                    spec.check(spec.make_case(w, runtime.device(), True, 0))
                    status = "pass"
                except AssertionError as e:
                    failures += 1
                    status = f"FAIL {_short(e)}"
                print(f"{w.id}: {status} ({time.perf_counter() - t0:.1f}s, interpreter, shrunk)")
    return failures


def print_table(records: list[dict]):
    print(f"{'row':58s} {'ours ms':>9s} {'best peer':>16s} {'peer ms':>9s} {'ratio':>6s}")
    for rec in records:
        ours = rec["impls"].get(OURS, {})
        peers = [(n, e["ms"]) for n, e in rec["impls"].items() if n != OURS and "ms" in e and not n.endswith("-ref")]
        best = min(peers, key=lambda p: p[1]) if peers else ("-", float("nan"))
        ratio = best[1] / ours["ms"] if "ms" in ours and peers else float("nan")
        print(f"{rec['id'][:58]:58s} {ours.get('ms', float('nan')):9.4f} {best[0]:>16s} {best[1]:9.4f} {ratio:6.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="all", choices=("all", *FAMILIES))
    p.add_argument("--filter", default="", help="only rows whose id contains one of these (comma-separated)")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--exclude-peers", default="", help="comma-separated peer names not to run (e.g. torch-compile)")
    p.add_argument("--out", type=Path, help="JSONL path (default: benchmarks/results/h200/<date>-<family>.jsonl)")
    p.add_argument("--warm", type=int, default=0, metavar="N",
                   help="compile our kernels and the peers' for the rows in N processes first (benchmarks/warm.py)")
    p.add_argument("--warm-only", action="store_true", help="with --warm: compile, time nothing, write nothing")
    args = p.parse_args(argv)
    families = FAMILIES if args.family == "all" else (args.family,)
    if runtime.interpreting():
        return 1 if run_cpu(families, args.filter) else 0
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M")
    out = args.out or RESULTS / f"{stamp}-{args.family}.jsonl"
    exclude = frozenset(filter(None, args.exclude_peers.split(",")))
    records = run_gpu(families, args.filter, not args.no_peers, out, exclude, args.warm, args.warm_only)
    if args.warm_only:
        return 0
    print_table(records)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
