"""NSACompressedVarlenFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import torch

from attnops.attn_nsa._cases import (
    assert_empty_rows_zero,
    fuzz_dtype,
    fuzz_lengths,
    head_slices,
    seq_lengths,
    shrink_lengths,
)
from attnops.attn_nsa._varlen import chunk_counts, varlen_metadata
from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import nsa_compressed_varlen_fwd
from .reference import nsa_compressed_varlen_fwd_lowp, nsa_compressed_varlen_fwd_ref

OP = "NSACompressedVarlenFwd"


def build_case(lengths, h, h_kv, dk, dv, dtype, scale, bs, device, seed=0, label="") -> Case:
    """A packed batch with these sequence lengths and random q / k_cmp / v_cmp."""
    gen = testing.generator(seed)
    meta = varlen_metadata(lengths, bs, device)
    t, c = sum(lengths), sum(chunk_counts(lengths, bs))
    inputs = {
        "q": testing.randn((t, h, dk), dtype, device, gen),
        "k_cmp": testing.randn((c, h_kv, dk), dtype, device, gen),
        "v_cmp": testing.randn((c, h_kv, dv), dtype, device, gen),
        **meta,
        "scale": float(scale),
        "bs": int(bs),
    }
    return Case(inputs, outputs=("o", "lse"), label=label, meta={"seq_lens": list(lengths)})


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row; ``shrink`` keeps <= 3 sequences of <= 3 blocks plus each row's ragged tail."""
    (dtype,) = w.dtypes()
    _, h, dk = w.shape("q")
    _, h_kv, dv = w.shape("v_cmp")
    bs = int(w.params["bs"])
    lengths = seq_lengths(w)
    if shrink:
        lengths = shrink_lengths(lengths, bs)
    return build_case(lengths, h, h_kv, dk, dv, dtype, w.params["scale"], bs, device, seed, w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 0..4 sequences of lengths 0, 1, < bs, whole blocks or ragged (<= 160 tokens); bs 16 / 32
    / 64; G 1..16 incl. non-powers of two; DK and DV drawn apart in [1, 256]; scale from DK^-1/2 / 4 to 4·DK^-1/2;
    sometimes q and k_cmp / v_cmp as head slices of wider tensors."""
    gen = testing.generator(seed)
    dtype = fuzz_dtype(gen)
    bs = random_choice(gen, [16, 32, 64])
    g, h_kv = random_choice(gen, [1, 2, 3, 4, 5, 8, 16]), random_int(gen, 1, 2)
    dk, dv = random_choice(gen, FUZZ_DIMS), random_choice(gen, FUZZ_DIMS)
    scale = dk**-0.5 * random_choice(gen, [0.25, 1.0, 4.0])
    lengths = fuzz_lengths(gen, bs, max_tokens=160)
    case = build_case(lengths, g * h_kv, h_kv, dk, dv, dtype, scale, bs, device, seed, f"fuzz-{seed}")
    a = case.inputs
    if random_int(gen, 0, 1):
        (a["q"],) = head_slices(a["q"])
    if dk == dv and random_int(gen, 0, 1):
        a["k_cmp"], a["v_cmp"] = head_slices(a["k_cmp"], a["v_cmp"])
    return case


FUZZ_DIMS = (1, 8, 40, 64, 72, 128, 192, 256)


def pairs_and_rows(lengths, bs: int) -> tuple[int, int]:
    """``Σ_n Σ_{t<len} floor((t+1)/bs)`` (visible (token, chunk) pairs per head) and the rows with >= 1."""
    pairs = rows = 0
    for n in lengths:
        a, r = divmod(int(n), bs)
        pairs += bs * a * (a - 1) // 2 + a * (r + 1)
        rows += max(0, int(n) - bs + 1)
    return pairs, rows


def cost(case: Case) -> Cost:
    a = case.inputs
    _, h, dk = a["q"].shape
    dv = a["v_cmp"].shape[2]
    lengths = (a["offsets"][1:] - a["offsets"][:-1]).tolist()
    pairs, rows = pairs_and_rows(lengths, a["bs"])
    reads = sum(nbytes(a[k]) for k in ("q", "k_cmp", "v_cmp", "offsets", "chunk_offsets", "token_indices"))
    writes = a["q"].shape[0] * h * (dv + 1) * a["q"].element_size()  # o and lse, both in q's dtype
    return Cost(flops=attention_flops(h, pairs, rows, dk, dv), bytes=reads + writes, roof=roof_for(a["q"].dtype))


def empty_rows(case: Case) -> torch.Tensor:
    """``[T_q]`` bool: tokens with no closed chunk (``t + 1 < bs``)."""
    pos = case.inputs["token_indices"][:, 1].long().cpu()
    return pos + 1 < case.inputs["bs"]


def compare(out: dict, ref: dict, case: Case) -> None:
    lowp_o, lowp_lse = case.memo("lowp", lambda: nsa_compressed_varlen_fwd_lowp(**case.inputs))
    testing.assert_close_dual("o", out["o"], ref["o"], lowp_o)
    testing.assert_close_dual("lse", out["lse"], ref["lse"], lowp_lse)
    empty = empty_rows(case)
    assert_empty_rows_zero("o", out["o"], ref["o"], empty)
    assert_empty_rows_zero("lse", out["lse"], ref["lse"], empty)


SPEC = OpSpec(
    name=OP,
    family="attn-nsa",
    fn=nsa_compressed_varlen_fwd,
    reference=nsa_compressed_varlen_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
    deterministic=True,  # no atomics: each (token tile, KV head) program reduces its chunks in a fixed order
)
