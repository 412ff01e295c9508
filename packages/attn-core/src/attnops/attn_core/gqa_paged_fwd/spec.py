"""GQAPagedFwd: seed workloads, shrink, cost model (README §8, attn-core.md), acceptance rule.

Helpers here (``shrink_lengths``, ``fill_pool``, ``rope_tables``, ``visible_counts``) are shared by the
other two paged ops of this family.
"""

from __future__ import annotations

import math

import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import MIN_HEAD_DIM_FP8_ROPE, gqa_paged_fwd
from .reference import gqa_paged_fwd_ref

OP = "GQAPagedFwd"
ROPE_BASE = 10000.0


# --------------------------------------------------------------------------------------------------
# Shared helpers


def shrink_lengths(q_lens, cache_lens, page_size: int, window: int = -1, max_requests: int = 4):
    """Interpreter-sized lengths that keep a row's features: at most ``max_requests`` requests (the first
    ones and the last, so a trailing 0-length request survives), caches of about three pages (at least
    150 keys), query lengths scaled alike (0 stays 0, 1 stays 1), lengths that were not page multiples
    stay so, and the window scaled with them. Returns ``(q_lens, cache_lens, window)``."""
    idx = list(range(len(q_lens)))
    if len(idx) > max_requests:
        idx = idx[: max_requests - 1] + idx[-1:]
    q_lens = [q_lens[i] for i in idx]
    cache_lens = [cache_lens[i] for i in idx]
    target = max(3 * page_size + page_size // 3, 150)
    f = min(1.0, target / max(max(cache_lens), 1))
    new_c, new_q = [], []
    for q, c in zip(q_lens, cache_lens):
        c2 = round(c * f)
        if c % page_size and c2 % page_size == 0:
            c2 += 1
        q2 = 0 if q == 0 else min(c2 if c2 else q, max(1, round(q * f)) if q > 1 else 1)
        new_c.append(c2)
        new_q.append(q2)
    if window >= 0:
        window = max(1, round(window * f))
    return new_q, new_c, window


def rope_tables(positions: int, rotary_dim: int, dtype, device, base: float = ROPE_BASE):
    """``cos/sin [positions, R/2]`` with ``angle(pos, m) = pos · base^(−2m/R)``, rounded to ``dtype``."""
    inv = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    ang = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().to(dtype).to(device), ang.sin().to(dtype).to(device)


def fill_pool(pool: torch.Tensor, table: torch.Tensor, lengths, page_size: int, gen, scale: float = 1.0):
    """Write random values into the pool rows that logical tokens ``[0, len_b)`` of each request reach
    (through ``table``, host or device); every other row keeps its NaN poison, so a kernel that reads an
    unreached row, a slot past a length or an unused table column produces NaN. ``pool``: 4-D pages or flat
    rows (contiguous); nothing is written on the meta device (cost-only cases)."""
    if pool.device.type == "meta":
        return
    flat_pool = pool.reshape(-1, *pool.shape[-2:])
    rows = set()
    tab = table.cpu().long()
    for b, n in enumerate(lengths):
        pos = torch.arange(n)
        rows.update((tab[b, pos // page_size] * page_size + pos % page_size).tolist())
    if not rows:
        return
    idx = torch.tensor(sorted(rows), dtype=torch.long)
    vals = testing.randn((len(idx), *flat_pool.shape[1:]), flat_pool.dtype, flat_pool.device, gen, scale=scale)
    if flat_pool.dtype == E4M3:  # index_copy has no fp8 kernel: move the bytes
        flat_pool, vals = flat_pool.view(torch.uint8), vals.view(torch.uint8)
    flat_pool.index_copy_(0, idx.to(flat_pool.device), vals)


def visible_counts(q_len: int, kv_len: int, causal: bool, window_left: int = -1, window_right: int = -1,
                   q_offset: int | None = None) -> tuple[int, int]:
    """(visible (query, key) pairs, rows with >= 1 visible key) of one request: query i at position
    ``q_offset + i`` (default ``kv_len − q_len``), keys 0..kv_len−1, README §4 masks. Closed form per row."""
    if q_len == 0 or kv_len == 0:
        return 0, 0
    off = kv_len - q_len if q_offset is None else q_offset
    scores = rows = 0
    for i in range(q_len):
        p = off + i
        hi = kv_len - 1
        if causal:
            hi = min(hi, p)
        if window_right >= 0:
            hi = min(hi, p + window_right)
        lo = max(0, p - window_left) if window_left >= 0 else 0
        n = max(0, hi - lo + 1)
        scores += n
        rows += n > 0
    return scores, rows


def distinct_rows(table: torch.Tensor, spans, page_size: int) -> tuple[int, int]:
    """(distinct flat pool rows, table entries consulted) of per-request logical spans ``(start, stop)``."""
    tab = table.cpu().long()
    rows, entries = set(), 0
    for b, (start, stop) in enumerate(spans):
        if stop <= start:
            continue
        pos = torch.arange(start, stop)
        rows.update((tab[b, pos // page_size] * page_size + pos % page_size).tolist())
        entries += (stop - 1) // page_size - start // page_size + 1
    return len(rows), entries


# --------------------------------------------------------------------------------------------------
# GQAPagedFwd


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0, *, share_pages: bool = False) -> Case:
    """Inputs for one row (see ``build_case``). ``shrink``: interpreter sizes (``shrink_lengths``, at most 2
    KV heads; G, D and the page size kept)."""
    p = w.params
    q_dtype, kv_dtype = w.dtypes()
    t_q, num_heads, d = w.shape("q")
    num_pages, page_size, num_kv, _ = w.shape("k_pages")
    width = w.shape("page_table")[1]
    group = num_heads // num_kv
    q_lens, cache_lens = list(p["q_lens"]), list(p["cache_lens"])
    window = p.get("window_size_left", -1)
    rope = p.get("pos_encoding_mode", "none") == "rope"
    table_rows = w.shape("rope_cos")[0] if rope else 0
    if shrink:
        q_lens, cache_lens, window = shrink_lengths(q_lens, cache_lens, page_size, window)
        num_kv = min(num_kv, 2)
        width = num_pages = table_rows = None
    elif sum(q_lens) != t_q:
        raise ValueError(f"{w.id}: q_lens sum {sum(q_lens)} != T_q {t_q}")
    return build_case(q_lens, cache_lens, num_kv * group, num_kv, d, page_size, q_dtype, kv_dtype, device, seed,
                      num_pages=num_pages, width=width, is_causal=p.get("is_causal", True), window_size_left=window,
                      softcap=p.get("softcap"), sinks=w.has("sinks"), rope=rope, rope_rows=table_rows,
                      rotary_dim=p.get("rotary_dim"), rope_layout=p.get("rope_layout", "neox"),
                      share_pages=share_pages, label=w.id)


def build_case(q_lens, cache_lens, num_heads: int, num_kv: int, d: int, page_size: int, q_dtype, kv_dtype, device,
               seed: int = 0, *, num_pages: int | None = None, width: int | None = None, is_causal: bool = True,
               window_size_left: int = -1, window_size_right: int = -1, softcap=None, sinks: bool = False,
               rope: bool = False, rope_rows: int | None = None, rotary_dim: int | None = None,
               rope_layout: str = "neox", share_pages: bool = False, per_head_scales: bool = False,
               label: str = "") -> Case:
    """Random q; NaN-poisoned pools with random values only in the rows the lengths reach; a shuffled page
    table (distinct pages unless ``share_pages``) whose unused columns hold ``UNUSED_PAGE``. Default pool:
    the pages needed + 3, table width: the widest request + 1 column."""
    gen = testing.generator(seed)
    if width is None:
        width = max([math.ceil(c / page_size) for c in cache_lens] + [0]) + 1
    if num_pages is None:
        num_pages = sum(math.ceil(c / page_size) for c in cache_lens) + 3
    if share_pages:
        num_pages = max(math.ceil(c / page_size) for c in cache_lens) + 2
    table = testing.block_table(cache_lens, page_size, num_pages, width, gen, "cpu", share=share_pages)
    k_pages = testing.poisoned((num_pages, page_size, num_kv, d), kv_dtype, device)
    v_pages = testing.poisoned((num_pages, page_size, num_kv, d), kv_dtype, device)
    fp8 = kv_dtype == E4M3
    fill_pool(k_pages, table, cache_lens, page_size, gen, 4.0 if fp8 else 1.0)
    fill_pool(v_pages, table, cache_lens, page_size, gen, 4.0 if fp8 else 1.0)
    batch = len(q_lens)
    inputs = {
        "q": testing.randn((sum(q_lens), num_heads, d), q_dtype, device, gen, scale=4.0 if q_dtype == E4M3 else 1.0),
        "k_pages": k_pages,
        "v_pages": v_pages,
        "page_table": table.to(device),
        "cache_seqlens": torch.tensor(cache_lens, dtype=torch.int32, device=device),
        "cu_seqlens_q": testing.cu_seqlens(q_lens, device),
        "is_causal": is_causal,
        "window_size_left": window_size_left,
    }
    if window_size_right != -1:
        inputs["window_size_right"] = window_size_right
    out_dtype = q_dtype if q_dtype != E4M3 else torch.float16
    if q_dtype == E4M3:
        inputs["q_scale"] = (torch.rand(batch, num_kv, generator=gen) * 0.2 + 0.15).to(device)
        inputs["out_dtype"] = out_dtype
    if fp8:
        if per_head_scales:
            inputs["k_scale"] = (torch.rand(batch, num_kv, generator=gen) * 0.2 + 0.15).to(device)
            inputs["v_scale"] = (torch.rand(batch, num_kv, generator=gen) * 0.2 + 0.15).to(device)
        else:
            inputs["k_scale"] = torch.tensor([0.21], device=device)
            inputs["v_scale"] = torch.tensor([0.29], device=device)
    if softcap:
        inputs["softcap"] = float(softcap)
    if sinks:
        inputs["sinks"] = testing.randn((num_heads,), torch.float32, device, gen, scale=2.0)
    if rope:
        r = rotary_dim or d
        cos, sin = rope_tables(rope_rows or max(cache_lens) + 5, r, out_dtype, device)
        inputs.update(pos_encoding_mode="rope", rope_cos=cos, rope_sin=sin, rope_layout=rope_layout)
        if rotary_dim:
            inputs["rotary_dim"] = rotary_dim
    return Case(inputs, outputs=("o",), label=label,
                meta={"q_lens": list(q_lens), "cache_lens": list(cache_lens), "group": num_heads // num_kv,
                      "table": table})


def fuzz_lengths(gen, batch: int, max_q: int, max_extra: int) -> tuple[list[int], list[int]]:
    """Random (q_lens, kv_lens) with q <= kv: zeros, ones and longer chunks, caches of 0..max_extra more."""
    q_lens, kv_lens = [], []
    for _ in range(batch):
        q = random_choice(gen, [0, 1, 1, 2, random_int(gen, 3, max_q)])
        c = q + random_choice(gen, [0, random_int(gen, 0, max_extra), random_int(gen, 0, max_extra)])
        q_lens.append(q)
        kv_lens.append(c)
    return q_lens, kv_lens


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-5 requests with 0/1/short/longer query chunks and caches, odd page sizes
    (1..48) and multiples of the key tile (64, 128), G 1..5 or 8, D 16..128 (32+ for RoPE on fp8 pools), masks
    (causal / full / windows), softcap, sinks, RoPE (both layouts, partial), fp8 pools (per-tensor / per-head
    scales) and fp8 q, shared pages, and sometimes an explicit plan forcing 1-4 KV splits (with or without
    power-of-two page addressing)."""
    gen = testing.generator(seed)
    act = random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])
    q_dtype = random_choice(gen, [act, act, act, E4M3])
    kv_dtype = E4M3 if q_dtype == E4M3 else random_choice(gen, [act, act, E4M3])
    num_kv, group = random_int(gen, 1, 2), random_choice(gen, [1, 2, 3, 4, 5, 8])
    d = random_choice(gen, [16, 32, 64, 64, 128])
    page_size = random_choice(gen, [1, 5, 16, 48, 64, 128])  # 64 / 128: one table entry per tile (tile_in_page)
    q_lens, kv_lens = fuzz_lengths(gen, random_int(gen, 1, 5), 24, 90)
    causal = random_choice(gen, [True, True, False])
    wl = random_choice(gen, [-1, -1, 0, random_int(gen, 1, 40)])
    wr = random_choice(gen, [-1, -1, random_int(gen, 0, 10)]) if not causal else -1
    rope = random_choice(gen, [False, False, True])
    if rope and kv_dtype == E4M3:
        d = max(d, MIN_HEAD_DIM_FP8_ROPE)  # smaller D is refused with RoPE on an fp8 pool (op._check)
    case = build_case(q_lens, kv_lens, num_kv * group, num_kv, d, page_size, q_dtype, kv_dtype, device, seed,
                      is_causal=causal, window_size_left=wl, window_size_right=wr,
                      softcap=random_choice(gen, [None, None, 3.0, 30.0]), sinks=random_choice(gen, [False, True]),
                      rope=rope, rotary_dim=random_choice(gen, [None, d // 2]) if rope else None,
                      rope_layout=random_choice(gen, ["neox", "interleaved"]),
                      share_pages=random_choice(gen, [False, False, True]),
                      per_head_scales=random_choice(gen, [False, True]), label=f"fuzz-{seed}")
    splits = random_choice(gen, [None, None, 1, 2, 4])
    if splits is not None:
        from .op import gqa_paged_plan

        cu = [0] + torch.tensor(q_lens).cumsum(0).tolist()
        case.inputs["plan"] = gqa_paged_plan(cu, kv_lens, num_kv * group, num_kv, d, is_causal=causal,
                                             window_size_left=wl, window_size_right=wr, num_splits=splits,
                                             pow2_pages=random_choice(gen, [False, True]), device=device)
    return case


def host_lengths(case: Case) -> tuple[list[int], list[int], torch.Tensor]:
    """(q_lens, cache_lens, page table) on the host: from ``case.meta`` (also for meta-device cases)."""
    m = case.meta
    return list(m["q_lens"]), list(m["cache_lens"]), m["table"]


def cost(case: Case) -> Cost:
    a = case.inputs
    q, k_pages = a["q"], a["k_pages"]
    num_heads, d = q.shape[1], q.shape[2]
    num_kv, page_size = k_pages.shape[2], k_pages.shape[1]
    q_lens, lens, table = host_lengths(case)
    causal, wl, wr = a.get("is_causal", True), a.get("window_size_left", -1), a.get("window_size_right", -1)
    scores = rows = 0
    spans = []
    for b, c in enumerate(lens):
        q_len = q_lens[b]
        sc, rw = visible_counts(q_len, c, causal, wl, wr)
        scores, rows = scores + sc, rows + rw
        start = c if q_len == 0 else (max(0, c - q_len - wl) if wl >= 0 else 0)
        spans.append((start, c))
    n_rows, entries = distinct_rows(table, spans, page_size)
    out_dtype = a.get("out_dtype") or (q.dtype if q.dtype != E4M3 else torch.float16)
    kv_bytes = 2 * n_rows * num_kv * d * k_pages.element_size()
    small = sum(nbytes(a.get(n)) for n in ("cu_seqlens_q", "cache_seqlens", "q_scale", "k_scale", "v_scale",
                                            "rope_cos", "rope_sin", "sinks"))
    out_bytes = q.shape[0] * num_heads * d * torch.empty(0, dtype=out_dtype).element_size()
    return Cost(
        flops=attention_flops(num_heads, scores, rows, d, d, bool(a.get("softcap"))),
        bytes=nbytes(q) + out_bytes + kv_bytes + 4 * entries + small,
        roof=roof_for(q.dtype),
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    o = out["o"]
    lowp = case.memo(f"lowp-{o.dtype}", lambda: gqa_paged_fwd_ref(**case.inputs, lowp=o.dtype))
    testing.assert_close_dual("o", o, ref["o"], lowp)


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=gqa_paged_fwd,
    reference=gqa_paged_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
)
