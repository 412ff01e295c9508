"""Sweep the launch configs of the attn-nsa kernels on the GPU: every valid config of a row is forced through the
op's ``_run``, its output checked against the reference, then timed like the benchmark (device time, cold L2,
median); the public op is timed beside them ("op") with the config its default rule chose named. Prints one
line per seed row, writes JSON.

    python -m benchmarks.tune_attn_nsa --out /tmp/tune-attn-nsa.json --filter NSAVarlenFwd
"""

from __future__ import annotations

from attnops.attn_nsa._tuning import config_name
from attnops.attn_nsa.nsa_compressed_varlen_fwd import op as compressed_op
from attnops.attn_nsa.nsa_topk_varlen_fwd import op as topk_op
from attnops.attn_nsa.nsa_varlen_fwd import op as selected_op
from attnops.attn_nsa.specs import SPECS

from .sweep import check_and_time, record, seed_cases, sweep_arguments
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


def chosen_config(op) -> str:
    """The config of the public op's last launch (its default rule's choice)."""
    last = op._TUNED.last_config
    return f"default rule {config_name(last)}" if last else "default rule"


def main():
    p = sweep_arguments(__doc__.splitlines()[0], "tune-attn-nsa.json", iters=50)
    args = p.parse_args()
    flush = L2Flusher()
    results = []
    for spec, w, case, expected in seed_cases(SPECS, args.filter, OPS):
        case.fresh().run(spec.fn)  # the op's own choice, named in the report
        picked = chosen_config(OPS[spec.name])
        timed, failed = check_and_time(spec, case, expected, variants(spec), args.iters, flush)
        best = min(timed, key=timed.get) if timed else None
        record(args.out, results, {"id": w.id, "ms": timed, "failed": failed, "op_config": picked, "best": best})
        fmt = lambda k, t=timed: f"{k} {t[k] * 1e3:.1f} us" if k in t else "-"  # noqa: E731
        print(f"{w.id:45s} {fmt('op')} ({picked}); best {fmt(best)}; "
              + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in timed.items() if k != "op")
              + (f"  FAILED {real}" if (real := {k: v for k, v in failed.items() if NOT_VALID not in v})
                 else ""), flush=True)


if __name__ == "__main__":
    main()
