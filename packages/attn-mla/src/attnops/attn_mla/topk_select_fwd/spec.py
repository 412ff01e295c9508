"""TopKSelectFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import torch

from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import topk_select_fwd
from .reference import topk_select_fwd_ref

OP = "TopKSelectFwd"
SHRUNK_S, SHRUNK_S_KV = 3, 3001  # odd width: partial last step of every pass


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row: whole-row windows as on the page; ``shrink`` keeps 3 query rows of 3001 keys
    and scales topk by the same factor (so the row still needs a selection, not only padding)."""
    gen = testing.generator(seed)
    b, s, s_kv, g = w.shape("index_score")
    topk = int(w.params["topk"])
    if shrink:
        s = min(s, SHRUNK_S)
        if s_kv > SHRUNK_S_KV:
            topk = max(1, round(topk * SHRUNK_S_KV / s_kv))
            s_kv = SHRUNK_S_KV
    inputs = {
        "index_score": testing.randn((b, s, s_kv, g), torch.float32, device, gen),  # (up to 8.6 GB: drawn on the GPU)
        "starts": torch.zeros((b, s), dtype=torch.int32, device=device),
        "ends": torch.full((b, s), s_kv, dtype=torch.int32, device=device),
        "topk": topk,
    }
    return Case(inputs, outputs=("indexes",), label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-3 groups, 1-3000 keys, topk anywhere in [1, S_kv], windows empty / clipped /
    short / whole, scores normal, heavily tied (few levels incl. ±0 and −inf) or all equal, sometimes a
    transposed [B, S, G, S_kv] view."""
    gen = testing.generator(seed)
    b, s, g = random_int(gen, 1, 2), random_int(gen, 1, 4), random_choice(gen, [1, 1, 2, 3])
    s_kv = random_choice(gen, [1, 7, 100, 700, 3000])
    topk = random_int(gen, 1, s_kv)
    kind = random_choice(gen, ["normal", "normal", "levels", "equal"])
    if kind == "normal":
        values = torch.randn((b, s, g, s_kv), generator=gen)
    elif kind == "levels":
        levels = torch.tensor([float("-inf"), -1.0, -0.0, 0.0, 0.5, 3.0])
        values = levels[torch.randint(0, 6, (b, s, g, s_kv), generator=gen)]
    else:
        values = torch.full((b, s, g, s_kv), 1.25)
    scores = values.to(device).transpose(2, 3)  # [B, S, S_kv, G]; G > 1: strided along S_kv
    if random_int(gen, 0, 1):
        scores = scores.contiguous()
    lo = torch.randint(-5, s_kv + 1, (b, s), generator=gen)
    hi = lo + torch.randint(-2, s_kv + 6, (b, s), generator=gen)
    whole = torch.rand((b, s), generator=gen) < 0.3
    lo, hi = torch.where(whole, 0, lo), torch.where(whole, s_kv, hi)
    inputs = {"index_score": scores, "starts": lo.to(torch.int32).to(device), "ends": hi.to(torch.int32).to(device),
              "topk": topk}
    return Case(inputs, outputs=("indexes",), label=f"fuzz-{seed}")


def window_sizes(case: Case) -> torch.Tensor:
    s_kv = case.inputs["index_score"].shape[2]
    lo = case.inputs["starts"].long().clamp(min=0)
    hi = case.inputs["ends"].long().clamp(max=s_kv)
    return (hi - lo).clamp(min=0)


def cost(case: Case) -> Cost:
    """FLOPs = G · Σ window (one compare per in-window score); bytes = in-window scores + starts + ends +
    the output."""
    b, s, _, g = case.inputs["index_score"].shape
    in_window = int(window_sizes(case).sum()) * g
    topk = case.inputs["topk"]
    return Cost(flops=in_window, bytes=4 * in_window + 2 * 4 * b * s + 4 * b * s * g * topk, roof="cuda_core.fp32")


def compare(out: dict, ref: dict, case: Case) -> None:
    """Sets agree up to ties (gathered scores equal), every index inside its window; rows are checked in
    chunks so that a full-size case (8.6 GB of scores) never goes to the host whole."""
    idx, ref_idx = out["indexes"], ref["indexes"]
    score = case.inputs["index_score"]
    b, s, s_kv, g = score.shape
    # int64 accepted: peers (torch.topk, flashinfer.top_k) return it; our op's int32 is asserted by its tests.
    if idx.shape != ref_idx.shape or idx.dtype not in (torch.int32, torch.int64):
        raise AssertionError(f"indexes: got {tuple(idx.shape)} {idx.dtype}, expected {tuple(ref_idx.shape)} int32")
    lo = case.inputs["starts"].long().clamp(min=0).reshape(b * s, 1, 1)
    hi = case.inputs["ends"].long().clamp(max=s_kv).reshape(b * s, 1, 1)
    idx, ref_idx = idx.reshape(b * s, g, -1), ref_idx.reshape(b * s, g, -1)
    rows = score.reshape(b * s, s_kv, g)
    chunk = max(1, (1 << 26) // max(1, s_kv * g))
    for r0 in range(0, b * s, chunk):
        sl = slice(r0, r0 + chunk)
        got = idx[sl].long()
        outside = (got != s_kv) & ((got < lo[sl]) | (got >= hi[sl]))
        if bool(outside.any()):
            raise AssertionError(f"indexes: a selected position lies outside its window (rows from {r0})")
        testing.assert_topk_equivalent("indexes", idx[sl], ref_idx[sl], rows[sl].transpose(1, 2), pad=s_kv)


SPEC = OpSpec(
    name=OP,
    family="attn-mla",
    fn=topk_select_fwd,
    reference=topk_select_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    # f32 scores and int32 positions only: the interpreter computes every row right.
    interpreter_ok=lambda w: True,
    fuzz=fuzz,
)
