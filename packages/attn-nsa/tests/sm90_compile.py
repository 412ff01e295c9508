"""Compile every launch config of the family's kernels for sm_90 without a GPU (Triton frontend, MLIR
lowering, LLVM, ptxas): the interpreter never lowers a kernel, so this is what catches type-unification,
layout and resource errors on a CPU-only machine. Run as a script with TRITON_INTERPRET=0 (see
test_compile_sm90.py); prints one line per kernel/config and ``FAILS <n>`` last."""

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from attnops.attn_nsa.nsa_compressed_varlen_fwd import op as cmp_op  # noqa: E402
from attnops.attn_nsa.nsa_topk_varlen_fwd import op as topk_op  # noqa: E402
from attnops.attn_nsa.nsa_varlen_fwd import op as sel_op  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


def compile_one(kernel, args: dict, config):
    sig, consts = {}, {}
    values = {**args, **config.kwargs}
    if config.kwargs.get("TMA"):  # the TMA configs take [BS, BD] box descriptors for K and V
        desc = f"tensordesc<{args['q_ptr'][1:]}[{args['BS']},{args['BD']}]>"
        values.update(k_desc=desc, v_desc=desc)
    for i, name in enumerate(kernel.arg_names):
        v = values[name]
        if kernel.params[i].is_constexpr:
            sig[name] = "constexpr"
            consts[(i,)] = v
        elif isinstance(v, str):
            sig[name] = v
        elif isinstance(v, bool):
            sig[name] = "i1"
        elif isinstance(v, int):
            sig[name] = "i32"
        else:
            sig[name] = "fp32"
    src = ASTSource(kernel, sig, consts)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if config.maxnreg:
        options["maxnreg"] = config.maxnreg
    compiled = triton.compile(src, target=TARGET, options=options)
    return compiled.metadata.shared


def cases(full: bool):
    dts = ("fp16", "bf16")
    for dt in dts:
        p = "*" + dt
        for g, d, bs in ([(16, 128, 32), (4, 64, 32)] if full else [(16, 128, 32)]):
            yield cmp_op, cmp_op.nsa_compressed_fwd_kernel, dict(
                q_ptr=p, k_ptr=p, v_ptr=p, o_ptr=p, lse_ptr=p, offsets_ptr="*i32", chunk_offsets_ptr="*i32",
                tok_ptr="*i32", num_tokens=1000, num_seqs=3, qk_scale=0.1, stride_qt=4096, stride_qh=128,
                stride_kc=256, stride_kh=128, stride_vc=256, stride_vh=128, stride_ot=4096, stride_oh=128,
                stride_lt=32, G=g, GP=triton.next_power_of_2(g), DK=d, DV=d, BDK=d, BDV=d, BS=bs)
        for g, d, bs, s in ([(16, 128, 64, 32), (32, 64, 32, 8), (16, 128, 32, 5)] if full else [(16, 128, 32, 16)]):
            yield topk_op, topk_op.nsa_topk_kernel, dict(
                q_ptr=p, k_ptr=p, bi_ptr="*i32", offsets_ptr="*i32", chunk_offsets_ptr="*i32", tok_ptr="*i32",
                num_tokens=1000, num_seqs=3, scale=0.1, stride_qt=4096, stride_qh=128, stride_kc=256,
                stride_kh=128, stride_bt=32, stride_bh=16, G=g, GP=triton.next_power_of_2(g), D=d,
                BD=d, BS=bs, S=s, SP=triton.next_power_of_2(s))
        for g, d, bs, sel, causal in ([(16, 64, 32, 4, True), (16, 128, 32, 8, False), (4, 80, 16, 4, True)]
                                      if full else [(16, 64, 32, 4, True), (16, 128, 32, 8, False)]):
            yield sel_op, sel_op.nsa_varlen_fwd_kernel, dict(
                q_ptr=p, k_ptr=p, v_ptr=p, k_desc=p, v_desc=p, o_ptr=p, bi_ptr="*i32", bc_ptr="*i32",
                offsets_ptr="*i32", tok_ptr="*i32", num_tokens=1000, qk_scale=0.1, stride_qt=4096, stride_qh=128,
                stride_kt=256, stride_kh=128, stride_vt=256, stride_vh=128, stride_ot=4096, stride_oh=128,
                stride_bit=32, stride_bih=16, stride_bct=2, stride_bch=1, G=g, GP=max(16, triton.next_power_of_2(g)),
                D=d, BD=max(16, triton.next_power_of_2(d)), BS=bs, SEL=sel, SELP=triton.next_power_of_2(sel),
                CAUSAL=causal,
                tma=d == triton.next_power_of_2(d))


def main(full: bool) -> int:
    fails = 0
    for op, kernel, args in cases(full):
        for config in op.CONFIGS:
            if not op._valid(config, args):
                continue
            label = f"{kernel.__name__} {args['q_ptr'][1:]} {config.kwargs} w{config.num_warps}"
            try:
                smem = compile_one(kernel, args, config)
                print(f"{label}: ok (shared {smem} B)", flush=True)
            except Exception as e:  # report every failure, not only the first
                fails += 1
                print(f"{label}: FAIL {type(e).__name__}: {e}", flush=True)
    print(f"FAILS {fails}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(full="--full" in sys.argv))
