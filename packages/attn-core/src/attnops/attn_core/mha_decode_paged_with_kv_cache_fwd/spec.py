"""MHADecodePagedWithKVCacheFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import math

import torch

from attnops.attn_core.gqa_paged_fwd.spec import distinct_rows, fill_pool, shrink_lengths, visible_counts
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import mha_decode_paged_with_kv_cache_fwd
from .reference import mha_decode_paged_with_kv_cache_fwd_ref

OP = "MHADecodePagedWithKVCacheFwd"


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row (``build_case``); ``shrink`` keeps at most 3 requests and 4 heads, caches of
    about three pages (a length that was not a page multiple stays so)."""
    batch, s_q, num_heads, d = w.shape("q")
    n_kv = w.shape("k")[0]
    page_size = w.params["page_size"]
    lens = list(w.params["kv_lens"])
    width = w.shape("block_table")[1]
    num_pages = n_kv // page_size
    if shrink:
        _, lens, _ = shrink_lengths([s_q] * len(lens), lens, page_size, max_requests=3)
        num_heads = min(num_heads, 4)
        width = num_pages = None
    return build_case(lens, s_q, num_heads, d, page_size, w.dtypes()[0], device, seed,
                      is_causal=w.params.get("is_causal", False), width=width, num_pages=num_pages, label=w.id)


def build_case(lens, s_q: int, num_heads: int, d: int, page_size: int, dtype, device, seed: int = 0, *,
               is_causal: bool = False, width: int | None = None, num_pages: int | None = None,
               share_pages: bool = False, label: str = "") -> Case:
    """Random q; a NaN-poisoned flat pool with random values only in the rows the lengths reach; a
    shuffled table whose unused columns hold ``UNUSED_PAGE``."""
    gen = testing.generator(seed)
    if width is None:
        width = max([math.ceil(n / page_size) for n in lens] + [0]) + 1
    if num_pages is None:
        num_pages = sum(math.ceil(n / page_size) for n in lens) + 2
    table = testing.block_table(lens, page_size, num_pages, width, gen, "cpu", share=share_pages)
    k = testing.poisoned((num_pages * page_size, num_heads, d), dtype, device)
    v = testing.poisoned((num_pages * page_size, num_heads, d), dtype, device)
    fill_pool(k, table, lens, page_size, gen)
    fill_pool(v, table, lens, page_size, gen)
    inputs = {
        "q": testing.randn((len(lens), s_q, num_heads, d), dtype, device, gen),
        "k": k,
        "v": v,
        "real_seqlen_kv": torch.tensor(lens, dtype=torch.int32, device=device),
        "block_table": table.to(device),
        "page_size": page_size,
        "is_causal": is_causal,
    }
    return Case(inputs, outputs=("o",), label=label, meta={"kv_lens": list(lens), "table": table})


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-4 requests, S_q 1..7 (causal or not), lengths 0, below S_q and off page
    multiples, odd page sizes, H 1..4, D 16..128, shared pages, sometimes an explicit plan with 1-3 splits."""
    gen = testing.generator(seed)
    dtype = random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])
    s_q = random_choice(gen, [1, 1, 2, 4, 7])
    lens = [random_choice(gen, [0, random_int(gen, 1, 8), random_int(gen, 1, 120), random_int(gen, 1, 120)])
            for _ in range(random_int(gen, 1, 4))]
    causal = random_choice(gen, [False, True])
    d = random_choice(gen, [16, 32, 64, 64, 128])
    case = build_case(lens, s_q, random_int(gen, 1, 4), d, random_choice(gen, [1, 7, 16, 32, 128]), dtype, device,
                      seed, is_causal=causal, share_pages=random_choice(gen, [False, False, True]),
                      label=f"fuzz-{seed}")
    splits = random_choice(gen, [None, None, 1, 3])
    if splits is not None:
        from .op import mha_decode_paged_plan

        q = case.inputs["q"]
        case.inputs["plan"] = mha_decode_paged_plan(lens, s_q, q.shape[2], d, is_causal=causal, num_splits=splits,
                                                    device=device)
    return case


def cost(case: Case) -> Cost:
    a = case.inputs
    q = a["q"]
    batch, s_q, num_heads, d = q.shape
    lens = list(case.meta["kv_lens"])  # host copies: also for meta-device (cost-only) cases
    scores = rows = 0
    for n in lens:
        sc, rw = visible_counts(s_q, n, a.get("is_causal", False))
        scores, rows = scores + sc, rows + rw
    n_rows, entries = distinct_rows(case.meta["table"], [(0, n) for n in lens], a["page_size"])
    return Cost(
        flops=attention_flops(num_heads, scores, rows, d, d),
        bytes=2 * nbytes(q) + nbytes(a["real_seqlen_kv"]) + 2 * n_rows * num_heads * d * q.element_size()
        + 4 * entries,
        roof=roof_for(q.dtype),
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    o = out["o"]
    lowp = case.memo(f"lowp-{o.dtype}", lambda: mha_decode_paged_with_kv_cache_fwd_ref(**case.inputs, lowp=o.dtype))
    testing.assert_close_dual("o", o, ref["o"], lowp)


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=mha_decode_paged_with_kv_cache_fwd,
    reference=mha_decode_paged_with_kv_cache_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
)
