"""One-off bisect of the GQABwd fault the GPU fuzz found (seed 502019: B 1, S_q = S_kv = 1, H 6, H_kv 1, D 64, bf16,
causal): each variant in its own subprocess (a fault poisons the context), synchronized, one line each."""
import json
import subprocess
import sys

BASE = dict(batch=1, s_q=1, s_kv=1, heads=(6, 1), head_dim=64, is_causal=True, sm_scale=0.3, dtype="bf16", config=-1)
VARIANTS = {
    "as-found": {}, "cfg0": dict(config=0), "cfg1": dict(config=1), "cfg2": dict(config=2), "f16": dict(dtype="f16"),
    "noncausal": dict(is_causal=False), "s_kv2": dict(s_kv=2), "s2": dict(s_q=2, s_kv=2), "g1": dict(heads=(1, 1)),
    "g2": dict(heads=(2, 1)), "d128": dict(head_dim=128), "b2": dict(batch=2), "s_q1-s_kv64": dict(s_kv=64),
    "s17": dict(s_q=17, s_kv=17),
}


def child(spec_json):
    import torch

    from attnops.attn_core.gqa_bwd import launch, spec
    from attnops.kernel_utils import runtime
    p = json.loads(spec_json)
    row = "llama-8b-short/" + p.pop("dtype")
    w = next(w for w in spec.SPEC.workloads if w.id.endswith(row))
    cfg = p.pop("config")
    p["heads"] = tuple(p["heads"])
    case = spec.make_case(w, runtime.device(), False, 502019, **p)
    a = case.inputs
    chosen = launch.choose(a["q"].shape[-1], *a["q"].shape[:2], a["k"].shape[1], a["q"].shape[2], a["k"].shape[2],
                           a["is_causal"], 132) if cfg < 0 else launch.configs_for(a["q"].shape[-1])[cfg]
    with launch.forced(chosen):
        out = case.fresh().run(spec.SPEC.fn)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    print(chosen.name, "finite" if all(bool(t.isfinite().all()) for t in out.values()) else "non-finite")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
        sys.exit(0)
    for name, over in VARIANTS.items():
        p = {**BASE, **over}
        r = subprocess.run([sys.executable, __file__, json.dumps(p)], capture_output=True, text=True, timeout=120)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        err = [l for l in r.stderr.splitlines() if "Error" in l][-1:] 
        print(f"{name:14s} rc={r.returncode} {last} {err[0][:120] if err else ''}", flush=True)
