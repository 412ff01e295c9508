"""Compile our kernels for a benchmark's rows in parallel before the timed run (opt-in: ``run.py --warm N``).

A row's first call compiles every Triton specialization it needs (~1-3 s each on the H200 machine's CPU), one
row after another while the GPU idles; a full run is ~5 s a row. Here N worker processes (spawned: a forked
CUDA context is unusable) each build their share of the rows at full size and call our op once, which writes
the compiled kernels into Triton's on-disk cache; the timed run, in the parent process, then loads them from
there. Nothing is timed or checked here (the run checks every row); a row that fails here is only reported.
With ``peers``, each row's peers (all but the excluded and the ``-ref`` ones) are also called once: the ones that
compile on first use into an on-disk cache (FLA's Triton kernels, DeepGEMM's JIT, torch.compile's inductor)
then load in the timed run (attn-nsa, 2026-12-01: the rows' checks phase, FLA's compiles and autotuning
included, was 2-19 s a row with only our kernels warmed). Rows are dealt round-robin so the large rows
(neighbours in the seed list) spread over the workers. Each first call's wall seconds (compile or cache load
included) come back per row and implementation: the report shows the peers' JIT compile times from them.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time

SLOW_FIRST_CALL_S = 5.0  # a first call this long compiled something (JIT module, autotuning)


def _call_peer(adapter, case) -> None:
    adapter.prepare(case.fresh()).run()


def _warm_rows(family_ids: list[tuple[str, str]], device: str, shrink: bool, peers: bool,
               exclude: frozenset[str]) -> tuple[list[str], list[tuple[str, str, float]]]:
    """Worker: call our op (and the peers) once on each (family, row id); returns one line per row that failed,
    and (row id, implementation, wall seconds of its first call) for every call that ran."""
    import torch

    from . import baselines
    from .run import OURS, family_specs

    def first_call(row_id: str, name: str, fn, *args) -> tuple[str, str, float]:
        t0 = time.perf_counter()
        fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        if s >= SLOW_FIRST_CALL_S:  # printed at once: a call cut by its deadline still logs the compiles it finished
            print(f"warm: {row_id} {name} first call {s:.1f} s", file=sys.stderr, flush=True)
        return row_id, name, s

    failures, seconds = [], []
    for family, row_id in family_ids:
        try:
            spec, w = next((s, w) for s in family_specs(family) for w in s.workloads if w.id == row_id)
            case = spec.make_case(w, torch.device(device), shrink, 0)
            seconds.append(first_call(row_id, OURS, case.run, spec.fn))
            for a in baselines.adapters_for(spec.name, spec.family) if peers else ():
                if a.name in exclude or a.reference_like:
                    continue
                try:
                    seconds.append(first_call(row_id, a.name, _call_peer, a, case))
                except Exception:  # noqa: BLE001 - unsupported or missing peer: the timed run records why
                    pass
        except Exception as e:  # noqa: BLE001 - the timed run reports it properly
            failures.append(f"{row_id}: {type(e).__name__}: {str(e)[:120]}")
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
    return failures, seconds


def warm(rows: list[tuple[str, str]], workers: int, device: str = "cuda", shrink: bool = False,
         peers: bool = False, exclude: frozenset[str] = frozenset()
         ) -> tuple[float, dict[str, dict[str, float]]]:
    """Run ``_warm_rows`` over ``rows`` ((family, row id) pairs) in ``workers`` spawned processes; returns the
    wall seconds it took and {row id: {implementation: first call's seconds}}. Failures are printed to stderr.
    (``device="cpu", shrink=True``: the same mechanics through the interpreter, for a check without a GPU.)"""
    t0 = time.perf_counter()
    shares = [rows[i::workers] for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        results = pool.starmap(_warm_rows, [(share, device, shrink, peers, exclude) for share in shares if share])
    first_calls: dict[str, dict[str, float]] = {}
    for failures, seconds in results:
        for line in failures:
            print(f"warm: {line}", file=sys.stderr)
        for row_id, name, s in seconds:
            first_calls.setdefault(row_id, {})[name] = round(s, 2)
    return time.perf_counter() - t0, first_calls
