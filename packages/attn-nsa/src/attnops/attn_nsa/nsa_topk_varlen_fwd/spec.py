"""NSATopKVarlenFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import torch

from attnops.attn_nsa._cases import fuzz_dtype, fuzz_lengths, head_slices, seq_lengths, shrink_lengths
from attnops.attn_nsa._varlen import chunk_counts, varlen_metadata
from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import nsa_topk_varlen_fwd
from .reference import nsa_topk_importance, nsa_topk_varlen_fwd_ref

OP = "NSATopKVarlenFwd"
# Selected importances may differ from the float64 reference by rounding (float32 scores and exp2 in the
# kernel); two chunks closer than this are a tie.
IMPORTANCE_ATOL = 1e-3


def build_case(lengths, h, h_kv, d, dtype, scale, selected, bs, device, seed=0, label="") -> Case:
    gen = testing.generator(seed)
    meta = varlen_metadata(lengths, bs, device)
    t, c = sum(lengths), sum(chunk_counts(lengths, bs))
    inputs = {
        "q": testing.randn((t, h, d), dtype, device, gen),
        "k_cmp": testing.randn((c, h_kv, d), dtype, device, gen),
        **meta,
        "scale": float(scale),
        "selected_block_num": int(selected),
        "bs": int(bs),
    }
    return Case(inputs, outputs=("block_indices",), label=label, meta={"seq_lens": list(lengths)})


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row. ``shrink`` keeps <= 3 sequences of <= 5 blocks plus each ragged tail and selects
    min(S, 4) blocks, so that the 3 forced blocks plus a real ranking of the others remain."""
    (dtype,) = w.dtypes()
    _, h, d = w.shape("q")
    h_kv = w.shape("k_cmp")[1]
    bs, selected = int(w.params["bs"]), int(w.params["selected_block_num"])
    lengths = seq_lengths(w)
    if shrink:
        lengths = shrink_lengths(lengths, bs, full_blocks=5)
        selected = min(selected, 4)
    return build_case(lengths, h, h_kv, d, dtype, w.params["scale"], selected, bs, device, seed, w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 0..4 sequences of lengths 0, 1, < bs, whole blocks or ragged (<= 200 tokens); bs 16 / 32
    / 64; S in 1..16 (more or fewer than a sequence's candidates); G 1..16 incl. non-powers of two; D in [1, 256];
    scale 1 or about D^-1/2; sometimes q and k_cmp as head slices of wider tensors."""
    gen = testing.generator(seed)
    dtype = fuzz_dtype(gen)
    bs = random_choice(gen, [16, 32, 64])
    g, h_kv = random_choice(gen, [1, 2, 3, 4, 6, 8, 16]), random_int(gen, 1, 2)
    d = random_choice(gen, (1, 8, 40, 64, 72, 128, 192, 256))
    selected = random_choice(gen, [1, 2, 3, 4, 5, 8, 16])
    scale = random_choice(gen, [1.0, 0.125, d**-0.5])
    lengths = fuzz_lengths(gen, bs, max_tokens=200)
    case = build_case(lengths, g * h_kv, h_kv, d, dtype, scale, selected, bs, device, seed, f"fuzz-{seed}")
    a = case.inputs
    if random_int(gen, 0, 1):
        (a["q"],) = head_slices(a["q"])
    if random_int(gen, 0, 1):
        (a["k_cmp"],) = head_slices(a["k_cmp"])
    return case


def scored_chunks(lengths, bs: int) -> int:
    """``Σ_n [ Σ_t floor((t+1)/bs) + Σ_t (floor(t/bs) + 1) ]``: lse pass plus selection pass."""
    total = 0
    for n in lengths:
        a, r = divmod(int(n), bs)
        closed = bs * a * (a - 1) // 2 + a * (r + 1)  # Σ_{t<n} floor((t+1)/bs)
        current = bs * a * (a - 1) // 2 + a * r + int(n)  # Σ_{t<n} (floor(t/bs) + 1)
        total += closed + current
    return total


def cost(case: Case) -> Cost:
    a = case.inputs
    t, h, d = a["q"].shape
    h_kv = a["k_cmp"].shape[1]
    lengths = (a["offsets"][1:] - a["offsets"][:-1]).tolist()
    reads = sum(nbytes(a[k]) for k in ("q", "k_cmp", "offsets", "chunk_offsets", "token_indices"))
    writes = t * h_kv * a["selected_block_num"] * 4
    return Cost(flops=2 * h * d * scored_chunks(lengths, a["bs"]), bytes=reads + writes, roof=roof_for(a["q"].dtype))


def importance(case: Case) -> torch.Tensor:
    """The float64 reference importances of this case (memoized: the harness compares several peers)."""
    if "importance" not in case.meta:
        a = case.inputs
        case.meta["importance"] = nsa_topk_importance(a["q"], a["k_cmp"], a["offsets"], a["chunk_offsets"],
                                                      a["scale"], a["bs"])
    return case.meta["importance"]


def assert_selection(name: str, idx: torch.Tensor, ref_idx: torch.Tensor, imp: torch.Tensor):
    """Same number of selected ids per (token, KV head) as the reference, no duplicates, only candidates
    (``c <= cur``), and the same selected importances up to ties (``IMPORTANCE_ATOL``)."""
    if idx.dtype != torch.int32:
        raise AssertionError(f"{name}: dtype {idx.dtype}, expected int32")
    pad = imp.shape[-1]
    idx, ref_idx = idx.cpu().long(), ref_idx.cpu().long()
    if idx.shape != ref_idx.shape:
        raise AssertionError(f"{name}: shape {tuple(idx.shape)}, expected {tuple(ref_idx.shape)}")
    if idx.numel() == 0:  # no (token, KV head) rows (T_q = 0): nothing to rank, and no -1 row width to infer
        return
    if bool((idx < -1).any()) or bool((idx >= pad).any()):
        raise AssertionError(f"{name}: ids outside [-1, {pad})")
    scores = imp.cpu().reshape(-1, pad)
    ours = torch.where(idx < 0, pad, idx).reshape(scores.shape[0], -1)
    theirs = torch.where(ref_idx < 0, pad, ref_idx).reshape(scores.shape[0], -1)
    picked = scores.gather(1, ours.clamp(max=pad - 1))
    if bool(((ours < pad) & ~torch.isfinite(picked)).any()):
        raise AssertionError(f"{name}: selects a chunk that is not a candidate (beyond the current chunk)")
    testing.assert_topk_equivalent(name, ours, theirs, scores, pad=pad, atol=IMPORTANCE_ATOL)


def compare(out: dict, ref: dict, case: Case) -> None:
    assert_selection("block_indices", out["block_indices"], ref["block_indices"], importance(case))


SPEC = OpSpec(
    name=OP,
    family="attn-nsa",
    fn=nsa_topk_varlen_fwd,
    reference=nsa_topk_varlen_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
    deterministic=True,  # no atomics: each (token tile, KV head) program ranks its chunks in a fixed order
)
