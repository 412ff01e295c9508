"""Compile the GQA dense/varlen forward kernel for sm_90 without a GPU and report what ptxas says.

Runs Triton's full NVIDIA pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin with the bundled ptxas) for every
tile config of ``attn_core.flash_fwd.launch`` and prints registers, spill bytes, shared memory and whether
the loads were software-pipelined (cp.async) and the dots became wgmma. Pointer and stride arguments are
specialized as a real launch does (16-byte aligned / divisible by 16): without that, Triton neither
vectorizes nor pipelines the loads. Catches compile errors, shared-memory overflow (> 227 KB) and spills
before a GPU run. Exit status 1 on a compile error or a config over the shared-memory limit; spills and
unpipelined loops are flagged in the listing (known: RoPE with D >= 256, D >= 256 with ~71 packed rows).

    python -m benchmarks.sm90_compile                 # default config of every class
    python -m benchmarks.sm90_compile --all           # every config of every class
    python -m benchmarks.sm90_compile --dims 128      # one head-dim class
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import argparse  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from attnops.attn_core.flash_fwd import launch as fwd  # noqa: E402
from attnops.attn_core.flash_fwd.kernel import gqa_fwd_kernel, rope_rows_kernel  # noqa: E402
from attnops.kernel_utils.split_combine import combine_columns, split_combine_kernel  # noqa: E402

SM90_SMEM = 232448  # bytes of shared memory one block may use on an H100/H200
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
CUOBJDUMP = os.path.join(os.path.dirname(PTXAS), "cuobjdump")


def compile_sm90(fn, pointer_types: dict[str, str], constexprs: dict, num_warps: int, num_stages: int,
                 maxnreg: int | None = None, source=ASTSource):
    """Compile ``fn`` for sm_90: pointers (and TMA descriptor types) as given (``*fp16`` ...), ints i32, floats
    fp32 (names in ``float_args``), every pointer and ``stride_*`` argument specialized divisible by 16.
    ``source``: ``GluonASTSource`` for a Gluon kernel."""
    sig = {}
    for name, prm in zip(fn.arg_names, fn.params):
        if prm.is_constexpr:
            sig[name] = "constexpr"
        elif name in pointer_types:
            sig[name] = pointer_types[name]
        elif name in constexprs.get("_float_args", ()):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if sig[n].startswith("*") or n.startswith("stride_")}
    consts = {k: v for k, v in constexprs.items() if not k.startswith("_")}
    src = source(fn, sig, constexprs=consts, attrs=attrs)
    options = {"num_warps": num_warps, "num_stages": num_stages, **({"maxnreg": maxnreg} if maxnreg else {})}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def loop_sass_instructions(kernel) -> int:
    """SASS instructions in the kernel's longest loop (the span of its widest backward branch): the issue cost
    of one main-loop step. On NSAVarlenFwd it showed ~300 of 592 instructions per step building masks and
    addresses (docs/perf/attn-nsa.md v5). 0 without a loop or without cuobjdump."""
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
    try:
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True, text=True).stdout
    except OSError:
        return 0
    finally:
        os.unlink(f.name)
    addrs, loops = [], []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        addrs.append(addr)
        target = re.search(r"BRA\s+0x([0-9a-f]+)", m.group(2))
        if target and int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))
    if not loops:
        return 0
    lo, hi = max(loops, key=lambda span: span[1] - span[0])
    return sum(1 for a in addrs if lo <= a <= hi)


def report_variants(variants) -> int:
    """Compile each ``(label, build[, allowed spill bytes])`` (``build()`` returns a compiled kernel), print one line
    per variant (registers, spill bytes, shared memory, wgmma, loop SASS, flags); returns the count of compile
    errors, spills over the variant's allowance and shared-memory overflows (a tool's exit status). Used by the
    Gluon kernels' listings."""
    bad = 0
    for label, build, *allowed in variants:  # (an optional third element: the spill bytes that variant may have)
        allowed_spill = allowed[0] if allowed else 0
        t0 = time.perf_counter()
        try:
            r = ptxas_report(build())
        except Exception as e:  # noqa: BLE001 - report every failing variant, then count it
            print(f"{label} COMPILE ERROR {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
            bad += 1
            continue
        over = r["smem"] > SM90_SMEM
        bad += over or r["spill"] > allowed_spill
        print(f"{label} regs {r['regs']:3d} spill {r['spill']:5d} B  smem {r['smem'] / 1024:6.1f} KB  "
              f"wgmma {r['wgmma']}  loop {r['loop_sass']:4d} SASS ({time.perf_counter() - t0:.1f}s)"
              f"{' SPILL' if r['spill'] > allowed_spill else ''}{' SMEM-OVER' if over else ''}"
              f"{' WGMMA-SERIALIZED' if r['serialized'] else ''}", flush=True)
    return bad


def resident_per_sm(r: dict, num_warps: int) -> int:
    """Programs of one kernel that fit on an sm_90 SM at once (registers in 256-per-warp units, shared
    memory with 1 KB reserved per block, 64 warps, 32 blocks)."""
    regs_per_warp = -(-max(r["regs"], 1) * 32 // 256) * 256
    by_regs = 65536 // (regs_per_warp * num_warps)
    by_smem = SM90_SMEM // (r["smem"] + 1024) if r["smem"] else 32
    return min(by_regs, by_smem, 64 // num_warps, 32)


def ptxas_report(kernel) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    out = subprocess.run([PTXAS, "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True,
                         text=True).stderr
    os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    ttgir = kernel.asm["ttgir"]
    return {
        "regs": int(regs.group(1)) if regs else -1,
        "spill": (int(spill.group(1)) + int(spill.group(2))) if spill else -1,
        "smem": kernel.metadata.shared,
        "wgmma": "warp_group_dot" in ttgir,
        "pipelined": "async_copy_global_to_local" in ttgir or "async_tma_copy" in ttgir,
        # scalar 2-byte global loads: a gather Triton could not vectorize (RoPE tables before v2: 192 at D=128)
        "ldg16": len(re.findall(r"ld\.global(?:\.[a-z0-9]+)*\.b16\b", kernel.asm["ptx"])),
        # ptxas C7515-style warnings: wgmma serialized (no overlap of consecutive tensor-core ops)
        "serialized": "wgmma" in out and "serialized" in out,
        "loop_sass": loop_sass_instructions(kernel),
    }


def compile_fwd(head_dim: int, cfg, dtype: str = "fp16", out: str = "fp16", split: bool = False,
                softcap: bool = False, rope: bool = False, sink: bool = False, varlen: bool = True,
                rotary_dim: int | None = None, interleaved: bool = False, fused: bool = False,
                keys_prepass: bool = False):
    fp8 = dtype == "fp8e4nv"
    ptrs = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "o_ptr": f"*{out}",
            "ws_o_ptr": "*fp32", "counter_ptr": "*i32",
            "lse_ptr": "*fp32", "cu_q_ptr": "*i32", "cu_kv_ptr": "*i32",
            "q_scale_ptr": "*fp32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32", "cos_ptr": f"*{out}",
            "sin_ptr": f"*{out}", "sink_ptr": "*fp32"}
    consts = {
        "HEAD_DIM": head_dim, "BLOCK_D": triton.next_power_of_2(head_dim), "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n, "VARLEN": varlen, "SPLIT": split, "IS_FP8": fp8, "FP8_DOT": fp8 and cfg.fp8_dot,
        "COMPUTE_BF16": out == "bf16", "SOFTCAP": softcap, "HAS_SINK": sink, "ROPE": rope,
        "ROTARY_DIM": rotary_dim or head_dim, "INTERLEAVED": interleaved, "EXACT_DOT": False,
        "ROPE_K": rope and not keys_prepass,
        # launch.tma_applies: 16-bit, no RoPE, power-of-two head dim
        "TMA": cfg.tma and not fp8 and not rope and head_dim == triton.next_power_of_2(head_dim),
        "NUM_STAGES": cfg.num_stages, "FUSED_COMBINE": split and fused,
        "_float_args": ("sm_scale_log2", "cap_scale", "cap_log2"),
    }
    return compile_sm90(gqa_fwd_kernel, ptrs, consts, cfg.num_warps, cfg.num_stages)


def compile_rope_keys(head_dim: int, interleaved: bool, dtype: str = "fp16"):
    ptrs = {"k_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "cu_kv_ptr": "*i32", "pos_off_ptr": "*i32",
            "cos_ptr": f"*{dtype}", "sin_ptr": f"*{dtype}"}
    block_d = triton.next_power_of_2(head_dim)
    consts = {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_T": fwd.ROPE_KEY_ELEMS // block_d,
              "VARLEN": True, "ROTARY_DIM": head_dim, "INTERLEAVED": interleaved, "POS_OFFSET": False}
    return compile_sm90(rope_rows_kernel, ptrs, consts, 4, 1)


def compile_combine(head_dim: int, out: str = "bf16", sink: bool = True, splits: int = 32, serial: bool = False):
    """The split combine (kernel_utils.split_combine) of ``splits`` partials per row, at the columns per program
    its launcher picks for them (``serial``: one split at a time over whole rows, the large-workspace path)."""
    ptrs = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "out_ptr": f"*{out}", "sink_ptr": "*fp32",
            "block_index_ptr": "*i32"}
    block_d = triton.next_power_of_2(head_dim)
    block_dc = block_d if serial else combine_columns(splits, block_d)
    consts = {"HEAD_DIM": head_dim, "BLOCK_DC": block_dc, "SPLITS": triton.next_power_of_2(splits), "HAS_SINK": sink,
              "SERIAL": serial, "BLOCK_INDEX": False}
    return compile_sm90(split_combine_kernel, ptrs, consts, 4, 2)


def classes(all_configs: bool):
    """(label, head_dim, config, dtype, out, split, extra) for every config class."""
    for d in (64, 128, 256, 512):
        for label, rows, dtype, out, split in (("prefill", 1024, "fp16", "fp16", False),
                                              ("prefill-bf16", 1024, "bf16", "bf16", False),
                                              ("fp8", 1024, "fp8e4nv", "bf16", False),
                                              ("decode", 4, "fp16", "fp16", True),
                                              ("decode-G71", 71, "fp16", "fp16", True)):
            cfgs = fwd.configs_for(d, rows, fp8=dtype == "fp8e4nv")
            for i, cfg in enumerate(cfgs if all_configs else cfgs[:1]):
                yield f"{label}{'' if i == 0 else f'[{i}]'}", d, cfg, dtype, out, split, {}
        cfg = fwd.configs_for(d, 4)[0]  # split-KV decode merged in the kernel (forced(fused_combine=True))
        yield "decode-fused+sink", d, cfg, "fp16", "fp16", True, {"fused": True, "sink": True}
        cfg = fwd.configs_for(d, 1024)[0]  # feature variants of the default prefill config
        yield "prefill+softcap+sink", d, cfg, "fp16", "fp16", False, {"softcap": True, "sink": True}
        for i, tma in enumerate(c for c in fwd.configs_for(d, 1024) if c.tma):  # the TMA / warp-specialized path
            if all_configs or i == 0:
                yield "prefill-tma", d, tma, "fp16", "fp16", False, {}
                yield "prefill-tma-bf16+sink", d, tma, "bf16", "bf16", False, {"softcap": True, "sink": True}
                yield "dense-tma", d, tma, "fp16", "fp16", False, {"varlen": False}
        yield "prefill+rope", d, cfg, "fp16", "fp16", False, {"rope": True}
        yield "prefill+rope-inter", d, cfg, "fp16", "fp16", False, {"rope": True, "interleaved": True}
        yield "prefill+rope-R/2", d, cfg, "fp16", "fp16", False, {"rope": True, "rotary_dim": d // 2}
        yield "rope-keys-pre", d, cfg, "fp16", "fp16", False, {"rope": True, "keys_prepass": True}
        yield "rope-inter-keys-pre", d, cfg, "fp16", "fp16", False, {"rope": True, "interleaved": True,
                                                                     "keys_prepass": True}
        yield "dense+fp8+rope", d, cfg, "fp8e4nv", "fp16", False, {"rope": True, "varlen": False}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="every config, not only each class's default")
    p.add_argument("--dims", default="64,128,256,512")
    args = p.parse_args(argv)
    dims = {int(x) for x in args.dims.split(",")}
    bad = 0
    for label, d, cfg, dtype, out, split, extra in classes(args.all):
        if d not in dims:
            continue
        t0 = time.perf_counter()
        try:
            r = ptxas_report(compile_fwd(d, cfg, dtype, out, split, **extra))
        except Exception as e:  # a compile error is a finding, not a crash of the sweep
            bad += 1
            print(f"D{d:<4d}{label:22s}{cfg.name:18s} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        flag = ""
        if r["spill"] > 0:
            flag += " SPILL"
        if r["serialized"]:
            flag += " WGMMA-SERIALIZED"
        if not r["pipelined"]:
            flag += " NOT-PIPELINED"
        if r["smem"] > SM90_SMEM:
            flag += " SMEM"
            bad += 1  # cannot launch (the launcher would fall through to the next config)
        print(f"D{d:<4d}{label:22s}{cfg.name:18s} regs {r['regs']:3d} spill {r['spill']:5d} B  smem "
              f"{r['smem'] / 1024:6.1f} KB  wgmma {str(r['wgmma']):5s} ld.b16 {r['ldg16']:3d} "
              f"loop {r['loop_sass']:4d} SASS ({time.perf_counter() - t0:4.1f}s){flag}",
              flush=True)
    for d in sorted(dims):  # the small helper kernels: registers / spills / shared memory, or the error
        helpers = [(f"rope-keys{'-inter' if il else ''}", lambda d=d, il=il: compile_rope_keys(d, il))
                   for il in (False, True)]
        helpers += [(f"combine-{n}-splits", lambda d=d, n=n: compile_combine(d, splits=n)) for n in (2, 32, 128)]
        helpers += [("combine-serial", lambda d=d: compile_combine(d, serial=True))]
        for label, build in helpers:
            try:
                r = ptxas_report(build())
                print(f"D{d:<4d}{label:22s}{'':18s} regs {r['regs']:3d} spill {r['spill']:5d} B  smem "
                      f"{r['smem'] / 1024:6.1f} KB")
            except Exception as e:
                bad += 1
                print(f"D{d:<4d}{label} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
