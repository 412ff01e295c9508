"""Sweep the tile configs and split-KV counts of the GQADenseFwd / GQAVarlenFwd kernel on the GPU: every
config's output is checked against the reference, then timed like the benchmark (device time, cold L2).
Prints, per seed row, the default choice and its time and the best (config, splits, "+fused": split partials
merged in the kernel, "+keys-pre": RoPE keys rotated in a pre-pass) found, the "-tma" configs included; writes
JSON. ``--ws``: instead, the Gluon warp-specialized kernel's configs (``flash_fwd/ws_launch.py``) beside the
Triton kernel's first config and the default rule's choice, on the prefill rows it serves (no RoPE; D 64 / 128 /
256; fp8 rows too).

    python -m benchmarks.tune_attn_core --filter GQADense --out /tmp/tune-attn-core.json
    python -m benchmarks.tune_attn_core --filter llama-8b-uniform/bf16 --iters 20
    python -m benchmarks.tune_attn_core --ws --out /tmp/tune-ws.json
"""

from __future__ import annotations

import functools
import math
import re
import statistics

import triton

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd import ws_launch
from attnops.attn_core.specs import SPECS
from attnops.kernel_utils import runtime
from attnops.kernel_utils.fp8 import E4M3

from .sweep import check_and_time, matches, record, seed_cases, sweep_arguments
from .timing import L2Flusher, profile_iterations

OPS = ("GQADenseFwd", "GQAVarlenFwd")


def _shape(case):
    a = case.inputs
    q, k = a["q"], a["k"]
    D, G = q.shape[-1], q.shape[-2] // k.shape[-2]
    max_q = max(case.meta["q_lens"], default=0)
    max_kv = max(case.meta["kv_lens"], default=0)
    return D, G, max_q, max_kv, q.dtype == E4M3


def _split_options(case, cfg) -> tuple[int, list[int]]:
    D, G, max_q, max_kv, _ = _shape(case)
    a = case.inputs
    batch = len(case.meta["q_lens"])
    total = a["q"].shape[0] if a["q"].dim() == 3 else a["q"].shape[0] * a["q"].shape[1]
    h_kv = a["k"].shape[-2]
    m_blocks = max(1, triton.cdiv(max_q * G, cfg.block_m))
    programs = min(batch * m_blocks, triton.cdiv(total * G, cfg.block_m) + batch) * h_kv
    sms = runtime.num_sms()
    default = fwd.choose_splits(programs, max_kv, sms, cfg.block_n)
    opts = {default, 1}
    if default > 1:
        # the candidate rule of docs/perf/attn-core.md (2026-12-01): ~sqrt(kv) / 4 splits, one program per SM
        sqrt_rule = max(1, min(triton.cdiv(sms, programs), math.isqrt(max_kv) // 4, fwd.MAX_SPLITS))
        # the rule before 0.3.5 (~2 programs per SM), which one wave (the default since) replaced
        two_waves = max(1, min(triton.cdiv(2 * sms, programs), max_kv // fwd.MIN_SPLIT_KEYS, fwd.MAX_SPLITS))
        opts |= {max(1, default // 2), min(fwd.MAX_SPLITS, default * 2), min(fwd.MAX_SPLITS, default * 4),
                 sqrt_rule, two_waves}
    return default, sorted(opts)


# inputs of a case the warp-specialized kernel can take; any other (RoPE) leaves the row out of the --ws sweep
WS_INPUTS = {"q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "is_causal", "max_seqlen_q", "max_seqlen_kv", "sm_scale",
             "window_size_left", "window_size_right", "softcap", "sinks", "q_scale", "k_scale", "v_scale", "out_dtype"}


def _ws_variants(case, only: str = ""):
    """The warp-specialized configs (those whose name contains one of ``only``'s comma-separated parts, if given),
    the Triton kernel's first config and the default rule's choice, for a prefill-class row the warp-specialized
    kernel serves (else None)."""
    D, G, max_q, _, fp8 = _shape(case)
    if set(case.inputs) - WS_INPUTS or D not in ws_launch.CONFIGS or max_q < ws_launch.BLOCK_M // 2:
        return None  # (a 128-row tile per query head: requests of fewer query tokens are not its calls)
    triton_cfg = fwd.configs_for(D, max_q * G, fp8)[0]
    return [(cfg.name, functools.partial(fwd.forced, config=cfg)) for cfg in ws_launch.CONFIGS[D]
            if matches(cfg.name, only)] + [
        (f"triton-{triton_cfg.name}", functools.partial(fwd.forced, config=triton_cfg)), ("default", None)]


def _parse_config(name: str) -> fwd.FwdConfig:
    """``m64n32w4s4[-tma]`` -> its FwdConfig (the inverse of ``FwdConfig.name`` for 16-bit configs)."""
    m = re.fullmatch(r"m(\d+)n(\d+)w(\d+)s(\d+)(-tma)?", name)
    if m is None:
        raise ValueError(f"--extra: expected a config name like m64n32w4s4[-tma], got {name!r}")
    return fwd.FwdConfig(*(int(g) for g in m.groups()[:4]), tma=m.group(5) is not None)


def main():
    parser = sweep_arguments(__doc__.splitlines()[0], "tune-attn-core.json")
    parser.add_argument("--ws", action="store_true", help="time the Gluon warp-specialized kernel's configs")
    parser.add_argument("--only", default="", help="--ws: only configs whose name contains one of these")
    parser.add_argument("--extra", default="", help="Triton tile configs to time beside the table's, by name "
                        "(comma-separated, e.g. m64n32w4s4): candidates before they enter a table")
    args = parser.parse_args()
    flush = L2Flusher()
    results = []
    for spec, w, case, expected in seed_cases(SPECS, args.filter, OPS):
        if args.ws:
            pins = _ws_variants(case, args.only)
            if pins is None:
                continue
            timed, failed = check_and_time(spec, case, expected, [(n, spec.fn, pin) for n, pin in pins],
                                           args.iters, flush)
            best = min(timed, key=timed.get) if timed else None
            record(args.out, results, {"id": w.id, "default_ms": timed.get("default"), "best": best,
                                       "best_ms": timed.get(best), "all": timed, "failed": failed})
            print(f"{w.id:46s} " + "  ".join(f"{k} {v * 1e3:.1f}" for k, v in timed.items()) +
                  f" us; failed {len(failed)}", flush=True)
            for key, why in failed.items():
                print(f"    FAILED {key}: {why}", flush=True)
            continue
        D, G, max_q, _, fp8 = _shape(case)
        cands = fwd.configs_for(D, max_q * G, fp8) + tuple(_parse_config(n) for n in args.extra.split(",") if n)
        rope = case.inputs.get("pos_encoding_mode") == "rope" and not fp8
        variants = (
            (f"{cfg.name}/s{splits}" + ("+fused" if fused else "") + ("+keys-pre" if pre else ""), spec.fn,
             functools.partial(fwd.forced, config=cfg, num_splits=splits, fused_combine=fused,
                               rope_key_prepass=pre))
            for cfg in cands for splits in _split_options(case, cfg)[1] for fused in (False, True)
            for pre in ((False, True) if rope else (False,)) if splits > 1 or not fused)
        timed, failed = check_and_time(spec, case, expected, variants, args.iters, flush)
        default = f"{cands[0].name}/s{_split_options(case, cands[0])[0]}"  # unless it did not fit
        fn = lambda: spec.fn(**case.inputs)  # noqa: B023
        fn()
        default_ms = statistics.median(profile_iterations(fn, args.iters, flush))
        best = min(timed, key=timed.get) if timed else None
        rec = {"id": w.id, "default_ms": default_ms, "best": best, "best_ms": timed.get(best), "all": timed,
               "failed": failed, "first_candidate": default}
        record(args.out, results, rec)
        print(f"{w.id:58s} default {default_ms * 1e3:8.1f} us   best {best} "
              f"{(timed.get(best) or float('nan')) * 1e3:8.1f} us   failed {len(failed)}", flush=True)
        for key, why in failed.items():
            print(f"    FAILED {key}: {why}", flush=True)


if __name__ == "__main__":
    main()
