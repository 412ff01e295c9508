"""Compile the paged attention kernels (GQAPagedFwd / MHADecodePaged / GQAPrefillPaged) for sm_90 without a
GPU and report what ptxas says: registers, spill bytes, shared memory, wgmma, software pipelining, for every
tile config of ``gqa_paged_fwd.plan.CONFIGS`` (with the latency and merged tables; or the tuning candidates with
``--all``) and the feature
variants the seed rows use. Exit status 1 on a compile error or shared memory over the sm_90 limit.

    python -m benchmarks.sm90_compile_paged            # CONFIGS x feature variants
    python -m benchmarks.sm90_compile_paged --all      # + tune_attn_core_paged.CANDIDATES
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from attnops.attn_core.gqa_paged_fwd.kernel import (  # noqa: E402
    paged_attention_combine_kernel,
    paged_attention_kernel,
)
from attnops.attn_core.gqa_paged_fwd.plan import (  # noqa: E402
    CONFIGS,
    LATENCY_CONFIGS,
    LONG_SPLIT_CONFIGS,
    MERGED_CONFIGS,
    decode_residency,
)
from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.kernel import (  # noqa: E402
    paged_append_kernel,
    paged_stage_kernel,
)

from .sm90_compile import SM90_SMEM, compile_sm90, ptxas_report, resident_per_sm  # noqa: E402

FLOATS = ("qk_scale", "cap_scale", "cap_log2")


def claimed_residency(d: int, kw: dict) -> int:
    """What ``plan.decode_residency`` assumes of a small-class variant (page size 64 where it reads one page a
    tile, else 16)."""
    return decode_residency(d, 64 if kw.get("tile_in_page") else 16, bool(kw.get("rope_q") or kw.get("rope_pool")),
                            kw.get("kv") == "fp8e4nv")


def compile_attention(cfg, d: int, act: str = "fp16", kv: str | None = None, q_fp8: bool = False,
                      new: bool = False, rope_q: bool = False, rope_pool: bool = False, rope_new: bool = False,
                      interleaved: bool = False, softcap: bool = False, sinks: bool = False,
                      rotary_dim: int | None = None, fused: bool = False, tile_in_page: bool = False,
                      page_shift: int = -1):
    kv = kv or act
    q = "fp8e4nv" if q_fp8 else act
    ptrs = {"q_ptr": f"*{q}", "k_ptr": f"*{kv}", "v_ptr": f"*{kv}", "kn_ptr": f"*{act}", "vn_ptr": f"*{act}",
            "o_ptr": f"*{act}", "table_ptr": "*i32", "cache_len_ptr": "*i32", "cu_q_ptr": "*i32",
            "items_ptr": "*i32", "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "counter_ptr": "*i32",
            "q_scale_ptr": "*fp32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32", "sinks_ptr": "*fp32",
            "cos_ptr": f"*{act}", "sin_ptr": f"*{act}"}
    consts = {"HAS_NEW": new, "Q_FP8": q_fp8, "KV_FP8": kv == "fp8e4nv", "ROPE_Q": rope_q, "ROPE_POOL_K": rope_pool,
              "ROPE_NEW_K": rope_new, "ROTARY_DIM": rotary_dim or (d // 2 if interleaved else d),
              "INTERLEAVED": interleaved,
              "SOFTCAP": softcap, "HAS_SINKS": sinks, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
              "BLOCK_D": d, "EXACT_DOT": False, "FUSED_COMBINE": fused,
              "TILE_IN_PAGE": tile_in_page, "PAGE_SHIFT": page_shift, "_float_args": FLOATS}
    consts = {k: v for k, v in consts.items() if k in paged_attention_kernel.arg_names or k.startswith("_")}
    return compile_sm90(paged_attention_kernel, ptrs, consts, cfg.num_warps, cfg.num_stages)


def variants():
    """(label, kind, d, kwargs): the constexpr paths the seed rows and tests build."""
    for d in (64, 128, 256):
        yield "plain", d, {}
        yield "bf16", d, {"act": "bf16"}
        yield "softcap+sinks", d, {"softcap": True, "sinks": True}
        yield "fused-combine+sinks", d, {"sinks": True, "fused": True}
        yield "tile-in-page", d, {"tile_in_page": True}
        yield "tile-in-page+softcap+sinks+fused-bf16", d, {"tile_in_page": True, "act": "bf16", "softcap": True,
                                                            "sinks": True, "fused": True}
        yield "pow2-pages", d, {"page_shift": 4}
        yield "tile-in-page+rope", d, {"tile_in_page": True, "rope_q": True, "rope_pool": True}
        yield "rope-neox", d, {"rope_q": True, "rope_pool": True}
        yield "rope-interleaved-R/2", d, {"rope_q": True, "rope_pool": True, "interleaved": True}
        yield "fp8-pool", d, {"kv": "fp8e4nv"}
        yield "fp8-q+pool", d, {"q_fp8": True, "kv": "fp8e4nv"}
        yield "prefill-op", d, {"new": True}
        yield "prefill-op+rope", d, {"new": True, "rope_q": True, "rope_new": True}
        yield "prefill-op+rope-R64", d, {"new": True, "rope_q": True, "rope_new": True, "rotary_dim": 64}
        yield "prefill-op+fp8+softcap", d, {"new": True, "kv": "fp8e4nv", "softcap": True}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="also the tuning candidates")
    p.add_argument("--dims", default="64,128,256")
    p.add_argument("--variants", default="", help="only variants whose label contains this")
    args = p.parse_args(argv)
    dims = {int(x) for x in args.dims.split(",")}
    configs = {**CONFIGS, **{(k, "latency"): c for k, c in LATENCY_CONFIGS.items()},
               **{(k, "long-split"): c for k, c in LONG_SPLIT_CONFIGS.items()},
               **{(k, "merged"): c for k, c in MERGED_CONFIGS.items()}}
    if args.all:
        from .tune_attn_core_paged import CANDIDATES

        configs = {**{(k, i): c for k, cs in CANDIDATES.items() for i, c in enumerate(cs)},
                   **{(k, "default"): c for k, c in CONFIGS.items()}}
    bad = 0
    for key, cfg in configs.items():
        kind, d = (key[0] if isinstance(key[0], str) else key[0][0]), (key[1] if isinstance(key[0], str) else key[0][1])
        if d not in dims:
            continue
        for label, vd, kw in variants():
            if vd != d or args.variants not in label:
                continue
            name = f"{kind}-d{d} {cfg.block_m}x{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"
            t0 = time.perf_counter()
            try:
                r = ptxas_report(compile_attention(cfg, d, **kw))
            except Exception as e:  # a compile error is a finding
                bad += 1
                print(f"{name:30s} {label:24s} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            flag = (" SPILL" if r["spill"] > 0 else "") + ("" if r["pipelined"] else " NOT-PIPELINED")
            flag += " WGMMA-SERIALIZED" if r["serialized"] else ""
            if r["smem"] > SM90_SMEM:
                flag += " SMEM"
                bad += 1
            # the decode split rule counts on this many programs per SM (plan.decode_residency)
            if key in CONFIGS and kind == "small" and resident_per_sm(r, cfg.num_warps) < claimed_residency(d, kw):
                flag += f" RESIDENCY {resident_per_sm(r, cfg.num_warps)} < {claimed_residency(d, kw)}"
                bad += 1
            print(f"{name:30s} {label:24s} regs {r['regs']:3d} spill {r['spill']:5d} B smem {r['smem'] / 1024:6.1f} KB "
                  f"wgmma {str(r['wgmma']):5s} ld.b16 {r['ldg16']:3d} loop {r['loop_sass']:4d} SASS "
                  f"({time.perf_counter() - t0:4.1f}s){flag}",
                  flush=True)
    for d in sorted(dims):
        for bm in sorted({c.block_m for c in CONFIGS.values()}):
            ptrs = {"o_ptr": "*fp16", "cu_q_ptr": "*i32", "combine_ptr": "*i32", "part_o_ptr": "*fp32",
                    "part_lse_ptr": "*fp32", "sinks_ptr": "*fp32"}
            try:
                r = ptxas_report(compile_sm90(paged_attention_combine_kernel, ptrs,
                                              {"HAS_SINKS": True, "BLOCK_M": bm, "BLOCK_R": min(16, bm),
                                               "BLOCK_D": d}, 4, 2))
                print(f"combine-d{d} BM{bm:<3d} regs {r['regs']:3d} spill {r['spill']:5d} B", flush=True)
            except Exception as e:
                bad += 1
                print(f"combine-d{d} BM{bm} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
        for rope, quant, stage in ((False, False, False), (True, False, False), (False, True, False),
                                   (True, True, False), (True, True, True)):
            ptrs = {"kn_ptr": "*fp16", "vn_ptr": "*fp16", "kp_ptr": "*fp8e4nv" if quant else "*fp16",
                    "vp_ptr": "*fp8e4nv" if quant else "*fp16", "ks_ptr": "*fp16", "vs_ptr": "*fp16",
                    "table_ptr": "*i32", "cache_len_ptr": "*i32",
                    "cu_q_ptr": "*i32", "items_ptr": "*i32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32",
                    "cos_ptr": "*fp16", "sin_ptr": "*fp16"}
            name = f"append-d{d} rope={rope} fp8={quant} stage={stage}"
            try:
                r = ptxas_report(compile_sm90(paged_append_kernel, ptrs, {"ROPE": rope, "ROTARY_DIM": d,
                                                                          "QUANT": quant, "STAGE": stage,
                                                                          "BLOCK_T": 32, "BLOCK_D": d}, 4, 1))
                print(f"{name} regs {r['regs']:3d} spill {r['spill']:5d} B", flush=True)
            except Exception as e:
                bad += 1
                print(f"{name} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        ptrs = {"kp_ptr": "*fp8e4nv", "vp_ptr": "*fp8e4nv", "ks_ptr": "*bf16", "vs_ptr": "*bf16", "table_ptr": "*i32",
                "cache_len_ptr": "*i32", "cu_q_ptr": "*i32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32"}
        try:
            r = ptxas_report(compile_sm90(paged_stage_kernel, ptrs, {"BLOCK_T": 32, "BLOCK_D": d}, 4, 1))
            print(f"stage-d{d} regs {r['regs']:3d} spill {r['spill']:5d} B", flush=True)
        except Exception as e:
            bad += 1
            print(f"stage-d{d} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
