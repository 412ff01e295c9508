"""Sweep the tile configs of the GQABwd kernel on the GPU, deterministic and with atomic dQ
(``deterministic=False``, names ending ``-atomic``), and the warp-specialized dK / dV configs (``ws-dkdv-s*``,
deterministic, at the head dims they serve), and the chosen config over every head-subgroup count
(``-<n>-splits``, ``-fused``: the partials added in the kernel), or (``--order``) only the chosen Triton tile with
its programs ordered in chunks of (batch, KV head) pairs (``-group<n>``, ``launch.ORDER_GROUP``): every variant's
dq/dk/dv are checked against the reference, then timed like the benchmark (device time, cold L2). Prints, per seed
row, the default (``launch.ws_default`` or the config ``launch.choose`` picks) and its time (deterministic), and the
best variant found; writes JSON.

    python -m benchmarks.tune_gqa_bwd --out /tmp/tune-gqa-bwd.json
    python -m benchmarks.tune_gqa_bwd --filter llama-70b-short --iters 20
    python -m benchmarks.tune_gqa_bwd --ws-only --filter bf16
    python -m benchmarks.tune_gqa_bwd --order --filter short/bf16
"""

from __future__ import annotations

import functools
import itertools
import statistics

from attnops.attn_core.gqa_bwd import launch as bwd
from attnops.attn_core.gqa_bwd import ws_launch as bwd_ws
from attnops.attn_core.gqa_bwd.spec import SPEC
from attnops.kernel_utils import runtime

from .sweep import check_and_time, record, seed_cases, sweep_arguments
from .timing import L2Flusher, profile_iterations


def main():
    parser = sweep_arguments(__doc__.splitlines()[0], "tune-gqa-bwd.json")
    parser.add_argument("--ws-only", action="store_true",
                        help="only the warp-specialized configs (ws-*, and the Gluon default's head subgroups)")
    parser.add_argument("--order", action="store_true",
                        help="only the chosen Triton tile over program-order chunks of 8, 16, 32, 64 pairs")
    args = parser.parse_args()
    flush = L2Flusher()
    results = []
    for _, w, case, expected in seed_cases([SPEC], args.filter):
        a = case.inputs
        B, S_q, H, D = a["q"].shape
        chosen = bwd.choose(D, B, S_q, a["k"].shape[1], H, a["k"].shape[2], a["is_causal"], runtime.num_sms())
        fn = lambda c=case: SPEC.fn(**c.inputs)  # noqa: E731
        G = H // a["k"].shape[2]
        variants = []
        if args.order:  # chunks of up to the row's B·H_kv pairs (all of them: one chunk)
            pairs = B * a["k"].shape[2]
            variants += [(f"{chosen.name}-group{g}", SPEC.fn, functools.partial(bwd.forced, chosen, group=g))
                         for g in sorted({8, 16, 32, 64, pairs}) if g <= pairs]
        elif not args.ws_only:
            variants += [(cfg.name + ("" if det else "-atomic"), functools.partial(SPEC.fn, deterministic=det),
                          functools.partial(bwd.forced, cfg))
                         for cfg, det in itertools.product(bwd.configs_for(D), (True, False))]
            # the head subgroups of launch.head_splits, their partials added by the head-sum launch or (-fused) by
            # each key block's last subgroup
            variants += [(f"{chosen.name}-{s}-splits{'-fused' if fused else ''}", SPEC.fn,
                          functools.partial(bwd.forced, chosen, splits=s, fused_sum=fused))
                         for s in range(1, G + 1) if G % s == 0 for fused in ((False, True) if s > 1 else (False,))]
        if D in bwd_ws.HEAD_DIMS and not args.order:
            variants += [(cfg.name, SPEC.fn, functools.partial(bwd.forced, cfg)) for cfg in bwd_ws.WS_CONFIGS]
            # the Gluon default over head subgroups (partials added by the head-sum launch)
            variants += [(f"{bwd.WS_DEFAULT.name}-{s}-splits", SPEC.fn,
                          functools.partial(bwd.forced, bwd.WS_DEFAULT, splits=s))
                         for s in range(2, G + 1) if G % s == 0]
        # the call's default: the Gluon kernels (launch.ws_default: long rows) or the Triton tile ``chosen``
        shapes = bwd.Problem(a["q"], a["k"], a["v"], a["o"], a["do"], a["lse"], a["q"], a["k"], a["v"],
                             a["is_causal"], 1.0)
        ws_default = bwd.ws_default(shapes, runtime.num_sms())
        default_name = ws_default.name if ws_default else chosen.name
        timed, failed = check_and_time(SPEC, case, expected, variants, args.iters, flush)
        fn()
        default_ms = statistics.median(profile_iterations(fn, args.iters, flush))
        best = min(timed, key=timed.get) if timed else None
        rec = {"id": w.id, "chosen": chosen.name, "default": default_name, "default_ms": default_ms, "best": best,
               "best_ms": timed.get(best), "all": timed, "failed": failed}
        record(args.out, results, rec)
        print(f"{w.id:40s} default {default_name} {default_ms * 1e3:8.1f} us   best {best} "
              f"{(timed.get(best) or float('nan')) * 1e3:8.1f} us   "
              + "  ".join(f"{k} {v * 1e3:.1f}" for k, v in timed.items()), flush=True)
        for key, why in failed.items():
            print(f"    FAILED {key}: {why}", flush=True)


if __name__ == "__main__":
    main()
