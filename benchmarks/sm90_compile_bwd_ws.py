"""Compile GQABwd's Gluon warp-specialized kernels (``gqa_bwd/ws_kernel.py`` dK / dV, ``ws_dq_kernel.py`` dQ) for
sm_90 without a GPU and report what ptxas says (registers, spills, shared memory, wgmma), per kernel / head dim /
ring slots / mask / dtype. Exit status 1 on a compile error, a spill (past the one variant's allowance) or shared
memory over the sm_90 limit.

    PYTHONPATH=. python -m benchmarks.sm90_compile_bwd_ws
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import sys  # noqa: E402

import torch  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from triton.runtime.jit import mangle_type  # noqa: E402

from attnops.attn_core.gqa_bwd import ws_launch  # noqa: E402
from attnops.attn_core.gqa_bwd.ws_dq_kernel import gqa_bwd_dq_ws_kernel  # noqa: E402
from attnops.attn_core.gqa_bwd.ws_kernel import gqa_bwd_dkdv_ws_kernel  # noqa: E402

from .sm90_compile import compile_sm90, report_variants  # noqa: E402

PERSISTENT_CAUSAL_SPILL = 8  # bytes: see variants()


def _desc_type(dtype: torch.dtype, d: int, rows: int) -> str:
    """The JIT's signature string of a host descriptor over [N, 8·D] in [rows, D] boxes (a CPU tensor)."""
    box = [rows, d]
    layout = gl.NVMMASharedLayout.get_default_for(box, gl.float16 if dtype == torch.float16 else gl.bfloat16)
    return mangle_type(TensorDescriptor.from_tensor(torch.empty(256, 8 * d, dtype=dtype), box, layout))


def compile_dkdv(d: int, stages: int, causal: bool, dtype=torch.bfloat16, partial: bool = False,
                 persistent: bool = False, early_scores: bool = False):
    pair, keys = _desc_type(dtype, d, ws_launch.pair_rows(d)), _desc_type(dtype, d, 64)
    out = "*fp16" if dtype == torch.float16 else "*bf16"
    types = {"q_desc": pair, "do_desc": pair, "k_desc": keys, "v_desc": keys, "lse_ptr": "*fp32",
             "delta_ptr": "*fp32", "dk_ptr": out, "dv_ptr": out, "part_ptr": "*fp32"}
    consts = {"HEAD_DIM": d, "BLOCK_M": ws_launch.pair_rows(d), "STAGES": stages, "IS_CAUSAL": causal,
              "PARTIAL": partial, "PERSISTENT": persistent, "EARLY_SCORES": early_scores,
              "_float_args": ("qk_scale", "sm_scale")}
    return compile_sm90(gqa_bwd_dkdv_ws_kernel, types, consts, num_warps=4, num_stages=1, source=GluonASTSource)


def compile_dq(d: int, stages: int, causal: bool, dtype=torch.bfloat16, early_scores: bool = False):
    tiles = _desc_type(dtype, d, 64)
    types = {"q_desc": tiles, "do_desc": tiles, "k_desc": tiles, "v_desc": tiles, "lse_ptr": "*fp32",
             "delta_ptr": "*fp32", "dq_ptr": "*fp16" if dtype == torch.float16 else "*bf16"}
    consts = {"HEAD_DIM": d, "STAGES": stages, "IS_CAUSAL": causal, "EARLY_SCORES": early_scores,
              "_float_args": ("qk_scale", "sm_scale")}
    return compile_sm90(gqa_bwd_dq_ws_kernel, types, consts, num_warps=4, num_stages=1, source=GluonASTSource)


def variants():
    """(label, build) per kernel the configs use: dK / dV at every slot count (and with head-subgroup partials), dQ
    at those of ``gluon_dq``."""
    kernels = [("dkdv", compile_dkdv, s) for s in sorted({c.stages for c in ws_launch.WS_CONFIGS})]
    kernels += [("dq", compile_dq, s) for s in sorted({c.stages for c in ws_launch.WS_CONFIGS if c.gluon_dq})]
    for d in ws_launch.HEAD_DIMS:
        for kernel, build, stages in kernels:
            for causal in (True, False):
                for dtype in (torch.bfloat16, torch.float16):
                    label = f"{kernel:4s} D{d} s{stages} {'causal' if causal else 'full':6s} {str(dtype)[6:]:8s}"
                    yield label, lambda build=build, d=d, s=stages, c=causal, t=dtype: build(d, s, c, t)
        # head-subgroup partial sums (``launch.forced(cfg, splits=s)``): the dK / dV kernel's other epilogue
        for stages in sorted({c.stages for c in ws_launch.WS_CONFIGS}):
            yield (f"dkdv D{d} s{stages} causal bf16 partial",
                   lambda d=d, s=stages: compile_dkdv(d, s, True, torch.bfloat16, partial=True))
        # the persistent dK / dV kernel (two K / V buffers, tiles walked per program), both epilogues; the causal
        # 16-bit one may spill 8 B (a scalar reloaded once a tile since the 16-byte dK / dV stores: ws_kernel.py)
        for stages in sorted({c.stages for c in ws_launch.WS_CONFIGS if c.persistent}):
            for causal, partial in ((True, False), (False, False), (True, True)):
                yield (f"dkdv D{d} s{stages} {'causal' if causal else 'full':6s} bf16 persistent"
                       f"{' partial' if partial else ''}",
                       lambda d=d, s=stages, c=causal, pt=partial: compile_dkdv(d, s, c, torch.bfloat16, partial=pt,
                                                                                persistent=True),
                       PERSISTENT_CAUSAL_SPILL if causal and not partial else 0)
        # the ``-e`` configs (``ws-s3-p-e``: the long MHA rows' default), both masks, bf16 (labelled without
        # "persistent": the test counts those lines): their dK / dV builds and the dQ build at each of their slot counts
        early = [c for c in ws_launch.WS_CONFIGS if c.early_scores]
        for causal in (True, False):
            mask = "causal" if causal else "full  "
            for c in early:
                yield (f"dkdv D{d} s{c.stages} {mask} bf16 early{'-p' if c.persistent else ''}",
                       lambda d=d, c=c, m=causal: compile_dkdv(d, c.stages, m, torch.bfloat16, persistent=c.persistent,
                                                               early_scores=True),
                       PERSISTENT_CAUSAL_SPILL if c.persistent and causal else 0)
            for stages in sorted({c.stages for c in early if c.gluon_dq}):
                yield (f"dq   D{d} s{stages} {mask} bf16 early",
                       lambda d=d, s=stages, m=causal: compile_dq(d, s, m, torch.bfloat16, early_scores=True))


def main() -> int:
    return 1 if report_variants(variants()) else 0


if __name__ == "__main__":
    sys.exit(main())
