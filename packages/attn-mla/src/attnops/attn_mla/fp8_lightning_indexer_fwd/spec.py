"""FP8LightningIndexerFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import itertools

import torch

from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, nbytes
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import fp8_lightning_indexer_fwd
from .reference import fp8_lightning_indexer_fwd_ref

OP = "FP8LightningIndexerFwd"
SHRUNK_S, SHRUNK_S_KV, SHRUNK_H = 24, 300, 8
NSE_MAX = 1e-3  # spec: normalized squared error against the exact f32 formula


def windows(seq_lens, first: int, num_rows: int) -> tuple[list[int], list[int]]:
    """Page rule: query row s is token p = first + s; ks = start of p's sequence, ke = p + 1 (causal)."""
    starts = list(itertools.accumulate([0, *seq_lens[:-1]]))
    ks, ke = [], []
    seq = 0
    for s in range(num_rows):
        p = first + s
        while seq + 1 < len(starts) and starts[seq + 1] <= p:
            seq += 1
        ks.append(starts[seq])
        ke.append(p + 1)
    return ks, ke


def shrink_lengths(seq_lens, total: int) -> list[int]:
    """Scale sequence lengths to sum to ``total`` (each at least 1), keeping their number and ratios."""
    full = sum(seq_lens)
    lens = [max(1, round(n * total / full)) for n in seq_lens]
    lens[-1] += total - sum(lens)
    return lens


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row, windows from the page's ``seq_lens`` / ``first``; ``shrink`` keeps at most 24
    query rows, 300 keys (sequences scaled alike) and 8 heads."""
    gen = testing.generator(seed)
    dtype = w.dtypes()[0]
    b, s, h, d = w.shape("index_q")
    s_kv, g = w.shape("index_k")[1:3]
    seq_lens, first = list(w.params["seq_lens"]), int(w.params["first"])
    if shrink and s_kv > SHRUNK_S_KV:
        seq_lens = shrink_lengths(seq_lens, SHRUNK_S_KV)
        first = round(first * SHRUNK_S_KV / s_kv)
        s_kv = SHRUNK_S_KV
    if shrink:
        s = min(s, SHRUNK_S)
        first = min(first, s_kv - s)
        h = max(g, min(h, SHRUNK_H))
    ks, ke = windows(seq_lens, first, s)
    inputs = {
        "index_q": testing.randn((b, s, h, d), dtype, device, gen),
        "index_k": testing.randn((b, s_kv, g, d), dtype, device, gen),
        "weights": testing.randn((s, h), torch.float32, device, gen, scale=h**-0.5),
        "cu_seqlen_ks": torch.tensor(ks, dtype=torch.int32, device=device),
        "cu_seqlen_ke": torch.tensor(ke, dtype=torch.int32, device=device),
    }
    if w.has("index_k_scale"):
        inputs["index_k_scale"] = (torch.rand((b, s_kv, g), generator=gen) * 0.02 + 0.005).to(device)
    return Case(inputs, outputs=("logits",), label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: bf16 or fp8, D 16-128, 1-2 requests, 1-2 key groups of 1-8 heads, random
    windows (empty, reversed, past both ends), optional per-key scales, clean or unclean logits."""
    gen = testing.generator(seed)
    dtype = random_choice(gen, [E4M3, torch.bfloat16])
    b, g, heads = random_int(gen, 1, 2), random_choice(gen, [1, 1, 2]), random_choice(gen, [1, 3, 8])
    d = random_choice(gen, [32, 64, 128] if dtype == E4M3 else [16, 32, 64, 128])
    s, s_kv = random_int(gen, 1, 20), random_int(gen, 1, 150)
    ks = torch.randint(-4, s_kv + 2, (s,), generator=gen)
    ke = ks + torch.randint(-3, s_kv + 4, (s,), generator=gen)
    inputs = {
        "index_q": testing.randn((b, s, g * heads, d), dtype, device, gen, scale=2.0),
        "index_k": testing.randn((b, s_kv, g, d), dtype, device, gen, scale=2.0),
        "weights": testing.randn((s, g * heads), torch.float32, device, gen),
        "cu_seqlen_ks": ks.to(torch.int32).to(device),
        "cu_seqlen_ke": ke.to(torch.int32).to(device),
        "clean_logits": bool(random_int(gen, 0, 3)),
    }
    if random_int(gen, 0, 1):
        inputs["index_k_scale"] = torch.rand((b, s_kv, g), generator=gen).to(device)
    return Case(inputs, outputs=("logits",), label=f"fuzz-{seed}")


def window_lengths(case: Case) -> torch.Tensor:
    s_kv = case.inputs["index_k"].shape[1]
    ks = case.inputs["cu_seqlen_ks"].long().clamp(min=0)
    ke = case.inputs["cu_seqlen_ke"].long().clamp(max=s_kv)
    return (ke - ks).clamp(min=0)


def cost(case: Case) -> Cost:
    """FLOPs = B·H·(2D + 3)·Σ_s window; bytes = every input once + the whole logits tensor. Always the fp8
    tensor-core roof (spec), bf16 inputs included."""
    a = case.inputs
    b, s, h, d = a["index_q"].shape
    s_kv, g = a["index_k"].shape[1:3]
    pairs = int(window_lengths(case).sum())
    read = sum(nbytes(a.get(n)) for n in ("index_q", "index_k", "weights", "cu_seqlen_ks", "cu_seqlen_ke",
                                          "index_k_scale"))
    return Cost(flops=b * h * (2 * d + 3) * pairs, bytes=read + 4 * b * s * s_kv * g, roof="tensor_core.fp8")


def compare(out: dict, ref: dict, case: Case) -> None:
    """In-window: normalized squared error <= 1e-3 and finite; outside: exactly −inf (clean_logits)."""
    got, exp = out["logits"], ref["logits"]
    if got.shape != exp.shape or got.dtype != torch.float32:
        raise AssertionError(f"logits: got {tuple(got.shape)} {got.dtype}, expected {tuple(exp.shape)} float32")
    s_kv = got.shape[2]
    t = torch.arange(s_kv, device=got.device)
    ks = case.inputs["cu_seqlen_ks"].long()
    ke = case.inputs["cu_seqlen_ke"].long()
    inside = ((t[None, :] >= ks[:, None]) & (t[None, :] < ke[:, None]))[None, :, :, None].expand_as(got)
    if case.inputs.get("clean_logits", True):
        outside = got[~inside]
        if not bool(torch.isneginf(outside).all()):
            raise AssertionError("logits: an entry outside its window is not −inf")
    g_in, e_in = got[inside].double(), exp[inside].double()
    if not bool(torch.isfinite(g_in).all()):
        raise AssertionError("logits: non-finite value inside a window")
    den = float((e_in * e_in).sum())
    nse = float(((g_in - e_in) ** 2).sum()) / den if den > 0 else float((g_in * g_in).sum())
    if not nse <= NSE_MAX:
        raise AssertionError(f"logits: normalized squared error {nse:.3e} > {NSE_MAX:.0e}")


SPEC = OpSpec(
    name=OP,
    family="attn-mla",
    fn=fp8_lightning_indexer_fwd,
    reference=fp8_lightning_indexer_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    # Under the interpreter the kernel widens bf16/fp8 tiles to fp32 before the dot (exact: both upcasts
    # are), accumulates in fp32 and never rounds to bf16: every row, bf16 included, is computed right.
    interpreter_ok=lambda w: True,
    fuzz=fuzz,
)
