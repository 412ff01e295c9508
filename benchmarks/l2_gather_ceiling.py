"""Ceiling for the NSAVarlenFwd rows: how fast an H200 moves randomly chosen 32-row blocks of an L2-resident
key tensor into the SMs, with the access pattern of the op (one program per token gathering NB blocks of
[32, D] f16; plain vectorized loads, where the op's loop moves them with cp.async) and nothing else.
docs/perf/attn-nsa.md (v4) attributes the 2x4k row's time to this traffic (200 MB of blocks plus q / o per
call); this says whether 5.4 TB/s is the wall or TileOPs' implied 7.1 TB/s is reachable. Timed like the
benchmark (cold L2 before each call, so the first touch of each block comes from HBM, as in the op).

    python -m benchmarks.l2_gather_ceiling --out /tmp/l2-gather.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton
import triton.language as tl

from .timing import L2Flusher, profile_iterations

BLOCK_ROWS = 32  # the page's selection block size


@triton.jit
def gather_blocks_kernel(src_ptr, ids_ptr, out_ptr, row_stride, NB: tl.constexpr, D: tl.constexpr,
                         BS: tl.constexpr, STAGES: tl.constexpr):
    p = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BS)
    cols = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float32)
    for i in tl.range(0, NB, num_stages=STAGES):
        blk = tl.load(ids_ptr + p * NB + i).to(tl.int64)
        x = tl.load(src_ptr + (blk * BS + rows[:, None]) * row_stride + cols[None, :])
        acc += tl.sum(x.to(tl.float32), axis=0)  # every byte feeds the result: nothing is dead code
    tl.store(out_ptr + p * D + cols, acc)


def measure(programs: int, nb: int, d: int, heads: int, warps: int, stages: int, flush: L2Flusher,
            key_rows: int = 8192):
    """``heads`` KV heads interleaved per row as in the op's [T, H_kv, D] keys; the blocks come from head 0."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    src = torch.randn(key_rows, heads, d, device="cuda", dtype=torch.float16, generator=gen)
    ids = torch.randint(0, key_rows // BLOCK_ROWS, (programs, nb), device="cuda", dtype=torch.int32, generator=gen)
    out = torch.empty(programs, d, device="cuda", dtype=torch.float32)

    def run():
        gather_blocks_kernel[(programs,)](src, ids, out, heads * d, NB=nb, D=d, BS=BLOCK_ROWS, STAGES=stages,
                                          num_warps=warps)

    run()
    expected = src[:, 0].float().view(-1, BLOCK_ROWS, d).sum(1)[ids.long()].sum(1)
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-2)  # the kernel read what it claims to
    ms = statistics.median(profile_iterations(run, 50, flush))
    gathered = programs * nb * BLOCK_ROWS * d * src.element_size()
    return {"programs": programs, "nb": nb, "d": d, "heads": heads, "warps": warps, "stages": stages, "ms": ms,
            "gathered_mb": gathered / 1e6, "tb_s": gathered / (ms * 1e-3) / 1e12}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="l2-gather.json")
    args = p.parse_args()
    flush = L2Flusher()
    results = []
    # 2x4k: 8192 tokens x 2.5 blocks x 2 (K and V) ~ 8192 x 5 blocks at D 64, one KV head; ragged: 2048 (token,
    # KV head) pairs x 9 blocks at D 128, two KV heads interleaved
    for programs, nb, d, heads in ((8192, 5, 64, 1), (2048, 9, 128, 2), (2048, 9, 128, 1), (16384, 5, 64, 1)):
        for warps in (1, 2, 4):
            for stages in (1, 2, 3):
                r = measure(programs, nb, d, heads, warps, stages, flush)
                results.append(r)
                print(f"P {programs:6d} NB {nb} D {d:3d} H {heads} w{warps} s{stages}: {r['ms'] * 1e3:7.1f} us "
                      f"{r['gathered_mb']:6.0f} MB {r['tb_s']:5.2f} TB/s", flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
