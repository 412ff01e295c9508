"""PagedKVCacheGatherFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import math

import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import paged_kv_cache_gather_fwd
from .reference import paged_kv_cache_gather_fwd_ref

OP = "PagedKVCacheGatherFwd"


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row; ``shrink`` keeps at most 5 requests of at most 37 tokens (starts kept
    unaligned) and only the pages they need, for the interpreter."""
    gen = testing.generator(seed)
    dtypes = w.dtypes()
    cache_dtype, dst_dtype = (dtypes[0], dtypes[-1])
    num_pages, page_size, *elem = w.shape("cache")
    lens = list(w.params["seq_lens"])
    starts = list(w.params["starts"]) if w.has("seq_starts") else None
    width = w.shape("block_table")[1]
    if shrink:
        lens = [min(n, 37 - 4 * i) for i, n in enumerate(lens[:5])]
        starts = [s if s < 2 * page_size else 2 * page_size + 3 for s in starts[:5]] if starts else None
    spans = [s + n for s, n in zip(starts or [0] * len(lens), lens)]
    if shrink:
        width = max(math.ceil(s / page_size) for s in spans) + 1  # one unused column per row
        num_pages = sum(math.ceil(s / page_size) for s in spans) + 2
    cache_spread = 100.0 if cache_dtype == E4M3 else 1.0
    inputs = {
        "dst": testing.poisoned((sum(lens), *elem), dst_dtype, device),
        "cache": testing.randn((num_pages, page_size, *elem), cache_dtype, device, gen, scale=cache_spread),
        "block_table": testing.block_table(spans, page_size, num_pages, width, gen, device),
        "cu_seq_lens": testing.cu_seqlens(lens, device),
    }
    if starts is not None:
        inputs["seq_starts"] = torch.tensor(starts, dtype=torch.int32, device=device)
    if cache_dtype == E4M3:
        inputs["scale"] = torch.tensor([0.0173], device=device)
        inputs["out_dtype"] = dst_dtype
    return Case(inputs, outputs=("dst",), inplace=True, label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1..6 requests with lengths 0, 1 and more, unaligned starts, odd page sizes,
    shared pages, any trailing shape, fp8 caches, strided caches."""
    gen = testing.generator(seed)
    sixteen = [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16]
    cache_dtype = random_choice(gen, [*sixteen, E4M3])
    dst_dtype = random_choice(gen, sixteen) if cache_dtype == E4M3 else cache_dtype
    elem = random_choice(gen, [(64,), (576,), (100,), (2, 64), (3, 5)])
    page_size = random_choice(gen, [1, 5, 16, 64])
    batch = random_int(gen, 1, 6)
    lens = [random_choice(gen, [0, 1, random_int(gen, 2, 40)]) for _ in range(batch)]
    starts = [random_int(gen, 0, 2 * page_size) for _ in range(batch)]
    spans = [s + n for s, n in zip(starts, lens)]
    width = max(math.ceil(s / page_size) for s in spans) + 1
    least = sum(math.ceil(s / page_size) for s in spans) // 2 + 1  # fewer than the ranges need: pages shared
    num_pages = random_int(gen, least, max(least, 40))
    fused = testing.randn((num_pages, 2, page_size, *elem), cache_dtype, device, gen, scale=100.0)
    inputs = {
        "dst": testing.poisoned((sum(lens), *elem), dst_dtype, device),
        "cache": fused[:, random_int(gen, 0, 1)],
        "block_table": testing.block_table(spans, page_size, num_pages, width, gen, device, share=True),
        "cu_seq_lens": testing.cu_seqlens(lens, device),
        "seq_starts": torch.tensor(starts, dtype=torch.int32, device=device),
    }
    if cache_dtype == E4M3:
        inputs["scale"] = torch.rand(1, generator=gen).to(device) * 0.05 + 0.001
        inputs["out_dtype"] = dst_dtype
    return Case(inputs, outputs=("dst",), inplace=True, label=f"fuzz-{seed}")


def cost(case: Case) -> Cost:
    dst, cache, table = case.inputs["dst"], case.inputs["cache"], case.inputs["block_table"].cpu().long()
    cu = case.inputs["cu_seq_lens"].cpu().long()
    starts = case.inputs.get("seq_starts")
    starts = starts.cpu().long() if starts is not None else torch.zeros(len(cu) - 1, dtype=torch.long)
    page_size = cache.shape[1]
    row_bytes = math.prod(cache.shape[2:]) * cache.element_size()
    pool_rows, table_entries = set(), 0
    for b in range(len(cu) - 1):
        n = int(cu[b + 1] - cu[b])
        if n == 0:
            continue
        pos = torch.arange(int(starts[b]), int(starts[b]) + n)
        pages = table[b, pos // page_size]
        pool_rows.update((pages * page_size + pos % page_size).tolist())
        table_entries += int(pos[-1] // page_size - pos[0] // page_size) + 1
    metadata = 4 * len(cu) + (4 * (len(cu) - 1) if "seq_starts" in case.inputs else 0)
    scale = 4 if "scale" in case.inputs and dst.shape[0] else 0
    return Cost(
        flops=dst.numel() if cache.dtype == E4M3 else 0,
        bytes=dst.numel() * dst.element_size() + len(pool_rows) * row_bytes + 4 * table_entries + metadata + scale,
        roof="cuda_core.fp32",
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    testing.assert_bitwise("dst", out["dst"], ref["dst"])


SPEC = OpSpec(
    name=OP,
    family="kvcache-ops",
    fn=paged_kv_cache_gather_fwd,
    reference=paged_kv_cache_gather_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    # Copies are bit copies in any dtype; only the fp8 -> bf16 rounding is wrong in the interpreter.
    interpreter_ok=lambda w: w.dtype != "fp8e4m3/bf16",
    fuzz=fuzz,
)
