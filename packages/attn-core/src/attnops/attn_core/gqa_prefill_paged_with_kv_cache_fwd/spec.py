"""GQAPrefillPagedWithKVCacheFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import math

import torch

from attnops.attn_core.gqa_paged_fwd.spec import distinct_rows, fill_pool
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import gqa_prefill_paged_with_kv_cache_fwd
from .reference import gqa_prefill_paged_with_kv_cache_fwd_ref

OP = "GQAPrefillPagedWithKVCacheFwd"

# qwen35-9b-mixed prints 4 of its 8 requests (q_lens [256, 512, 768, 1024], cache_lens [4096 .. 32768]); the
# hidden 4 hold 2048 query tokens. We fill them with 512 tokens each (the only uniform split) over caches
# [32768, 32768, 16384, 12800], chosen so the row's FLOPs reproduce the page's 147 TFLOP/s at 22.73 ms
# (146.7 with this fill; no fill from the visible values matches better than 0.3 %).
HIDDEN_MIXED = ([512, 512, 512, 512], [32768, 32768, 16384, 12800])


def row_lengths(w: Workload) -> tuple[list[int], list[int]]:
    q_lens, cache_lens = list(w.params["q_lens"]), list(w.params["cache_lens"])
    batch = w.shape("cu_seqlens_q")[0] - 1
    if len(q_lens) < batch:  # truncated on the page (qwen35-9b-mixed)
        q_lens += HIDDEN_MIXED[0][: batch - len(q_lens)]
        cache_lens += HIDDEN_MIXED[1][: batch - len(cache_lens)]
    if sum(q_lens) != w.shape("q")[0]:
        raise ValueError(f"{w.id}: q_lens sum {sum(q_lens)} != T_q {w.shape('q')[0]}")
    return q_lens, cache_lens


def shrink_prefill(q_lens, cache_lens, page_size: int, max_requests: int = 3):
    """At most ``max_requests`` requests, caches of about three pages, chunks of at least 17 tokens (so the
    prefill tile and its causal diagonal are exercised), page-multiple lengths kept off multiples."""
    q_lens, cache_lens = q_lens[:max_requests], cache_lens[:max_requests]
    f = min(1.0, (3 * page_size + page_size // 3) / max(max(cache_lens), 1))
    new_q, new_c = [], []
    for q, c in zip(q_lens, cache_lens):
        c2 = round(c * f)
        q2 = 0 if q == 0 else min(q, max(17, round(q * f)))
        new_q.append(q2)
        new_c.append(c2 + 1 if c % page_size and c2 % page_size == 0 else c2)
    return new_q, new_c


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row (``build_case``); ``shrink``: ``shrink_prefill`` lengths, at most 2 KV heads."""
    p = w.params
    q_dtype = w.dtypes()[0]
    pool_dtype = w.tensor_dtype("k_pages") or q_dtype
    _, num_heads, d = w.shape("q")
    pt, num_kv, _ = w.shape("k_pages")
    page_size = p["page_size"]
    group = num_heads // num_kv
    q_lens, cache_lens = row_lengths(w)
    width, num_pages, max_position = w.shape("block_table")[1], pt // page_size, p.get("max_position")
    if shrink:
        q_lens, cache_lens = shrink_prefill(q_lens, cache_lens, page_size)
        num_kv = min(num_kv, 2)
        width = num_pages = None
        max_position = max(c + q for c, q in zip(cache_lens, q_lens)) + 3 if p.get("fuse_rope") else None
    return build_case(q_lens, cache_lens, num_kv * group, num_kv, d, page_size, q_dtype, pool_dtype, device, seed,
                      width=width, num_pages=num_pages, max_seqlen_q=p["max_seqlen_q"] if not shrink else None,
                      softcap=p.get("softcap"), fuse_rope=p.get("fuse_rope", False), max_position=max_position,
                      rotary_dim=p.get("rotary_dim"), label=w.id)


def build_case(q_lens, cache_lens, num_heads: int, num_kv: int, d: int, page_size: int, q_dtype, pool_dtype, device,
               seed: int = 0, *, width: int | None = None, num_pages: int | None = None,
               max_seqlen_q: int | None = None, is_causal: bool = True, softcap=None, fuse_rope: bool = False,
               max_position: int | None = None, rotary_dim: int | None = None, new_scale: float = 1.0,
               share_pages: bool = False, label: str = "") -> Case:
    """Random q / k_new / v_new; NaN-poisoned flat pools with random values in the cached rows only (the rows
    the call appends stay poisoned until it writes them); a shuffled table covering ``c + q`` tokens."""
    gen = testing.generator(seed)
    totals = [c + q for c, q in zip(cache_lens, q_lens)]
    if width is None:
        width = max([math.ceil(n / page_size) for n in totals] + [0]) + 1
    if num_pages is None:
        num_pages = sum(math.ceil(n / page_size) for n in totals) + 2
    table = testing.block_table(totals, page_size, num_pages, width, gen, "cpu", share=share_pages)
    k_pages = testing.poisoned((num_pages * page_size, num_kv, d), pool_dtype, device)
    v_pages = testing.poisoned((num_pages * page_size, num_kv, d), pool_dtype, device)
    fp8 = pool_dtype == E4M3
    fill_pool(k_pages, table, cache_lens, page_size, gen, 4.0 if fp8 else 1.0)
    fill_pool(v_pages, table, cache_lens, page_size, gen, 4.0 if fp8 else 1.0)
    t_q = sum(q_lens)
    inputs = {
        "q": testing.randn((t_q, num_heads, d), q_dtype, device, gen),
        "k_new": testing.randn((t_q, num_kv, d), q_dtype, device, gen, scale=new_scale),
        "v_new": testing.randn((t_q, num_kv, d), q_dtype, device, gen, scale=new_scale),
        "k_pages": k_pages,
        "v_pages": v_pages,
        "k_scale": torch.tensor([0.21], device=device),
        "v_scale": torch.tensor([0.29], device=device),
        "cu_seqlens_q": testing.cu_seqlens(q_lens, device),
        "cache_seqlens": torch.tensor(cache_lens, dtype=torch.int32, device=device),
        "block_table": table.to(device),
        "page_size": page_size,
        "max_seqlen_q": max_seqlen_q if max_seqlen_q is not None else max(q_lens + [0]),
        "is_causal": is_causal,
        "out": testing.poisoned((t_q, num_heads, d), q_dtype, device),
    }
    if fp8:
        inputs["cache_dtype"] = E4M3
    if softcap:
        inputs["softcap"] = float(softcap)
    if fuse_rope:
        inputs.update(fuse_rope=True, max_position=max_position or max(totals) + 3)
        if rotary_dim:
            inputs["rotary_dim"] = rotary_dim
    return Case(inputs, outputs=("out", "k_pages", "v_pages"), inplace=True, label=label,
                meta={"q_lens": list(q_lens), "cache_lens": list(cache_lens), "group": num_heads // num_kv,
                      "table": table})


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-4 requests with 0..24 new tokens over 0..80 cached ones, odd page sizes and
    multiples of the key tile (64, 128), G 1..5 or 8, D 16..128, causal or not, softcap, fused RoPE (full or
    partial R), fp8 pools with new values past saturation, shared pages for the cached part only when no
    request appends into them, sometimes an explicit plan with 1-3 splits."""
    gen = testing.generator(seed)
    dtype = random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])
    pool_dtype = random_choice(gen, [dtype, dtype, E4M3])
    num_kv, group = random_int(gen, 1, 2), random_choice(gen, [1, 2, 3, 4, 5, 8])
    d = random_choice(gen, [16, 32, 64, 64, 128])
    batch = random_int(gen, 1, 4)
    q_lens = [random_choice(gen, [0, 1, random_int(gen, 2, 24), random_int(gen, 2, 24)]) for _ in range(batch)]
    cache_lens = [random_choice(gen, [0, random_int(gen, 1, 80), random_int(gen, 1, 80)]) for _ in range(batch)]
    rope = random_choice(gen, [False, True])
    causal = random_choice(gen, [True, True, False])
    case = build_case(q_lens, cache_lens, num_kv * group, num_kv, d, random_choice(gen, [1, 5, 16, 48, 64, 128]), dtype,
                      pool_dtype, device, seed, is_causal=causal, softcap=random_choice(gen, [None, None, 4.0]),
                      fuse_rope=rope, rotary_dim=random_choice(gen, [None, d // 2]) if rope else None,
                      new_scale=random_choice(gen, [1.0, 1.0, 150.0]) if pool_dtype == E4M3 else 1.0,
                      label=f"fuzz-{seed}")
    splits = random_choice(gen, [None, None, 1, 3])
    if splits is not None:
        from .op import gqa_prefill_paged_plan

        cu = [0] + torch.tensor(q_lens).cumsum(0).tolist()
        case.inputs["plan"] = gqa_prefill_paged_plan(cu, cache_lens, num_kv * group, num_kv, d, is_causal=causal,
                                                     num_splits=splits, device=device)
    return case


def cost(case: Case) -> Cost:
    a = case.inputs
    q, k_new, pool = a["q"], a["k_new"], a["k_pages"]
    num_heads, d = q.shape[1], q.shape[2]
    num_kv, page_size = k_new.shape[1], a["page_size"]
    q_lens, lens = case.meta["q_lens"], case.meta["cache_lens"]  # host copies (meta-device cases too)
    causal = a.get("is_causal", True)
    vis = rows = entries = 0
    spans = []
    for b, c in enumerate(lens):
        n = q_lens[b]
        if n == 0:
            spans.append((0, 0))
            continue
        vis += n * c + n * (n + 1) // 2 if causal else n * (c + n)
        rows += n
        entries += math.ceil((c + n) / page_size)
        spans.append((0, c))
    n_rows, _ = distinct_rows(case.meta["table"], spans, page_size)
    pool_bytes = (2 * n_rows + 2 * q.shape[0]) * num_kv * d * pool.element_size()
    scales = 8 if pool.dtype != q.dtype else 0
    return Cost(
        flops=attention_flops(num_heads, vis, rows, d, d, bool(a.get("softcap"))),
        bytes=2 * nbytes(q) + nbytes(k_new) + nbytes(a["v_new"]) + pool_bytes + nbytes(a["cu_seqlens_q"])
        + nbytes(a["cache_seqlens"]) + 4 * entries + scales,
        roof=roof_for(q.dtype),
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    """Output: dual-reference rule. Pools: appended rows equal the reference's (bit-exact without RoPE; with
    RoPE within one rounding step of the stored dtype, as the rotation may fuse multiply-adds); every other
    row keeps its value or its NaN poison."""
    o = out["out"]
    lowp = case.memo(f"lowp-{o.dtype}",
                     lambda: gqa_prefill_paged_with_kv_cache_fwd_ref(**case.fresh().inputs, lowp=o.dtype))
    testing.assert_close_dual("o", o, ref["out"], lowp)
    for name in ("k_pages", "v_pages"):
        if not case.inputs.get("fuse_rope") or name == "v_pages":
            testing.assert_bitwise(name, out[name], ref[name])
            continue
        step = 0.13 if out[name].dtype == E4M3 else (2 ** -7 if out[name].dtype == torch.bfloat16 else 2 ** -10)
        torch.testing.assert_close(out[name].float(), ref[name].float(), rtol=step, atol=step, equal_nan=True,
                                   msg=lambda m, n=name: f"{n}: {m}")


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=gqa_prefill_paged_with_kv_cache_fwd,
    reference=gqa_prefill_paged_with_kv_cache_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
)
