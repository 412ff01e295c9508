"""Sweep tile configs and split-KV settings of the paged attn-core kernel (GQAPagedFwd,
MHADecodePagedWithKVCacheFwd, GQAPrefillPagedWithKVCacheFwd) on the GPU. Every variant's output is checked
against the reference, then timed like the benchmark (device time, cold L2). Prints, per seed row, the
default plan and its time, and the best variant; writes JSON. Tile configs are swept with the default
split heuristic (one class at a time; the other class of a mixed row keeps its default), split settings
with the default configs.

    python -m benchmarks.tune_attn_core_paged --filter GQAPaged --out /tmp/tune-paged.json
    python -m benchmarks.tune_attn_core_paged --filter llama-8b-p64/ --iters 20
    python -m benchmarks.tune_attn_core_paged --ws --filter GQAPagedFwd/llama-8b/,starcoder --iters 20
    python -m benchmarks.tune_attn_core_paged --filter MHADecode --variants latency
    python -m benchmarks.tune_attn_core_paged --filter llama-70b-p16 --split-counts 2,3,4,5,6 --variants num_splits

``--ws``: instead, the large class on the warp-specialized kernel (``ws=`` of the plan: every config
``ws_launch.paged_applies`` may take, and each with its lightest blocks split where the tail rule splits any:
``+tail``) beside the Triton kernel (``ws=False``) and the default plan, on the rows with a large class; on mixed
batches also the decode requests merged into each packing config's launch (``+merge_small``) or in their own launch
beside the default config's (``+beside``: the model's SM count, ``+beside:R``: R SMs left to them).
"""

from __future__ import annotations

import functools

import torch

from attnops.attn_core import gqa_paged_plan, gqa_prefill_paged_plan, mha_decode_paged_plan
from attnops.attn_core.flash_fwd import ws_launch
from attnops.attn_core.gqa_paged_fwd.plan import CONFIGS, SMALL_ROWS, TileConfig, config_key
from attnops.attn_core.specs import SPECS

from .sweep import check_and_time, matches, record, seed_cases, sweep_arguments
from .timing import L2Flusher, kernel_breakdown

OPS = ("GQAPagedFwd", "MHADecodePagedWithKVCacheFwd", "GQAPrefillPagedWithKVCacheFwd")

T = TileConfig
CANDIDATES: dict[tuple[str, int], list[TileConfig]] = {
    ("small", 64): [T(16, 64, 4, 3), T(16, 128, 4, 3), T(16, 128, 8, 4), T(16, 256, 8, 2), T(16, 64, 8, 3)],
    ("small", 128): [T(16, 32, 4, 3), T(16, 64, 4, 3), T(16, 64, 8, 4), T(16, 128, 8, 2), T(16, 32, 8, 3)],
    ("small", 256): [T(16, 32, 4, 3), T(16, 64, 4, 2), T(16, 64, 8, 2), T(16, 16, 8, 3)],
    ("large", 64): [T(64, 64, 4, 3), T(128, 64, 4, 3), T(128, 64, 8, 3), T(128, 128, 8, 3), T(128, 64, 8, 4)],
    # (128x64 w8 s4: the merged noncausal launch waits on its K / V copies at 3 stages, H200 Nsight 2026-12-03)
    ("large", 128): [T(64, 64, 4, 3), T(128, 64, 8, 3), T(128, 64, 4, 3), T(128, 128, 8, 2), T(128, 32, 4, 4),
                     T(128, 64, 8, 4)],
    # 4-warp D = 256 tiles: 96 / 64 KB of shared memory would let two programs share an SM, but ptxas caps
    # them at 255 registers with 8-104 B of spill (offline sm_90): the sweep decides
    ("large", 256): [T(64, 64, 8, 2), T(64, 32, 8, 2), T(64, 32, 8, 3), T(64, 64, 4, 2), T(128, 32, 8, 2),
                     T(64, 32, 4, 2), T(64, 16, 4, 3)],
}
# split-KV and addressing settings, swept with the default configs. Since attn-core 0.3.4 `tile_in_page` and
# `fused_combine` are the defaults (ninth session's sweep): their negations check that they still win
SPLIT_KNOBS = ({"num_splits": 1}, {"programs_per_sm": 1}, {"programs_per_sm": 2}, {"programs_per_sm": 8},
               {"fused_combine": False}, {"tile_in_page": False}, {"min_split_keys": 64}, {"min_split_keys": 128},
               {"pow2_pages": False}, {"latency": False}, {"merge_small": True})


# SMs left to the decode launch beside the ws launch (``small_beside=R``): the model's serving-step choice is 43
# (3 rounds of prefill tiles on 89 programs), 50+ costs the prefill a fourth round, fewer starve the decodes
BESIDE_SMS = (24, 32, 40, 46, 56, 66)


def planner(op: str, case):
    a = case.inputs
    if op == "GQAPagedFwd":
        q = a["q"]
        return lambda **kw: gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], q.shape[1], a["k_pages"].shape[2],
                                           q.shape[2], is_causal=a.get("is_causal", True),
                                           window_size_left=a.get("window_size_left", -1),
                                           window_size_right=a.get("window_size_right", -1), **kw)
    if op == "MHADecodePagedWithKVCacheFwd":
        q = a["q"]
        return lambda **kw: mha_decode_paged_plan(a["real_seqlen_kv"], q.shape[1], q.shape[2], q.shape[3],
                                                  is_causal=a["is_causal"], **kw)
    q = a["q"]
    return lambda **kw: gqa_prefill_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], q.shape[1],
                                               a["k_new"].shape[1], q.shape[2], is_causal=a.get("is_causal", True),
                                               **kw)


def _with_plan(op, plan, **inputs):
    return op(**inputs, plan=plan)


def _launches(plan):
    return plan.attn.launches if hasattr(plan, "attn") else plan.launches


def _ws_variants(case, default_plan) -> list[tuple[str, dict]]:
    """The warp-specialized configs of the case's head dim beside ``ws=False``, for plans with a large class over
    16-bit pools of the two ops that take it (else [])."""
    d = case.inputs["q"].shape[-1]
    pool = case.inputs.get("k_pages")  # (MHADecodePagedWithKVCacheFwd's pools are "k" / "v": its q is not packed)
    if pool is None or pool.dtype not in (torch.float16, torch.bfloat16) or not ws_launch.paged_configs(d):
        return []
    if not any(ln.kind == "large" for ln in _launches(default_plan)):
        return []
    variants = [("ws=False", {"ws": False})] + [(cfg.name, {"ws": cfg}) for cfg in ws_launch.paged_configs(d)]
    plan = getattr(default_plan, "attn", default_plan)
    group = plan.num_heads // plan.num_kv_heads
    small = [q * group <= SMALL_ROWS for q in plan.q_lens if q]
    if any(small) and not all(small):  # a mixed batch: its decode requests in a packed warp-specialized launch too
        variants += [(f"{cfg.name}+merge_small", {"ws": cfg, "merge_small": True})
                     for cfg in ws_launch.paged_configs(d) if ws_launch.heads_per_tile(cfg, group) > 1]
        # ... or in their own launch beside the default config's, on the SMs it leaves them: the model's count and
        # forced ones around it (``gqa_paged_fwd.beside``)
        cfg = ws_launch.PAGED_DEFAULTS.get(d)
        if cfg is not None and cfg.persistent:
            variants += [(f"{cfg.name}+beside", {"ws": cfg, "small_beside": True})]
            variants += [(f"{cfg.name}+beside:{r}", {"ws": cfg, "small_beside": r}) for r in BESIDE_SMS]
    return variants


def _tail_variants(make_plan, ws_variants) -> list[tuple[str, dict]]:
    """Each forced warp-specialized config with its lightest blocks split over their keys (``ws_tail=True``) where
    the plan's rule splits any (``gqa_paged_fwd.tail_split``)."""
    out = []
    for name, kw in ws_variants:
        if isinstance(kw.get("ws"), ws_launch.WsConfig):
            tail = {**kw, "ws_tail": True}
            if any(ln.ws_splits is not None for ln in _launches(make_plan(**tail))):
                out.append((f"{name}+tail", tail))
    return out


def _merged_variants(head_dim: int) -> list[tuple[str, dict]]:
    """``merge_small`` with each large tile and with split settings: the merged launch holds every item of a
    mixed batch, so its tile and splits decide the row (the split-sweep knobs alone change one class)."""
    key = config_key("large", head_dim)
    tiles = [(f"merge_small+large:{c.block_m}x{c.block_n}w{c.num_warps}s{c.num_stages}",
              {"merge_small": True, "configs": {key: c}}) for c in CANDIDATES.get(key, []) if c != CONFIGS[key]]
    splits = [(f"merge_small+{k}={v}", {"merge_small": True, k: v})
              for k, v in (("num_splits", 2), ("min_split_keys", 256), ("min_split_keys", 128))]
    return tiles + splits


def main():
    parser = sweep_arguments(__doc__.splitlines()[0], "tune-attn-core-paged.json")
    parser.add_argument("--ws", action="store_true", help="time the warp-specialized kernel's configs")
    parser.add_argument("--variants", default="",
                        help="only variants whose name contains one of these (comma-separated), beside the default")
    parser.add_argument("--split-counts", default="",
                        help="also force each of these split counts (comma-separated), e.g. 1,2,3,4,6,8")
    args = parser.parse_args()
    forced_splits = [{"num_splits": int(n)} for n in filter(None, args.split_counts.split(","))]
    flush = L2Flusher()
    results = []
    for spec, w, case, expected in seed_cases(SPECS, args.filter, OPS):
        make_plan = planner(spec.name, case)
        default_plan = make_plan()
        d = case.inputs["q"].shape[-1]
        variants = [("default", {})]
        if args.ws:
            ws = _ws_variants(case, default_plan)
            if not ws:
                continue
            variants += ws + _tail_variants(make_plan, ws)
        else:
            for ln in _launches(default_plan):
                key = config_key(ln.kind, d)
                variants += [(f"{ln.kind}:{cfg.block_m}x{cfg.block_n}w{cfg.num_warps}s{cfg.num_stages}",
                              {"configs": {key: cfg}}) for cfg in CANDIDATES.get(key, []) if cfg != CONFIGS[key]]
            knobs = list(SPLIT_KNOBS) + [k for k in forced_splits if k not in SPLIT_KNOBS]
            variants += [("".join(f"{k}={v}" for k, v in knob.items()), knob) for knob in knobs]
            variants += _merged_variants(d)
        if args.variants:
            variants = variants[:1] + [v for v in variants[1:] if matches(v[0], args.variants)]
        timed, failed = check_and_time(spec, case, expected, (
            (name, functools.partial(_with_plan, spec.fn, make_plan(**kw)), None) for name, kw in variants),
            args.iters, flush)
        best = min(timed, key=timed.get) if timed else None
        rec = {"id": w.id, "default": default_plan.describe(), "default_ms": timed.get("default"),
               "best": best, "best_ms": timed.get(best), "timed_ms": timed, "failed": failed}
        if "default" in timed:  # where the default's time goes: attention launches vs the split combine
            run = functools.partial(_with_plan, spec.fn, default_plan, **case.inputs)
            rec["default_kernels_ms"] = kernel_breakdown(run, args.iters, flush)
            print("    default per kernel: " + ", ".join(f"{k[:40]} {v * 1e3:.1f} us"
                                                      for k, v in rec["default_kernels_ms"].items()), flush=True)
        record(args.out, results, rec)
        dflt = timed.get("default", float("nan"))
        print(f"{w.id}: default {dflt * 1e3:.1f} us [{rec['default']}]; best {best} "
              f"{(timed.get(best) or float('nan')) * 1e3:.1f} us; {len(failed)} failed", flush=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
