"""Compile the GQABwd kernels for sm_90 without a GPU and report what ptxas says.

Runs Triton's full NVIDIA pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin with the bundled ptxas) for every
tile config of ``attn_core.gqa_bwd.launch`` and prints shared memory, registers, spill bytes, the number of
wgmma ops and of pipelined (cp.async) loads. Pointers and strides are specialized as a real launch does
(divisible by 16). Catches compile errors (types across the two program roles, layouts), shared memory
over the 227 KB limit and register spills before a GPU run. Exit status 1 on a compile error or a config
over the shared-memory limit.

    python -m benchmarks.sm90_compile_gqa_bwd                     # f16, causal, even tiles (seed rows)
    python -m benchmarks.sm90_compile_gqa_bwd --all               # f16/bf16 x causal/non-causal x even/ragged
    python -m benchmarks.sm90_compile_gqa_bwd --dims 128 96
    python -m benchmarks.sm90_compile_gqa_bwd --atomic-dq         # deterministic=False (dQ by fp32 atomics)
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import argparse  # noqa: E402
import itertools  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from attnops.attn_core.gqa_bwd import launch as bwd  # noqa: E402
from attnops.attn_core.gqa_bwd.kernel import (  # noqa: E402
    gqa_bwd_head_sum_kernel,
    gqa_bwd_kernel,
    gqa_bwd_preprocess_kernel,
)

SM90_SMEM = 232448
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
F32_POINTERS = ("lse_ptr", "delta_ptr", "dq_acc_ptr", "part_ptr")
I32_POINTERS = ("counter_ptr",)


def compile_sm90(fn, dtype: str, constexprs: dict, num_warps: int, num_stages: int) -> dict:
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = "*fp32" if name in F32_POINTERS else "*i32" if name in I32_POINTERS else f"*{dtype}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("scale_log2", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name.startswith("stride") and name != "stride_lh":
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    out = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps,
                                                                          "num_stages": num_stages})
    ptx = out.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    arch = re.search(r"\.target (sm_\w+)", ptx).group(1)
    info = subprocess.run([PTXAS, "-v", f"--gpu-name={arch}", f.name, "-o", os.devnull], capture_output=True,
                          text=True).stderr
    os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", info)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
    return {
        "smem": out.metadata.shared,
        "regs": int(regs.group(1)) if regs else -1,
        "spill": (int(spill.group(1)), int(spill.group(2))) if spill else (-1, -1),
        "wgmma": out.asm["ttgir"].count("ttng.warp_group_dot "),
        "async": out.asm["ttgir"].count("ttg.async_copy_global_to_local"),
        "serialized": "wgmma" in info and "serialized" in info,  # ptxas C7515: no wgmma overlap
        # PTX global reductions (the atomic dQ adds), by opcode: e.g. {"red.global.gpu.relaxed.add.f32": 64}
        "red": {op: ptx.count(op + " ") for op in sorted(set(re.findall(r"\b(?:red|atom)\.global[\w.]*", ptx)))},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="both dtypes, causal and not, even and ragged tiles")
    p.add_argument("--dims", type=int, nargs="*", default=[64, 128, 256])
    p.add_argument("--atomic-dq", action="store_true", help="the deterministic=False variant")
    p.add_argument("--partial", action="store_true", help="the head-split variant (dK / dV partial sums)")
    p.add_argument("--fused-sum", action="store_true", help="with --partial: the last subgroup adds the partials")
    p.add_argument("--chunked", action="store_true", help="the program order in chunks of pairs (ORDER_GROUP)")
    args = p.parse_args()
    dtypes = ("fp16", "bf16") if args.all else ("fp16",)
    variants = list(itertools.product((True, False), (True, False))) if args.all else [(True, True)]
    # with --partial: one (batch, KV head), as Triton passes an int argument equal to 1: a constexpr (the head-split
    # code once called .to() on it and failed to compile on the GPU only)
    one_pair = {"BH_kv": 1} if args.partial else {}
    bad = 0
    for dt, (causal, even), d in itertools.product(dtypes, variants, args.dims):
        for cfg in bwd.configs_for(d):
            cx = dict(HEAD_DIM=d, BLOCK_D=triton.next_power_of_2(d), BLOCK_M1=cfg.block_m1, BLOCK_N1=cfg.block_n1,
                      BLOCK_M2=cfg.block_m2, BLOCK_N2=cfg.block_n2, IS_CAUSAL=causal, EVEN_M1=even, EVEN_N1=even,
                      EVEN_N2=even, ATOMIC_DQ=args.atomic_dq, PARTIAL=args.partial,
                      FUSED_SUM=args.fused_sum, EXACT_DOT=False, WAIT_PRIOR=True, CHUNKED=args.chunked,
                      **one_pair)
            tag = f"{dt} D{d:<3d} {'causal' if causal else 'full  '} {'even ' if even else 'ragged'} {cfg.name:26s}"
            try:
                r = compile_sm90(gqa_bwd_kernel, dt, cx, cfg.num_warps, cfg.num_stages)
            except Exception as e:  # report and go on
                bad += 1
                print(f"{tag} COMPILE ERROR {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
                continue
            flags = []
            if r["smem"] > SM90_SMEM:
                bad += 1
                flags.append("OVER SMEM")
            if r["spill"][0] > 0:
                flags.append("SPILLS")
            if r["serialized"]:
                flags.append("WGMMA-SERIALIZED")
            print(f"{tag} smem {r['smem'] / 1024:6.1f} KB  regs {r['regs']:3d}  spill {r['spill'][0]:4d}/"
                  f"{r['spill'][1]:4d} B  wgmma {r['wgmma']:2d}  cp.async {r['async']:2d}  "
                  f"{' '.join(f'{k} x{n}' for k, n in r['red'].items())}  {' '.join(flags)}",
                  flush=True)
    r = compile_sm90(gqa_bwd_preprocess_kernel, "fp16", dict(HEAD_DIM=128, BLOCK_D=128, TOKENS=2, HEADS=32,
                                                             ZERO_DQ=args.atomic_dq, LAUNCH_DEPENDENTS=True), 4, 3)
    print(f"preprocess D128: smem {r['smem']} B regs {r['regs']} spill {r['spill']}")
    r = compile_sm90(gqa_bwd_head_sum_kernel, "fp16", dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_R=bwd.HEAD_SUM_ROWS,
                                                                          **one_pair), 4, 1)
    print(f"head sum D128: smem {r['smem']} B regs {r['regs']} spill {r['spill']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
