"""Bisect a GQAPagedFwd fuzz case that fails on the GPU: the case and variants of it (one feature changed
each), every variant in its own subprocess (a fault poisons only its own context), each checked against the
reference on its own inputs. Prints one line per variant: pass / FAIL with the error.

    python -m benchmarks.paged_case_bisect 987008
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import torch

VARIANTS = (
    "base",
    "base-again",
    "no-rope",
    "interleaved",
    "no-window",
    "auto-plan",
    "warps-4",
    "block-n-64",
    "no-tile-in-page",
    "f16-inputs",
    "f16-q",
)


def variant_case(seed: int, name: str):
    from attnops.attn_core.gqa_paged_fwd import plan as plan_mod
    from attnops.attn_core.gqa_paged_fwd.spec import SPEC
    from attnops.kernel_utils import runtime

    case = SPEC.fuzz(seed, runtime.device())
    x = case.inputs
    old = x.get("plan")
    replan = {}
    if name == "no-rope":
        x.update(pos_encoding_mode="none", rope_cos=None, rope_sin=None)
    elif name == "interleaved":
        x["rope_layout"] = "interleaved"
    elif name == "no-window":
        x["window_size_left"] = -1
    elif name == "auto-plan":
        x["plan"] = None
    elif name in ("warps-4", "block-n-64"):
        key = plan_mod.config_key("small", x["q"].shape[-1])
        cfg = plan_mod.CONFIGS[key]
        cfg = dataclasses.replace(cfg, **({"num_warps": 4} if name == "warps-4" else {"block_n": 64}))
        replan = {"configs": {key: cfg}}
    elif name == "no-tile-in-page":
        replan = {"tile_in_page": False}
    elif name in ("f16-inputs", "f16-q"):
        names = {"f16-inputs": ("q", "k_pages", "v_pages"), "f16-q": ("q",)}
        for t in names[name]:
            x[t] = x[t].to(torch.float16)
        if "q" in names[name]:
            x["q_scale"] = None
        if "k_pages" in names[name]:
            x.update(k_scale=None, v_scale=None)
    if old is not None and (replan or name == "no-window"):
        x["plan"] = plan_mod.plan_paged_attention(
            old.q_lens,
            old.kv_lens,
            num_heads=old.num_heads,
            num_kv_heads=old.num_kv_heads,
            head_dim=old.head_dim,
            is_causal=x["is_causal"],
            window_size_left=x["window_size_left"],
            device=runtime.device(),
            **replan,
        )
    return SPEC, case


def child(seed: int, name: str) -> None:
    spec, case = variant_case(seed, name)
    spec.check(case)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    if sys.argv[1] == "--child":
        child(int(sys.argv[2]), sys.argv[3])
        return
    seed = int(sys.argv[1])
    procs = {
        v: subprocess.Popen(
            [sys.executable, "-m", "benchmarks.paged_case_bisect", "--child", str(seed), v],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for v in VARIANTS
    }
    for v, p in procs.items():
        out, _ = p.communicate()
        last = [line for line in out.splitlines() if "Error" in line or "error" in line][-1:] if p.returncode else []
        print(f"{seed} {v:16s} {'pass' if p.returncode == 0 else 'FAIL'} {' '.join(last)[:220]}", flush=True)


if __name__ == "__main__":
    main()
