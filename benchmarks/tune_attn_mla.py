"""Sweep the launch configs of the attn-mla kernels on the GPU (and the split count of MLA decode): every
variant's output is checked against the reference, then timed like the benchmark (device time, cold L2).
Prints, per seed row, the default variant's time and the best one; writes JSON.

    python -m benchmarks.tune_attn_mla --out /tmp/tune-attn-mla.json
    python -m benchmarks.tune_attn_mla --filter TopK --iters 10
    python -m benchmarks.tune_attn_mla --filter ds-v32-topk-decode --topk-batches 8,16,32   # + decode batches
"""

from __future__ import annotations

import dataclasses

from attnops.attn_mla.dsa_decode_with_kvcache_fwd import op as dsa_op
from attnops.attn_mla.dsa_decode_with_kvcache_fwd import ws_launch as dsa_ws
from attnops.attn_mla.fp8_lightning_indexer_fwd import op as indexer_op
from attnops.attn_mla.mla_decode_with_kvcache_fwd import op as mla_op
from attnops.attn_mla.mla_decode_with_kvcache_fwd import ws_launch as mla_ws
from attnops.attn_mla.specs import SPECS
from attnops.attn_mla.topk_select_fwd import op as topk_op

from .sweep import check_and_time, record, seed_cases, sweep_arguments
from .timing import L2Flusher

OPS = {
    "MLADecodeWithKVCacheFwd": mla_op,
    "DSADecodeWithKVCacheFwd": dsa_op,
    "FP8LightningIndexerFwd": indexer_op,
    "TopKSelectFwd": topk_op,
}
CPU_ONLY = ("interpreter", "interpreter-split", "fallback")  # configs for the interpreter / the fallback test


def dsa_tail(case) -> int:
    """The rope tail width a DSA call on ``case`` runs with."""
    i = case.inputs
    return dsa_op.resolve_params(i["q"], i.get("dim_tail"), i.get("stride_kv", 1), i["q_start_index_s"],
                                 i.get("sm_scale"))[0]


def default_config(spec, case):
    """The config a call on ``case`` runs by default: for MLA decode and DSA the warp-specialized kernel's where
    it serves the row (what ``op.default_config`` picks), else the Triton kernel's ``pick_config``."""
    i = case.inputs
    if spec.name == "MLADecodeWithKVCacheFwd":
        return mla_op.default_config(i["q"], i["q_pe"], i["k"], i["k_pe"])
    if spec.name == "DSADecodeWithKVCacheFwd":
        return dsa_op.default_config(i["q"], i["kv"], dsa_tail(case))
    if spec.name == "TopKSelectFwd":  # (its pick depends on the row count and length)
        b, s, s_kv, g = i["index_score"].shape
        return topk_op.pick_config(b * s * g, s_kv)
    return OPS[spec.name].pick_config()


def variants(spec, case, skip=frozenset()):
    """(label, callable) per GPU config, the warp-specialized kernels' configs (MLA decode, DSA: where they
    serve the row), those named in ``skip`` left out (a config whose GPU tests hung would hang the sweep; the Triton
    kernel's ``h200`` where only the ws configs are compared), and
    for MLA decode a few split counts around the planner's, each also with the splits merged in the decode
    kernel (``fused_combine``)."""
    op = OPS[spec.name]
    default = default_config(spec, case)

    def mark(cfg) -> str:
        return " (default)" if cfg == default else ""

    for name, cfg in op.CONFIGS.items():
        if name in CPU_ONLY or name in skip:
            continue
        yield name + mark(cfg), op.with_config(cfg)
    if spec.name == "DSADecodeWithKVCacheFwd":
        tail = dsa_tail(case)
        if dsa_ws.applies(case.inputs["q"], case.inputs["kv"], tail):
            for cfg in dsa_ws.WS_CONFIGS:
                if cfg.name not in skip and dsa_ws.config_refusal(cfg, tail) is None:
                    yield cfg.name + mark(cfg), dsa_op.with_config(cfg)
    if spec.name == "MLADecodeWithKVCacheFwd":
        if mla_ws.applies(*(case.inputs[n] for n in ("q", "q_pe", "k", "k_pe"))):
            for cfg in mla_ws.WS_CONFIGS:
                if cfg.name not in skip:
                    yield cfg.name + mark(cfg), mla_op.with_config(cfg)
        # split counts around the planner's, for the config the call runs by default (the ws kernel where it
        # serves the call) and, merged in the kernel, for the Triton kernel
        q, k = case.inputs["q"], case.inputs["k"]
        for cfg in dict.fromkeys((default, mla_op.pick_config())):
            ws = isinstance(cfg, mla_ws.WsConfig)
            block_h = cfg.block_h if ws else mla_op.block_h_for(q.shape[1] // k.shape[2], cfg)
            heads = k.shape[2] * -(-(q.shape[1] // k.shape[2]) // block_h)
            planned = mla_op.plan_splits(q.shape[0], heads, k.shape[1], cfg.block_n)
            label = cfg.name if ws else "default"
            for splits in sorted({1, max(1, planned // 2), planned * 2, planned * 4} - {planned}):
                yield f"{label}, {splits} splits (planner: {planned})", mla_op.with_config(cfg, num_splits=splits)
            if not ws:  # (the ws kernel always merges in the combine launch)
                for splits in sorted({planned, max(1, planned // 2), planned * 2} - {1}):
                    yield (f"default, {splits} splits merged in the kernel (planner: {planned})",
                           mla_op.with_config(cfg, num_splits=splits, fused_combine=True))


def topk_decode_batches(batches) -> list:
    """TopKSelectFwd with the decode row's B-row forms as its workloads, one per B in ``batches`` (a probe, no seed
    row: decode batches between the split path's 4 rows and one program per SM); empty if no batch is asked for."""
    if not batches:
        return []
    spec = next(s for s in SPECS if s.name == "TopKSelectFwd")
    row = next(w for w in spec.workloads if "topk-decode" in w.id)
    probes = tuple(
        dataclasses.replace(row, id=row.id.replace("-b1/", f"-b{b}/") + " (probe)",
                            tensors={n: dict(t, shape=[b, *t["shape"][1:]]) for n, t in row.tensors.items()})
        for b in batches
    )
    return [dataclasses.replace(spec, workloads=probes)]


def main():
    p = sweep_arguments(__doc__.splitlines()[0], "tune-attn-mla.json")
    p.add_argument("--skip", default="", help="configs to leave out (comma-separated names)")
    p.add_argument("--topk-batches", default="",
                   help="also the TopK decode row with these row counts (probe rows; --filter applies to them too)")
    args = p.parse_args()
    skip = frozenset(filter(None, args.skip.split(",")))
    flush = L2Flusher()
    results = []
    batches = [int(b) for b in filter(None, args.topk_batches.split(","))]
    for spec, w, case, expected in seed_cases([*SPECS, *topk_decode_batches(batches)], args.filter):
        timed, failed = check_and_time(spec, case, expected,
                                       ((label, fn, None) for label, fn in variants(spec, case, skip)), args.iters,
                                       flush)
        default = next((k for k in timed if k.endswith("(default)")), None)
        best = min(timed, key=timed.get) if timed else None
        record(args.out, results, {"id": w.id, "ms": timed, "failed": failed, "default": default, "best": best})
        fmt = lambda k, t=timed: f"{k} {t[k]:.4f} ms" if k else "-"
        print(f"{w.id:60s} default {fmt(default):34s} best {fmt(best)}"
              + (f"  FAILED {sorted(failed)}" if failed else ""), flush=True)
        case = expected = None  # the row's tensors (up to 8.6 GB) go before seed_cases builds the next one


if __name__ == "__main__":
    main()
