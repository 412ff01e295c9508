"""Sweep the row-copy launch configs of the kvcache-ops kernels on the GPU: every config's output is
checked against the reference, then timed like the benchmark (device time, cold L2). Prints, per seed row,
the heuristic's config and time and the best config found, and writes JSON to ``--out``.

    python -m benchmarks.tune_kvcache --out /tmp/tune.json
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics

import torch
import triton

from attnops.kernel_utils import runtime
from attnops.kernel_utils.triton_fns import row_copy_config
from attnops.kvcache_ops.paged_kv_cache_gather_fwd import op as gather_op
from attnops.kvcache_ops.paged_kv_cache_write_fwd import op as write_op
from attnops.kvcache_ops.specs import SPECS

from .sweep import record
from .timing import L2Flusher, profile_iterations


def _launcher(spec):
    if spec.name == "PagedKVCacheGatherFwd":
        return gather_op.launch, lambda a: (a["dst"], a["cache"], a["block_table"], a["cu_seq_lens"],
                                            a.get("seq_starts"), a.get("scale"))
    return write_op.launch, lambda a: (a["k"], a["v"], a["k_pages"], a["v_pages"], a["slot_mapping"],
                                       a.get("k_scale"), a.get("v_scale"))


def _row_elems(case) -> tuple[int, int]:
    a = case.inputs
    if "dst" in a:
        return a["dst"].shape[0], math.prod(a["cache"].shape[2:])
    return a["k"].shape[0], a["k"].shape[1] * a["k"].shape[2]


def configs(row: int):
    full = triton.next_power_of_2(row)
    for block_e, block_t, warps in itertools.product(sorted({min(full, 1024), 128}), (1, 4, 16, 64), (4, 8)):
        if block_e * block_t <= 16384:
            yield block_t, block_e, warps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="tune-kvcache.json")
    args = p.parse_args()
    flush = L2Flusher()
    results = []
    for spec in SPECS:
        launch, arg_tuple = _launcher(spec)
        for w in spec.workloads:
            case = spec.make_case(w, torch.device("cuda"), False, 0)
            expected = case.fresh().run(spec.reference)
            rows, row = _row_elems(case)
            heuristic = row_copy_config(rows, row, runtime.num_sms())
            timed = {}
            for cfg in [heuristic, *configs(row)]:
                if cfg in timed:
                    continue
                trial = case.fresh()
                launch(*arg_tuple(trial.inputs), config=cfg)
                spec.compare(trial.collect(None), expected, trial)
                fn = lambda: launch(*arg_tuple(case.inputs), config=cfg)  # noqa: B023
                fn()
                timed[cfg] = statistics.median(profile_iterations(fn, 30, flush))
            best = min(timed, key=timed.get)
            rec = {"id": w.id, "heuristic": heuristic, "heuristic_ms": timed[heuristic], "best": best,
                   "best_ms": timed[best], "all": {str(k): v for k, v in timed.items()}}
            record(args.out, results, rec)
            print(f"{w.id:58s} heur {heuristic} {timed[heuristic]:.4f}  best {best} {timed[best]:.4f}", flush=True)


if __name__ == "__main__":
    main()
