"""Run one seed row's op a few times on the GPU, for Nsight Compute to profile its kernels (stall reasons,
achieved occupancy, L2 / shared-memory traffic: what timing variants cannot separate). The first call compiles
and is checked against the reference; the next ``--repeats`` calls are the ones to profile. ``--config`` forces
one launch config of an op whose ``op.py`` has ``CONFIGS`` and ``_run(..., config=)`` (attn-nsa), by name.

    ncu --clock-control none --set full --kernel-name regex:nsa_varlen --launch-skip 1 --launch-count 1 \\
        --export $OUT/2x4k python3 -m benchmarks.ncu_row --family attn-nsa --row NSAVarlenFwd/prefill-2x4k \\
        --config KB1-TMA0-w1-s2
"""

from __future__ import annotations

import argparse

import torch

from .fault_scan import op_module
from .run import family_specs
from .sweep import seed_cases


def forced(spec, name: str):
    """The op's ``_run`` pinned to the config called ``name`` (``config_name`` of attn-nsa's launch rules)."""
    from attnops.attn_nsa._tuning import config_name

    mod = op_module(spec)
    config = next((c for c in mod.CONFIGS if config_name(c) == name), None)
    if config is None:
        raise SystemExit(f"{spec.name}: no config {name}; have {[config_name(c) for c in mod.CONFIGS]}")
    return lambda **inputs: mod._run(**inputs, config=config)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True)
    p.add_argument("--row", required=True, help="a seed row id (or a part of one that names a single row)")
    p.add_argument("--config", default="", help="force this launch config (attn-nsa ops)")
    p.add_argument("--repeats", type=int, default=2)
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


if __name__ == "__main__":
    main()
