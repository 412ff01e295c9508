"""Sweep the launch configs of the attn-nsa kernels on the GPU: every valid config of a row is forced through the
op's ``_run``, its output checked against the reference, then timed like the benchmark (device time, cold L2,
median); the autotuned public op is timed beside them and the config the autotuner picked is named. Prints
one line per seed row, writes JSON.

    python -m benchmarks.tune_attn_nsa --out /tmp/tune-attn-nsa.json --filter NSAVarlenFwd
"""

from __future__ import annotations

import argparse
import json

import torch

from attnops.attn_nsa._tuning import config_name
from attnops.attn_nsa.nsa_compressed_varlen_fwd import op as compressed_op
from attnops.attn_nsa.nsa_topk_varlen_fwd import op as topk_op
from attnops.attn_nsa.nsa_varlen_fwd import op as selected_op
from attnops.attn_nsa.specs import SPECS

from .sweep import check_and_time, matches
from .timing import L2Flusher

NOT_VALID = "is not valid for this call"  # a config the row's shape cannot use: not a failure
OPS = {
    "NSAVarlenFwd": selected_op,
    "NSACompressedVarlenFwd": compressed_op,
    "NSATopKVarlenFwd": topk_op,
}


def variants(spec):
    """(label, fn, pin): the autotuned op, then every config forced (``_run`` skips the configs a shape cannot
    use with a ValueError, reported as failed)."""
    op = OPS[spec.name]
    yield "autotuned", spec.fn, None
    for c in op.CONFIGS:
        yield config_name(c), lambda c=c, **inputs: op._run(**inputs, config=c), None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--filter", default="", help="only rows whose id contains one of these (comma-separated)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--out", default="tune-attn-nsa.json")
    args = p.parse_args()
    flush = L2Flusher()
    results = []
    for spec in SPECS:
        if spec.name not in OPS:
            continue
        for w in spec.workloads:
            if not matches(w.id, args.filter):
                continue
            case = spec.make_case(w, torch.device("cuda"), False, 0)
            expected = case.fresh().run(spec.reference)
            timed, failed = check_and_time(spec, case, expected, variants(spec), args.iters, flush)
            tuner = OPS[spec.name]._TUNED._autotuned
            picked = config_name(tuner.best_config) if tuner is not None and tuner.best_config else "?"
            best = min(timed, key=timed.get) if timed else None
            results.append({"id": w.id, "ms": timed, "failed": failed, "autotuner_picked": picked, "best": best})
            fmt = lambda k, t=timed: f"{k} {t[k] * 1e3:.1f} us" if k in t else "-"  # noqa: E731
            print(f"{w.id:45s} {fmt('autotuned')} (picked {picked}); best {fmt(best)}; "
                  + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in timed.items() if k != "autotuned")
                  + (f"  FAILED {real}" if (real := {k: v for k, v in failed.items() if NOT_VALID not in v})
                     else ""), flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
