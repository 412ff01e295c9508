"""Probe (not a benchmark row): GQABwd's preprocess (Δ = rowsum(o·dO)) on the long MHA rows' shapes, the shipped
kernel against a persistent form that keeps the next row block's loads in flight while it reduces the current one.
Each variant is checked against the shipped kernel's Δ, then timed (device time, L2 flushed, median of 50).

    python -m benchmarks.probe_preprocess --out /tmp/probe-preprocess.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton
import triton.language as tl

from attnops.attn_core.gqa_bwd.kernel import gqa_bwd_preprocess_kernel
from attnops.kernel_utils import runtime

from .timing import L2Flusher, profile_iterations


@triton.jit
def _rows(o_ptr, do_ptr, blk, n_rows, ROWS: tl.constexpr, D: tl.constexpr):
    r = blk.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    ok = r < n_rows
    offs = r[:, None] * D + tl.arange(0, D)[None, :]
    return (tl.load(o_ptr + offs, mask=ok[:, None], other=0.0), tl.load(do_ptr + offs, mask=ok[:, None], other=0.0),
            r, ok)


@triton.jit
def preprocess_prefetch_kernel(o_ptr, do_ptr, delta_ptr, n_rows, S, H, ROWS: tl.constexpr, D: tl.constexpr):
    """Rows = (b, s, h) of contiguous [B, S, H, D] o / dO; Δ[b, h, s]. Program p: row blocks p, p + grid, ..., the
    next block's loads issued before the current block's reduction."""
    pid = tl.program_id(0)
    grid = tl.num_programs(0)
    n_blocks = tl.cdiv(n_rows, ROWS)
    o_n, do_n, r_n, ok_n = _rows(o_ptr, do_ptr, pid, n_rows, ROWS, D)
    for blk in range(pid, n_blocks, grid):
        o, do, r, ok = o_n, do_n, r_n, ok_n
        o_n, do_n, r_n, ok_n = _rows(o_ptr, do_ptr, blk + grid, n_rows, ROWS, D)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        h = r % H
        bs = r // H
        tl.store(delta_ptr + ((bs // S) * H + h) * S + bs % S, delta, mask=ok)


def probe_shape(shape, flush, sms) -> dict:
    """Check and time every variant on o / dO of ``shape`` ([B, S, H, D], bf16)."""
    B, S, H, D = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    o = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    do = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    ref = torch.empty((B, H, S), device="cuda", dtype=torch.float32)
    out = torch.full_like(ref, float("nan"))
    st = (o.stride(0), o.stride(1), o.stride(2))

    def shipped(rows, warps, delta):
        heads = min(triton.next_power_of_2(H), rows)
        tokens = rows // heads
        gqa_bwd_preprocess_kernel[(B * triton.cdiv(S, tokens), triton.cdiv(H, heads))](
            o, do, delta, delta, S, H, *st, *st, HEAD_DIM=D, BLOCK_D=D, TOKENS=tokens, HEADS=heads, ZERO_DQ=False,
            LAUNCH_DEPENDENTS=False, num_warps=warps)

    def prefetch(rows, warps, per_sm):
        preprocess_prefetch_kernel[(sms * per_sm,)](o, do, out, B * S * H, S, H, ROWS=rows, D=D, num_warps=warps)

    shipped(64, 4, ref)
    variants = {"shipped-64r-4w": lambda: shipped(64, 4, ref), "shipped-128r-8w": lambda: shipped(128, 8, out)}
    for rows, warps, per_sm in ((64, 4, 4), (64, 4, 8), (128, 8, 2), (128, 8, 4), (32, 2, 8)):
        variants[f"prefetch-{rows}r-{warps}w-{per_sm}x"] = lambda a=(rows, warps, per_sm): prefetch(*a)
    row = {"shape": shape, "bytes": 2 * o.numel() * 2, "us": {}}
    for name, fn in variants.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = 0.0 if name == "shipped-64r-4w" else (out - ref).abs().max().item()
        if not err <= 1e-3 * ref.abs().max().item():
            row["us"][name] = f"FAILED check (max err {err})"
            print(shape, name, row["us"][name], flush=True)
            continue
        for _ in range(5):
            fn()
        t = statistics.median(profile_iterations(fn, 50, flush)) * 1e3
        row["us"][name] = round(t, 2)
        print(f"{str(shape):22s} {name:26s} {t:7.2f} us  {row['bytes'] / t / 1e6:5.2f} TB/s", flush=True)
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    flush = L2Flusher()
    rows = [probe_shape(shape, flush, runtime.num_sms()) for shape in ((2, 2048, 32, 128), (1, 2048, 64, 128))]
    json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
