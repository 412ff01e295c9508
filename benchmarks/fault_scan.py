"""Find which (op, launch config, fuzz seed) faults on the GPU.

An illegal memory access poisons the CUDA context, so one bad launch fails every test after it and hides its
own identity. This scan runs each (op, config) pair in its own subprocess over the op's fuzz seeds, every call
``--repeats`` times with a synchronize after each, and prints the first seed that raises; the parent then
resumes the same pair after that seed. ``--public`` runs the public op (its default-rule launches, as the tests
do) instead of every pinned config.

    python -m benchmarks.fault_scan --family attn-nsa --seeds 100 [--ops NSACompressedVarlenFwd] [--public]
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys


def family_specs(family: str):
    return importlib.import_module(f"attnops.{family.replace('-', '_')}.specs").SPECS


def op_module(spec):
    """The op's ``op.py`` module (holds ``CONFIGS`` and ``_run(..., config=)``)."""
    return importlib.import_module(spec.fn.__module__)


def scan_one(family: str, op_name: str, config_index: int, seeds: list[int], repeats: int) -> None:
    """Child process: print one JSON line per faulting seed, then exit 1 (the context is gone)."""
    import torch

    from attnops.kernel_utils import runtime

    spec = next(s for s in family_specs(family) if s.name == op_name)
    mod = op_module(spec)
    if config_index < 0:
        fn, config_label = spec.fn, "public op"
    else:
        config = mod.CONFIGS[config_index]
        fn, config_label = (lambda **inputs: mod._run(**inputs, config=config)), str(config)
    for seed in seeds:
        case = spec.fuzz(seed, runtime.device())
        try:
            for _ in range(repeats):
                case.fresh().run(fn)
                torch.cuda.synchronize()
        except ValueError:
            continue  # this config does not serve this shape
        except Exception as e:  # noqa: BLE001 - report any fault with its case
            shapes = {k: (tuple(v.shape), tuple(v.stride()), str(v.dtype)) for k, v in case.inputs.items()
                      if isinstance(v, torch.Tensor)}
            scalars = {k: v for k, v in case.inputs.items() if not isinstance(v, torch.Tensor)}
            print(json.dumps({"op": op_name, "config": config_label, "seed": seed, "error": str(e)[:200],
                              "shapes": shapes, "scalars": scalars}, default=str), flush=True)
            sys.exit(1)
    print(json.dumps({"op": op_name, "config": config_label, "clean": len(seeds)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True)
    p.add_argument("--ops", default="", help="comma-separated op names (default: all of the family)")
    p.add_argument("--seeds", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--public", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("OP", "CONFIG_INDEX"), help=argparse.SUPPRESS)
    p.add_argument("--from-seed", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    from attnops.kernel_utils import reliability

    specs = [s for s in family_specs(args.family) if not args.ops or s.name in args.ops.split(",")]
    if args.child:
        spec = next(s for s in specs if s.name == args.child[0])
        seeds = [s for s in reliability.fuzz_seeds(spec, args.seeds) if args.from_seed is None or s >= args.from_seed]
        scan_one(args.family, args.child[0], int(args.child[1]), seeds, args.repeats)
        return
    for spec in specs:
        indices = [-1] if args.public else range(len(op_module(spec).CONFIGS))
        for index in indices:
            start = None
            while True:
                cmd = [sys.executable, "-m", "benchmarks.fault_scan", "--family", args.family, "--ops", spec.name,
                       "--seeds", str(args.seeds), "--repeats", str(args.repeats),
                       "--child", spec.name, str(index)]
                if start is not None:
                    cmd += ["--from-seed", str(start)]
                out = subprocess.run(cmd, capture_output=True, text=True)
                lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
                for line in lines:
                    print(json.dumps(line, default=str), flush=True)
                if out.returncode == 0 or not lines or "seed" not in lines[-1]:
                    if out.returncode != 0:
                        print(out.stderr[-2000:], flush=True)
                    break
                start = lines[-1]["seed"] + 1


if __name__ == "__main__":
    main()
