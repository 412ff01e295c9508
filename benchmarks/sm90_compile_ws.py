"""Compile the Gluon warp-specialized flash forward (``flash_fwd/ws_kernel.py``) for sm_90 without a GPU and report
what ptxas says (registers, spills, shared memory, wgmma, loop SASS), per head dim / layout / tile. Exit status 1 on a
compile error or shared memory over the sm_90 limit.

    PYTHONPATH=. python -m benchmarks.sm90_compile_ws
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "0"  # before attnops / triton: build real JIT functions

import math  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from triton.runtime.jit import mangle_type  # noqa: E402

from attnops.attn_core.flash_fwd import ws_launch  # noqa: E402
from attnops.attn_core.flash_fwd.ws_kernel import gqa_fwd_ws_kernel  # noqa: E402

DENSE, VARLEN, PAGED = 0, 1, 2  # ws_kernel's LAYOUT values

from .sm90_compile import compile_sm90, report_variants  # noqa: E402

PACKED_GROUP = 4  # query heads per KV head of the packed builds (llama-8b's)


def _desc_type(dtype, block, d: int, box_rows: int | None = None) -> str:
    """The JIT's signature string of a host descriptor over a [rows, H·D] view (a CPU tensor stands in), boxes of
    ``box_rows`` rows (default the block's) into shared tiles of ``block``."""
    t = torch.empty(256, 4 * d, dtype=dtype)
    box = [box_rows or block[0], block[1]]
    return mangle_type(TensorDescriptor.from_tensor(t, box, ws_launch.smem_layout(block, dtype)))


def _packed_q_type(dtype, d: int, group: int) -> str:
    """The signature string of ``ws_launch._packed_q_desc`` over ``[tokens, 4·G heads, D]``."""
    return mangle_type(ws_launch._packed_q_desc(torch.empty(256, 4 * group, d, dtype=dtype), group))


def compile_ws(cfg: ws_launch.WsConfig, d: int, layout: int, dtype=torch.float16, page_size: int = 64,
               softcap: bool = False, fp8: bool = False, group: int = PACKED_GROUP, splits: bool = False):
    """``fp8``: e4m3 q / k descriptors (``dtype`` is then V's and the output's); ``group``: the query heads per KV
    head a ``pack_gqa`` config packs; ``splits``: paged items with split blocks (``ws_launch.PagedSplits``)."""
    kv_box = math.gcd(page_size, cfg.block_n) if layout == PAGED else None
    qk_dtype = torch.float8_e4m3fn if fp8 else dtype
    pack = ws_launch.heads_per_tile(cfg, group)
    types = {"q_desc": _packed_q_type(qk_dtype, d, pack) if pack > 1 else _desc_type(qk_dtype, [64, d], d),
             "k_desc": _desc_type(qk_dtype, [cfg.block_n, d], d, kv_box),
             "v_desc": _desc_type(dtype, [cfg.block_n, d], d, kv_box),
             "o_ptr": "*fp16" if dtype == torch.float16 else "*bf16", "cu_q_ptr": "*i32", "kv_ptr": "*i32",
             "items_ptr": "*i32", "order_ptr": "*i32", "table_ptr": "*i32", "sink_ptr": "*fp32",
             "q_scale_ptr": "*fp32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32", "part_o_ptr": "*fp32",
             "part_lse_ptr": "*fp32"}
    consts = {"LAYOUT": layout, "KV_PLUS_Q": False, "PAGE_SIZE": page_size if layout == PAGED else 1,
              "BLOCK_M": ws_launch.BLOCK_M, "BLOCK_N": cfg.block_n, "HEAD_DIM": d, "STAGES": cfg.stages,
              "OVERLAP": cfg.overlap, "PINGPONG": cfg.pingpong, "Q_BUFS": ws_launch.q_buffers(d),
              "BLOCK_MAJOR": layout == DENSE, "SOFTCAP": softcap, "HAS_SINK": softcap,
              "SORT_B": 64 if cfg.lpt and layout == VARLEN else 0,
              "TAIL_IN_PLACE": layout == PAGED and ws_launch.tail_in_place(cfg, d), "FP8": fp8, "PACK": pack,
              "THREAD_RELEASE": cfg.thread_release, "SPLITS": splits, "K_EARLY": cfg.early_k_release,
              "Q_REGS": 0 if fp8 else min(cfg.q_registers, d),
              "LAZY_RESCALE": ws_launch.lazy_rescale_applies(cfg, kv_box),
              "_float_args": ("qk_scale", "cap_scale", "cap_log2")}
    return compile_sm90(gqa_fwd_ws_kernel, types, consts, num_warps=4, num_stages=1, source=GluonASTSource)


# (layout, name, page size, softcap and sinks, fp8 q / k, split blocks): paged pools of whole-tile pages and of
# 48-token pages (16-row copies), and with split blocks (unpacked configs); the softcap + sinks build on varlen; fp8
# on varlen (with softcap + sinks) and dense
VARIANTS = ((VARLEN, "varlen", 64, False, False, False), (DENSE, "dense", 64, False, False, False),
            (PAGED, "paged", 64, False, False, False), (PAGED, "pag48", 48, False, False, False),
            (PAGED, "p-split", 64, False, False, True), (VARLEN, "v-cap", 64, True, False, False),
            (VARLEN, "v-fp8", 64, False, True, False), (VARLEN, "v-f8cap", 64, True, True, False),
            (DENSE, "d-fp8", 64, False, True, False))


# Builds allowed to spill (2026-12-04, Triton 3.6; where, from cuobjdump): the split builds at D = 256, 36-104 B: a
# few values stored once and reloaded once a tile in the consumers (their key loops stay spill-free); in ws-n32s3 /
# n32s4 / n64s2-ov also one or two local loads in the 1-warp loader's key-tile loop (the loop with the UTMALDGs),
# which waits on the ring anyway; the pingpong build (qwen35-9b-rope's) has none in any loop. D = 128
# ws-n128s2-ov-kr over 48-token pages (and -kr-l, the same build: no lazy rescale over 16-row copies,
# ws_launch.lazy_rescale_applies), 160 B: the loader's two passes over a tile's 8 page chunks (K, then V after
# its own wait) at 24 registers, 13-24 local loads and stores a key tile in the loader only; page sizes that hold
# the tile (one chunk) build spill-free. D = 256 ws-n64s2-ov-kr-qr128's split build (2026-12-05), 160 B: a value
# stored and reloaded (LDL.LU) twice a key tile inside the consumers' loops, where every other build of that config
# is spill-free: only a ws_tail plan on that forced config builds it. D = 128 lazy rescale (2026-12-06): the split
# build of ws-n128s2-ov-kr-l / -t-kr-l 36 B (only ws_tail plans build it; off by default), -t-kr-l over 48-token
# pages 112 B (eager there, with per-thread releases; forced only); where was not looked at.
SPILL_ALLOWED = {("p-split", 256, None): 104, ("pag48", 128, "ws-n128s2-ov-kr"): 160,
                 ("pag48", 128, "ws-n128s2-ov-kr-l"): 160, ("pag48", 128, "ws-n128s2-ov-t-kr-l"): 112,
                 ("p-split", 128, "ws-n128s2-ov-kr-l"): 36, ("p-split", 128, "ws-n128s2-ov-t-kr-l"): 36,
                 ("p-split", 256, "ws-n64s2-ov-kr-qr128"): 160}


def allowed_spill(layout_name: str, d: int, cfg: ws_launch.WsConfig) -> int:
    """A config's own allowance first, then the one for every config of that build and head dim."""
    return SPILL_ALLOWED.get((layout_name, d, cfg.name), SPILL_ALLOWED.get((layout_name, d, None), 0))


def variants():
    """(label, build) per head dim / persistent config / layout (paged only for ``paged_configs``)."""
    for d in sorted(ws_launch.CONFIGS):
        for cfg in ws_launch.CONFIGS[d]:
            if not cfg.persistent:  # the same kernel as its persistent twin (only the grid differs)
                continue
            for layout, layout_name, page_size, softcap, fp8, splits in VARIANTS:
                if layout == PAGED and cfg not in ws_launch.paged_configs(d) or splits and cfg.pack_gqa:
                    continue
                yield (f"D{d} {layout_name:7s} {cfg.name:13s}",
                       lambda cfg=cfg, d=d, layout=layout, ps=page_size, cap=softcap, fp8=fp8, splits=splits:
                       compile_ws(cfg, d, layout, page_size=ps, softcap=cap, fp8=fp8, splits=splits),
                       allowed_spill(layout_name, d, cfg))


def main() -> int:
    return 1 if report_variants(variants()) else 0


if __name__ == "__main__":
    sys.exit(main())
