"""Sweep the launch configs of the attn-nsa kernels on the GPU: every valid config of a row is forced through the
op's ``_run``, its output checked against the reference, then timed like the benchmark (device time, cold L2,
median); the public op is timed beside them ("op") with the config it chose named (autotuner's pick, or the
default rule of an op that is not autotuned). With ``--autotuner-timing`` each config is also timed the way
Triton's autotuner times it (``triton.testing.do_bench``, median), to see whether that ranking is what picks
slow configs. Prints one line per seed row, writes JSON.

    python -m benchmarks.tune_attn_nsa --out /tmp/tune-attn-nsa.json --filter NSAVarlenFwd
"""

from __future__ import annotations

import json

import triton

from attnops.attn_nsa._tuning import autotune_enabled, config_name
from attnops.attn_nsa.nsa_compressed_varlen_fwd import op as compressed_op
from attnops.attn_nsa.nsa_topk_varlen_fwd import op as topk_op
from attnops.attn_nsa.nsa_varlen_fwd import op as selected_op
from attnops.attn_nsa.specs import SPECS

from .sweep import check_and_time, seed_cases, sweep_arguments
from .timing import L2Flusher

NOT_VALID = "is not valid for this call"  # a config the row's shape cannot use: not a failure
OPS = {
    "NSAVarlenFwd": selected_op,
    "NSACompressedVarlenFwd": compressed_op,
    "NSATopKVarlenFwd": topk_op,
}


def variants(spec):
    """(label, fn, pin): the public op, then every config forced (``_run`` refuses the configs a shape cannot
    use with a ValueError, not reported)."""
    op = OPS[spec.name]
    yield "op", spec.fn, None
    for c in op.CONFIGS:
        yield config_name(c), lambda c=c, **inputs: op._run(**inputs, config=c), None


def autotuner_ms(spec, case) -> dict[str, float]:
    """Each valid config timed as Triton 3.6's autotuner times it: do_bench (its own cache clear, CUDA events),
    median of the runs."""
    op, out = OPS[spec.name], {}
    for c in op.CONFIGS:
        try:
            run = lambda c=c: op._run(**case.inputs, config=c)  # noqa: E731
            run()
            out[config_name(c)] = triton.testing.do_bench(run, quantiles=(0.5, 0.2, 0.8))[0]
        except ValueError as e:  # a config the shape cannot use
            if NOT_VALID not in str(e):
                raise
    return out


def chosen_config(op) -> str:
    """The config of the public op's last launch: the autotuner's pick, or the default rule's choice."""
    tuned = op._TUNED
    how = "autotuner picked" if tuned.autotune and autotune_enabled() else "default rule"
    return f"{how} {config_name(tuned.last_config)}" if tuned.last_config else how


def main():
    p = sweep_arguments(__doc__.splitlines()[0], "tune-attn-nsa.json", iters=50)
    p.add_argument("--autotuner-timing", action="store_true", help="also time every config with do_bench")
    args = p.parse_args()
    flush = L2Flusher()
    results = []
    for spec, w, case, expected in seed_cases(SPECS, args.filter, OPS):
        case.fresh().run(spec.fn)  # the op's own choice first (autotuning, if any, happens here)
        picked = chosen_config(OPS[spec.name])
        timed, failed = check_and_time(spec, case, expected, variants(spec), args.iters, flush)
        best = min(timed, key=timed.get) if timed else None
        results.append({"id": w.id, "ms": timed, "failed": failed, "op_config": picked, "best": best})
        fmt = lambda k, t=timed: f"{k} {t[k] * 1e3:.1f} us" if k in t else "-"  # noqa: E731
        print(f"{w.id:45s} {fmt('op')} ({picked}); best {fmt(best)}; "
              + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in timed.items() if k != "op")
              + (f"  FAILED {real}" if (real := {k: v for k, v in failed.items() if NOT_VALID not in v})
                 else ""), flush=True)
        if args.autotuner_timing:
            try:  # a diagnostic: its failure must not end the sweep
                results[-1]["do_bench_ms"] = do_bench = autotuner_ms(spec, case)
                print(f"{'':45s} do_bench: best {min(do_bench, key=do_bench.get)}; "
                      + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in do_bench.items()), flush=True)
            except Exception as e:  # noqa: BLE001
                results[-1]["do_bench_error"] = f"{type(e).__name__}: {e}"[:200]
        with open(args.out, "w") as f:  # after every row: a sweep cut by its time limit keeps what it measured
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
