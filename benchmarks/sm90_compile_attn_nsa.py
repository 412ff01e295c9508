"""Compile every NSAVarlenFwd launch config for sm_90 at the seed rows' shapes, as a launch specializes it
(pointers and strides divisible by 16), and print registers, shared memory and the SASS instructions of the
main loop: the figures docs/perf/attn-nsa.md (v5) quotes. No GPU needed.

    python -m benchmarks.sm90_compile_attn_nsa
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import sys  # noqa: E402

import triton  # noqa: E402

from attnops.attn_nsa._tuning import config_name  # noqa: E402
from attnops.attn_nsa.nsa_varlen_fwd import op  # noqa: E402

from .sm90_compile import compile_sm90, ptxas_report  # noqa: E402

# (label, G, D, block size, SEL, causal): the seed rows' shapes
SHAPES = (("2x4k / 4x2k", 16, 64, 32, 4, True), ("ragged", 16, 128, 32, 8, True))


def main() -> int:
    bad = 0
    for label, g, d, bs, sel, causal in SHAPES:
        bd = max(16, triton.next_power_of_2(d))
        facts = {"BS": bs, "BD": bd, "SEL": sel, "tma": d == bd}
        for config in op.CONFIGS:
            if not op._valid(config, facts):
                continue
            ptrs = {name: "*fp16" for name in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")}
            ptrs.update(bi_ptr="*i32", bc_ptr="*i32", offsets_ptr="*i32", tok_ptr="*i32")
            box = f"tensordesc<fp16[{bs},{bd}]>" if config.kwargs["TMA"] else "*fp16"
            ptrs.update(k_desc=box, v_desc=box)
            consts = {"G": g, "GP": max(16, triton.next_power_of_2(g)), "D": d, "BD": bd, "BS": bs, "SEL": sel,
                      "SELP": triton.next_power_of_2(sel), "CAUSAL": causal, **config.kwargs,
                      "_float_args": ("qk_scale",)}
            try:
                r = ptxas_report(compile_sm90(op.nsa_varlen_fwd_kernel, ptrs, consts, config.num_warps,
                                              config.num_stages, config.maxnreg))
            except Exception as e:  # a compile error is a finding, not a crash of the listing
                bad += 1
                print(f"{label:12s} {config_name(config):28s} FAIL {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            print(f"{label:12s} {config_name(config):28s} regs {r['regs']:3d} spill {r['spill']:3d} B "
                  f"smem {r['smem'] / 1024:5.1f} KB loop {r['loop_sass']:4d} SASS", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
