"""Run one seed row's op a few times on the GPU, for Nsight Compute to profile its kernels (stall reasons,
achieved occupancy, L2 / shared-memory traffic: what timing variants cannot separate). The first call compiles
and is checked against the reference; the next ``--repeats`` calls are the ones to profile. ``--config`` forces
one launch config by name: attn-nsa ops (``CONFIGS`` and ``_run(..., config=)``), attn-mla ops (``with_config``:
a key of ``CONFIGS`` or the name of a Gluon ``ws_launch.WS_CONFIGS`` entry) and GQABwd (a tile config of
``launch.configs_for(D)`` or a Gluon ``ws_launch.WS_CONFIGS`` entry, pinned by ``launch.forced``).
``--breakdown`` prints the median device time per kernel of the call (CUPTI, cold L2: the prepare / attention /
combine launches apart).

    ncu --clock-control none --set full --kernel-name regex:nsa_varlen --launch-skip 1 --launch-count 1 \\
        --export $OUT/2x4k python3 -m benchmarks.ncu_row --family attn-nsa --row NSAVarlenFwd/prefill-2x4k \\
        --config KB1-TMA0-w1-s2
    python3 -m benchmarks.ncu_row --family attn-mla --row mla-b128-8192/bf16 --config ws-n32s3 --breakdown
    python3 -m benchmarks.ncu_row --family attn-core --row GQABwd/llama-8b-long/bf16 --config ws-s2 --breakdown
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util

import torch

from .fault_scan import op_module
from .run import family_specs
from .sweep import seed_cases
from .timing import L2Flusher, kernel_breakdown


def _pinned_bwd(spec, name: str):
    """GQABwd's public function run under ``launch.forced`` of the tile or Gluon config called ``name``."""
    from attnops.attn_core.gqa_bwd import launch, ws_launch

    named = {c.name: c for d in (64, 128, 256) for c in launch.configs_for(d)}
    named.update({c.name: c for c in ws_launch.WS_CONFIGS})
    if name not in named:
        raise SystemExit(f"{spec.name}: no config {name}; have {sorted(named)}")

    def run(**inputs):
        with launch.forced(named[name]):
            return spec.fn(**inputs)
    return run


def forced(spec, name: str):
    """The op pinned to the launch config called ``name``."""
    if spec.name == "GQABwd":
        return _pinned_bwd(spec, name)
    mod = op_module(spec)
    if hasattr(mod, "with_config"):  # attn-mla
        named = dict(mod.CONFIGS)
        ws_name = mod.__name__.rsplit(".", 1)[0] + ".ws_launch"
        if importlib.util.find_spec(ws_name) is not None:  # TopK and the indexer have no ws kernels
            named.update({c.name: c for c in importlib.import_module(ws_name).WS_CONFIGS})
        if name not in named:
            raise SystemExit(f"{spec.name}: no config {name}; have {sorted(named)}")
        return mod.with_config(named[name])
    from attnops.attn_nsa._tuning import config_name

    config = next((c for c in mod.CONFIGS if config_name(c) == name), None)
    if config is None:
        raise SystemExit(f"{spec.name}: no config {name}; have {[config_name(c) for c in mod.CONFIGS]}")
    return lambda **inputs: mod._run(**inputs, config=config)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True)
    p.add_argument("--row", required=True, help="a seed row id (or a part of one that names a single row)")
    p.add_argument("--config", default="", help="force this launch config (attn-nsa, attn-mla ops, GQABwd)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--breakdown", action="store_true",
                   help="then print the median device time per kernel (CUPTI: not under Nsight Compute)")
    args = p.parse_args()
    rows = list(seed_cases(family_specs(args.family), args.row))
    if len(rows) != 1:
        raise SystemExit(f"--row {args.row!r} names {len(rows)} rows; name exactly one")
    spec, w, case, _ = rows[0]
    fn = forced(spec, args.config) if args.config else spec.fn
    spec.check(case, fn)  # compiles, and proves the profiled kernel computes the right thing
    for _ in range(args.repeats):
        case.fresh().run(fn)
    torch.cuda.synchronize()
    print(f"{w.id}: checked, then {args.repeats} calls{' with ' + args.config if args.config else ''}")
    if args.breakdown:
        run = lambda inputs=case.inputs: fn(**inputs)  # noqa: E731
        for kernel, ms in kernel_breakdown(run, 20, L2Flusher()).items():
            print(f"  {ms * 1e3:9.1f} us  {kernel[:110]}")


if __name__ == "__main__":
    main()
