"""Compile every attn-mla kernel variant for sm_90 without a GPU and report what ptxas says.

For each op, each launch config of ``op.CONFIGS`` (the interpreter ones too: the GPU tests run every
config) and each constexpr path the seed rows use (dtype, head dims, split, rope tail, top-k size),
Triton's NVIDIA pipeline runs down to a cubin with the bundled ptxas. Integer arguments are specialized
as a real launch would be, from representative seed-row values: 1 becomes a constant, multiples of 16 get
``tt.divisibility = 16``, pointers are 16-byte aligned; without that Triton neither vectorizes nor
pipelines the loads. Prints registers, spill bytes, shared memory, wgmma and cp.async use; flags
compile errors, spills, shared memory over 227 KB and unpipelined loads.

    python -m benchmarks.sm90_compile_attn_mla            # every variant (a few minutes on 2 cores)
    python -m benchmarks.sm90_compile_attn_mla --op mla   # one op: topk, indexer, mla, mla-ws, dsa, dsa-ws
    python -m benchmarks.sm90_compile_attn_mla --ones     # every int argument 1 (a constant at launch)
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from triton.runtime.jit import mangle_type  # noqa: E402

from attnops.attn_mla.dsa_decode_with_kvcache_fwd import op as dsa_op  # noqa: E402
from attnops.attn_mla.dsa_decode_with_kvcache_fwd import ws_launch as dsa_ws  # noqa: E402
from attnops.attn_mla.dsa_decode_with_kvcache_fwd.kernel import dsa_decode_kernel, dsa_prepare_indices_kernel  # noqa: E402
from attnops.attn_mla.dsa_decode_with_kvcache_fwd.ws_kernel import dsa_decode_ws_kernel  # noqa: E402
from attnops.attn_mla.fp8_lightning_indexer_fwd import op as indexer_op  # noqa: E402
from attnops.attn_mla.fp8_lightning_indexer_fwd.kernel import lightning_indexer_kernel  # noqa: E402
from attnops.attn_mla.mla_decode_with_kvcache_fwd import op as mla_op  # noqa: E402
from attnops.attn_mla.mla_decode_with_kvcache_fwd import ws_launch as mla_ws  # noqa: E402
from attnops.attn_mla.mla_decode_with_kvcache_fwd.kernel import mla_decode_kernel  # noqa: E402
from attnops.attn_mla.mla_decode_with_kvcache_fwd.ws_kernel import mla_decode_ws_kernel  # noqa: E402
from attnops.attn_mla.topk_select_fwd import op as topk_op  # noqa: E402
from attnops.attn_mla.topk_select_fwd.kernel import (  # noqa: E402
    topk_select_kernel,
    topk_split_histogram_kernel,
    topk_split_rank_kernel,
    topk_split_select_kernel,
)

from .sm90_compile import SM90_SMEM, ptxas_report, resident_per_sm  # noqa: E402

ALL_ONES = False  # --ones: Triton turns an int argument equal to 1 into a constant; code calling .to on it breaks


def compile_sm90(fn, pointers: dict[str, str], ints: dict[str, int], constexprs: dict, num_warps: int,
                 num_stages: int, floats=(), maxnreg=None, source=ASTSource):
    """``pointers``: pointer (or TMA descriptor) types by name; ``source``: ``GluonASTSource`` for Gluon."""
    if ALL_ONES:
        ints = {n: 1 for n in fn.arg_names if n not in pointers and n not in constexprs and n not in floats}
    sig, consts, attrs = {}, dict(constexprs), {}
    for i, (name, prm) in enumerate(zip(fn.arg_names, fn.params)):
        if prm.is_constexpr:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in floats:
            sig[name] = "fp32"
        elif ints.get(name) == 1:
            sig[name] = "constexpr"
            consts[name] = 1
        else:
            sig[name] = "i32"
            if ints.get(name, 0) % 16 == 0 and name in ints:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = source(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages,
                                   **({"maxnreg": maxnreg} if maxnreg else {})})


def topk_variants():
    ints = dict(num_rows=32768, S=32768, G=1, S_kv=65536, topk=2048, stride_sb=2**31 - 16, stride_ss=65536,
                stride_st=1, stride_sg=1, stride_wb=32768, stride_ws=1, stride_eb=32768, stride_es=1)
    ptrs = {"score_ptr": "*fp32", "scratch_ptr": "*i64", **{n: "*i32" for n in ("starts_ptr", "ends_ptr", "out_ptr")}}
    for name, cfg in topk_op.CONFIGS.items():
        if cfg.split_chunk:
            yield from topk_split_variants(name, cfg)
            continue
        for k in (1024, 2048):
            cx = dict(BLOCK=cfg.block, STAGES=cfg.stages, CAP=cfg.cap(k), SAMPLES=cfg.samples,
                      SLACK_NUM=cfg.slack[0], SLACK_DEN=cfg.slack[1], FULL_ONLY=cfg.full_only(k), RADIX=cfg.radix)
            yield f"topk {name} k={k}", lambda cx=cx, cfg=cfg: compile_sm90(
                topk_select_kernel, ptrs, ints, cx, cfg.num_warps, cfg.stages, maxnreg=cfg.maxnreg), cfg


def topk_split_variants(name, cfg):
    """The split path's kernels on the decode row (1 × 16384 keys; the rank launch's third where the config has it):
    NOT-PIPELINED is expected (one chunk per program, no streaming loop)."""
    s_kv = 16384
    ints = dict(row0=0, S=1, G=1, S_kv=s_kv, topk=2048, stride_sb=s_kv, stride_ss=s_kv, stride_st=1, stride_sg=1,
                stride_wb=1, stride_ws=1, stride_eb=1, stride_es=1)
    ptrs = {"score_ptr": "*fp32", "cand_ptr": "*i64", **{n: "*i32" for n in (
        "starts_ptr", "ends_ptr", "out_ptr", "hist_ptr", "counter_ptr")}}
    cx = dict(CHUNK=cfg.split_chunk, HIST_BITS=cfg.hist_bits)
    yield f"topk {name} histogram", lambda: compile_sm90(topk_split_histogram_kernel, ptrs, ints, cx,
                                                           cfg.num_warps, 1), cfg
    for k in (1024, 2048):
        sel = dict(cx, CAP=cfg.cap(k), BLOCK=cfg.block, RADIX=cfg.radix, RANK_LAUNCH=cfg.rank_launch)
        yield f"topk {name} select k={k}", lambda sel=sel, k=k: compile_sm90(
            topk_split_select_kernel, ptrs, dict(ints, topk=k), sel, cfg.num_warps, 1), cfg
        if cfg.rank_launch:
            rank = dict(HIST_BITS=cfg.hist_bits, CAP=cfg.cap(k), BLOCK=cfg.block, SLICE=cfg.rank_slice,
                        RANK_BLOCK=cfg.rank_block)
            yield f"topk {name} rank k={k}", lambda rank=rank, k=k: compile_sm90(
                topk_split_rank_kernel, ptrs, dict(ints, topk=k), rank, cfg.num_warps, 1), cfg


def indexer_variants():
    for dtype, d, scale in (("fp8e4nv", 128, True), ("fp8e4nv", 64, False), ("bf16", 64, False)):
        h = 64 if d == 128 else 32
        ints = dict(S=4096, S_kv=65536, G=1, heads_per_group=h, stride_qb=4096 * h * d, stride_qs=h * d,
                    stride_kb=65536 * d, stride_kt=d, stride_kg=d, stride_ws=h, stride_wh=1, stride_sb=65536,
                    stride_st=1, stride_sg=1, stride_ob=4096 * 65536, stride_os=65536, stride_ot=1, stride_og=1)
        ptrs = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "w_ptr": "*fp32", "ks_ptr": "*i32", "ke_ptr": "*i32",
                "k_scale_ptr": "*fp32", "out_ptr": "*fp32"}
        for name, cfg in indexer_op.CONFIGS.items():
            cx = dict(D=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, NUM_STAGES=cfg.num_stages, HAS_SCALE=scale,
                      CLEAN=True, UPCAST=False)
            yield f"indexer {name} {dtype} D={d}", lambda cx=cx, cfg=cfg, ptrs=ptrs, ints=ints: compile_sm90(
                lightning_indexer_kernel, ptrs, ints, cx, cfg.num_warps, cfg.num_stages)


def mla_variants():
    for dtype in ("bf16", "fp16"):
        ptrs = {n: f"*{dtype}" for n in ("q_ptr", "q_pe_ptr", "k_ptr", "k_pe_ptr", "out_ptr")}
        ptrs.update(part_o_ptr="*fp32", part_lse_ptr="*fp32", counter_ptr="*i32")
        ints = dict(H=128, N_kv=4096, group_size=128, head_blocks_per_kv=2, split_len=4096, num_splits=16,
                    stride_qb=128 * 512, stride_qh=512, stride_pb=128 * 64, stride_ph=64, stride_kb=4096 * 512,
                    stride_kt=512, stride_kh=512, stride_eb=4096 * 64, stride_et=64, stride_eh=64,
                    stride_ob=128 * 512, stride_oh=512)
        for name, cfg in mla_op.CONFIGS.items():
            for split, fused in ((False, False), (True, False), (True, True)):
                cx = dict(D=512, PE=64, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, SPLIT=split,
                          NUM_STAGES=cfg.num_stages, FUSED_COMBINE=fused)
                label = f"mla {name} {dtype} split={split}" + (" fused" if fused else "")
                yield label, lambda cx=cx, cfg=cfg, ptrs=ptrs, ints=ints: compile_sm90(
                    mla_decode_kernel, ptrs, ints, cx, cfg.num_warps, cfg.num_stages, floats=("qk_scale",))


def _desc_type(dtype: torch.dtype, width: int, box: list[int]) -> str:
    """The JIT's signature string of a host TMA descriptor over a [rows, width] view, or over [4, rows, width]
    for a 3-D box (a CPU tensor stands in)."""
    gl_dtype = gl.float16 if dtype == torch.float16 else gl.bfloat16
    t = torch.empty(*[4] * (len(box) - 2), 256, width, dtype=dtype)
    return mangle_type(TensorDescriptor.from_tensor(t, box, gl.NVMMASharedLayout.get_default_for(box, gl_dtype)))


def mla_ws_variants():
    for dtype in (torch.bfloat16, torch.float16):
        name = "bf16" if dtype == torch.bfloat16 else "fp16"
        for cfg in mla_ws.WS_CONFIGS:
            ptrs = {"q_desc": _desc_type(dtype, 512, [64, 256]), "qpe_desc": _desc_type(dtype, 64, [64, 64]),
                    "k_desc": _desc_type(dtype, 512, [1, cfg.block_n, 256]),
                    "kpe_desc": _desc_type(dtype, 64, [cfg.block_n, 64]), "out_ptr": f"*{name}",
                    "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32"}
            ints = dict(H=128, n_kv=4096, group=128, head_blocks_per_kv=2, split_len=4096, n_splits=16,
                        stride_ob=128 * 512, stride_oh=512)
            for split in (False, True):
                cx = dict(BLOCK_N=cfg.block_n, STAGES=cfg.stages, SPLIT=split, ALTERNATING=cfg.alternating,
                          HALF_READY=cfg.half_ready, THREAD_RELEASE=cfg.thread_release,
                          LAZY_RESCALE=cfg.lazy_rescale)
                yield f"mla-ws {cfg.name} {name} split={split}", lambda cx=cx, ptrs=ptrs, ints=ints: compile_sm90(
                    mla_decode_ws_kernel, ptrs, ints, cx, 4, 1, floats=("qk_scale",), source=GluonASTSource)


def dsa_ws_variants():
    # (dtype, tail, row pitch): the contiguous 576- / 512-wide caches, and rows padded to 584 elements (16 bytes
    # but not 16 elements apart: the strides Triton does not specialize)
    for dtype, tail, pitch in ((torch.bfloat16, 64, 576), (torch.bfloat16, 0, 512), (torch.float16, 64, 576),
                               (torch.bfloat16, 64, 584)):
        name = "bf16" if dtype == torch.bfloat16 else "fp16"
        width = 512 + tail
        for cfg in dsa_ws.WS_CONFIGS:
            if dsa_ws.config_refusal(cfg, tail):  # (refused before any launch: never built)
                continue
            q_desc = _desc_type(dtype, width, [64, 256])
            ptrs = {"q_desc": q_desc, "qpe_desc": _desc_type(dtype, width, [64, tail]) if tail else q_desc,
                    "kv_ptr": f"*{name}", "clean_ptr": "*i32", "count_ptr": "*i32", "out_ptr": f"*{name}"}
            ints = dict(n_items=8192, S=4096, H=128, H_kv=1, group=128, head_blocks_per_kv=2, stride_kb=65536 * pitch,
                        stride_kt=pitch, stride_kh=pitch, stride_ob=4096 * 128 * 512, stride_os=128 * 512,
                        stride_oh=512)
            cx = dict(TAIL=tail, BLOCK_K=2048, BLOCK_N=cfg.block_n, STAGES=cfg.stages, ALTERNATING=cfg.alternating,
                      HALF_READY=cfg.half_ready, THREAD_RELEASE=cfg.thread_release, LAZY_RESCALE=cfg.lazy_rescale,
                      SPLIT_FREE=cfg.split_free)
            yield f"dsa-ws {cfg.name} {name} tail={tail} pitch={pitch}", lambda cx=cx, ptrs=ptrs, ints=ints: \
                compile_sm90(dsa_decode_ws_kernel, ptrs, ints, cx, 4, 1, floats=("qk_scale",), source=GluonASTSource)


def dsa_variants():
    for k, warps in ((512, 4), (1024, 4), (2048, 8)):
        yield f"dsa prepare K={k}", lambda k=k, warps=warps: compile_sm90(
            dsa_prepare_indices_kernel, {"idx_ptr": "*i32", "clean_ptr": "*i32", "count_ptr": "*i32"},
            dict(S=4096, H_kv=1, S_kv=65536, K=k, q_start=61440, stride_kv=1, stride_ib=4096 * k, stride_is=k,
                 stride_ih=k), dict(BLOCK_K=k, CAUSAL=True), warps, 3)
    for dtype, tail in (("bf16", 64), ("bf16", 0), ("fp16", 64)):
        width = 512 + tail
        ptrs = {"q_ptr": f"*{dtype}", "kv_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "clean_ptr": "*i32",
                "count_ptr": "*i32"}
        ints = dict(S=4096, H_kv=1, group_size=128, head_blocks_per_kv=2, stride_qb=4096 * 128 * width,
                    stride_qs=128 * width, stride_qh=width, stride_kb=65536 * width, stride_kt=width,
                    stride_kh=width, stride_ob=4096 * 128 * 512, stride_os=128 * 512, stride_oh=512)
        for name, cfg in dsa_op.CONFIGS.items():
            cx = dict(D=512, TAIL=tail, BLOCK_K=2048, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n,
                      NUM_STAGES=cfg.num_stages)
            yield f"dsa {name} {dtype} tail={tail}", lambda cx=cx, cfg=cfg, ptrs=ptrs, ints=ints: compile_sm90(
                dsa_decode_kernel, ptrs, ints, cx, cfg.num_warps, cfg.num_stages, floats=("qk_scale",))


OPS = {"topk": topk_variants, "indexer": indexer_variants, "mla": mla_variants, "mla-ws": mla_ws_variants,
       "dsa": dsa_variants, "dsa-ws": dsa_ws_variants}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", choices=sorted(OPS), action="append", help="default: all")
    p.add_argument("--ones", action="store_true", help="specialize every int argument to 1")
    args = p.parse_args(argv)
    global ALL_ONES
    ALL_ONES = args.ones
    bad = 0
    for op in args.op or list(OPS):
        for label, build, *cfg in OPS[op]():
            t0 = time.perf_counter()
            try:
                r = ptxas_report(build())
            except Exception as e:  # a compile error is a finding, not a crash of the sweep
                bad += 1
                print(f"{label:42s} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            flag = (" SPILL" if r["spill"] > 0 else "") + (" SMEM" if r["smem"] > SM90_SMEM else "")
            flag += " WGMMA-SERIALIZED" if r["serialized"] else ""
            if "interpreter" not in label and "combine" not in label and "prepare" not in label \
                    and not r["pipelined"]:
                flag += " NOT-PIPELINED"
            if cfg and hasattr(cfg[0], "programs_per_sm") and "interpreter" not in label \
                    and resident_per_sm(r, cfg[0].num_warps) < cfg[0].programs_per_sm:
                flag += f" OCCUPANCY (programs_per_sm {cfg[0].programs_per_sm} > "\
                        f"{resident_per_sm(r, cfg[0].num_warps)} resident)"
            bad += " SMEM" in flag
            print(f"{label:42s} regs {r['regs']:3d} spill {r['spill']:5d} B  smem {r['smem'] / 1024:6.1f} KB  "
                  f"wgmma {str(r['wgmma']):5s} loop {r['loop_sass']:4d} SASS ({time.perf_counter() - t0:4.1f}s){flag}",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
