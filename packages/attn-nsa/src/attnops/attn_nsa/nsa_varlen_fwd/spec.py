"""NSAVarlenFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import math

import torch

from attnops.attn_nsa._cases import (
    assert_empty_rows_zero,
    fuzz_dtype,
    fuzz_lengths,
    head_slices,
    seq_lengths,
    shrink_lengths,
)
from attnops.attn_nsa._varlen import varlen_metadata
from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import nsa_varlen_fwd
from .reference import nsa_varlen_fwd_lowp, nsa_varlen_fwd_ref

OP = "NSAVarlenFwd"


def random_selection(lengths, h_kv: int, sel: int, bs: int, causal: bool, gen: torch.Generator,
                     pad: int | None = None, min_count: int = 1):
    """The page's generator: per token and KV head, ``sel`` distinct random eligible blocks (causal:
    ``max(1, ceil(t/bs))`` candidates, else every block of the sequence), ascending, padded with ``pad``
    (default T_q); ``block_counts`` uniform in ``[min_count, sel]``."""
    total = sum(lengths)
    pad = total if pad is None else pad
    ids = torch.full((total, h_kv, sel), pad, dtype=torch.int64)
    start = 0
    for n in lengths:
        if n == 0:
            continue
        nb = math.ceil(n / bs)
        t = torch.arange(n)
        cand = torch.clamp((t + bs - 1) // bs, min=1) if causal else torch.full((n,), nb)
        keys = torch.rand((n, h_kv, nb), generator=gen)
        keys = keys.masked_fill(torch.arange(nb)[None, None, :] >= cand[:, None, None], 2.0)
        width = min(nb, sel)
        chosen = keys.argsort(dim=-1)[..., :width]
        valid = torch.arange(width)[None, None, :] < cand[:, None, None]
        ids[start : start + n, :, :width] = torch.where(valid, chosen, pad)
        start += n
    ids = ids.sort(dim=-1).values
    counts = torch.randint(min_count, sel + 1, (total, h_kv), generator=gen) if sel else torch.zeros(total, h_kv)
    return ids.to(torch.int32), counts.to(torch.int32)


def build_case(lengths, h, h_kv, d, dtype, sel, bs, causal, scale, device, seed=0, label="",
               pad: int | None = None) -> Case:
    gen = testing.generator(seed)
    meta = varlen_metadata(lengths, bs, device)
    del meta["chunk_offsets"]
    t = sum(lengths)
    ids, counts = random_selection(lengths, h_kv, sel, bs, causal, gen, pad)
    inputs = {
        "q": testing.randn((t, h, d), dtype, device, gen),
        "k": testing.randn((t, h_kv, d), dtype, device, gen),
        "v": testing.randn((t, h_kv, d), dtype, device, gen),
        "block_indices": ids.to(device),
        "block_counts": counts.to(device),
        **meta,
        "is_causal": bool(causal),
        "scale": float(scale),
        "block_size": int(bs),
    }
    return Case(inputs, outputs=("o_slc",), label=label, meta={"seq_lens": list(lengths)})


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row; ``shrink`` keeps <= 3 sequences of <= 3 blocks plus each row's ragged tail."""
    (dtype,) = w.dtypes()
    _, h, d = w.shape("q")
    h_kv = w.shape("k")[1]
    sel = w.shape("block_indices")[2]
    bs = int(w.params["block_size"])
    lengths = seq_lengths(w)
    if shrink:
        lengths = shrink_lengths(lengths, bs)
    return build_case(lengths, h, h_kv, d, dtype, sel, bs, bool(w.params["is_causal"]), w.params["scale"], device,
                      seed, w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 0..4 sequences of lengths 0, 1, < bs, whole blocks or ragged (<= 96 tokens); bs 16 / 32
    / 64; causal or not; G 1..16 incl. non-powers of two; D in [1, 128]; SEL 0..8. The page's selection generator,
    padded with −1, T_q or a block past every sequence, then some slots overwritten with any id in [−1, blocks + 1]
    (future blocks, blocks past the sequence, repeated ids: the spec defines them) and some block_counts set to 0
    (empty selections); sometimes q, k, v as head slices of one packed qkv tensor."""
    gen = testing.generator(seed)
    dtype = fuzz_dtype(gen)
    bs = random_choice(gen, [16, 32, 64])
    g, h_kv = random_choice(gen, [1, 2, 3, 4, 5, 8, 16]), random_int(gen, 1, 2)
    d = random_choice(gen, (1, 8, 40, 64, 72, 96, 128))
    sel = random_choice(gen, [0, 1, 2, 3, 4, 5, 8])
    causal = bool(random_int(gen, 0, 1))
    lengths = fuzz_lengths(gen, bs, max_tokens=96 // h_kv)
    blocks = max([math.ceil(n / bs) for n in lengths], default=0)
    pad = random_choice(gen, [-1, None, blocks + 1])
    scale = d**-0.5 * random_choice(gen, [0.25, 1.0, 4.0])
    case = build_case(lengths, g * h_kv, h_kv, d, dtype, sel, bs, causal, scale, device, seed, f"fuzz-{seed}", pad)
    a = case.inputs
    ids, counts = a["block_indices"].cpu(), a["block_counts"].cpu()
    odd = torch.rand(ids.shape, generator=gen) < 0.2
    ids[odd] = torch.randint(-1, blocks + 2, ids.shape, generator=gen, dtype=ids.dtype)[odd]
    counts[torch.rand(counts.shape, generator=gen) < 0.15] = 0
    a["block_indices"], a["block_counts"] = ids.to(device), counts.to(device)
    if random_int(gen, 0, 1):
        a["q"], a["k"], a["v"] = head_slices(a["q"], a["k"], a["v"])
    return case


def collected_keys(case: Case) -> tuple[int, int, int]:
    """(keys scored summed over (token, KV head), (token, KV head) pairs with >= 1 key, distinct (KV head, row)
    pairs read) for this case's selection."""
    a = case.inputs
    bs, causal = a["block_size"], a["is_causal"]
    ids_all, counts_all = a["block_indices"].long().cpu(), a["block_counts"].long().cpu()
    t, h_kv, sel = ids_all.shape
    read = torch.zeros((t, h_kv), dtype=torch.bool)
    scored = rows = 0
    offs = a["offsets"].tolist()
    for n in range(len(offs) - 1):
        lo, hi = offs[n], offs[n + 1]
        length = hi - lo
        if length == 0 or sel == 0:
            continue
        pos = torch.arange(length)
        end = pos + 1 if causal else torch.full_like(pos, length)
        ids = ids_all[lo:hi]
        used = (torch.arange(sel) < counts_all[lo:hi, :, None]) & (ids >= 0)
        first = ids * bs
        # per slot: |[β·bs, (β+1)·bs) ∩ [0, end)|
        n_keys = (torch.minimum(first + bs, end[:, None, None]) - first).clamp(min=0, max=bs)
        n_keys = torch.where(used, n_keys, 0)
        scored += int(n_keys.sum())
        rows += int((n_keys.sum(-1) > 0).sum())
        r = first[..., None] + torch.arange(bs)
        ok = used[..., None] & (r < end[:, None, None, None])
        heads = torch.arange(h_kv)[None, :, None, None].expand_as(r)
        read[(lo + r[ok]), heads[ok]] = True
    return scored, rows, int(read.sum())


def cost(case: Case) -> Cost:
    a = case.inputs
    _, h, d = a["q"].shape
    g = h // a["k"].shape[1]
    scored, rows, distinct = collected_keys(case)
    small = sum(nbytes(a[k]) for k in ("q", "block_indices", "block_counts", "offsets", "token_indices"))
    bytes_ = small + nbytes(a["q"]) + 2 * distinct * d * a["q"].element_size()  # + o_slc, + K and V rows
    return Cost(flops=attention_flops(g, scored, rows, d, d), bytes=bytes_, roof=roof_for(a["q"].dtype))


def empty_rows(case: Case) -> torch.Tensor:
    """``[T_q, H]`` bool: query heads of (token, KV head) pairs that collect no key."""
    a = case.inputs
    ones = torch.ones_like(a["k"][..., :1])
    o = nsa_varlen_fwd_ref(a["q"][..., :1] * 0, ones, ones, a["block_indices"], a["block_counts"], a["offsets"],
                           a["token_indices"], a["is_causal"], 1.0, a["block_size"])
    return (o[..., 0] == 0).cpu()


def compare(out: dict, ref: dict, case: Case) -> None:
    lowp = case.memo("lowp", lambda: nsa_varlen_fwd_lowp(**case.inputs))
    testing.assert_close_dual("o_slc", out["o_slc"], ref["o_slc"], lowp)
    assert_empty_rows_zero("o_slc", out["o_slc"], ref["o_slc"], empty_rows(case))


SPEC = OpSpec(
    name=OP,
    family="attn-nsa",
    fn=nsa_varlen_fwd,
    reference=nsa_varlen_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
    deterministic=True,  # no atomics: one program per (token, KV head) walks its slots in order
)
