"""Packing metadata shared by the three NSA ops (spec attn-nsa.md): building it from lengths, and checking
what a caller passed.

* ``offsets [N+1]`` i32: token prefix sums of the N sequences;
* ``chunk_offsets [N+1]`` i32: prefix sums of ``ceil(len_n / bs)`` (compressed rows of sequence n);
* ``token_indices [T_q, 2]`` i32: per packed token ``(sequence id n, position t inside n)``.

Structural checks (dtype, shape, device) always run. Value checks read the tensors on the host, so they run
only when the tensors live on the CPU or ``ATTNOPS_VALIDATE=1`` (``checks.validate_values``); kernels mask every
row they read against the tensor bounds either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attnops.kernel_utils import checks

ACTIVATIONS = (torch.float16, torch.bfloat16)


def chunk_counts(lengths: Sequence[int], bs: int) -> list[int]:
    return [math.ceil(int(n) / bs) for n in lengths]


def prefix_sums(counts: Sequence[int], device) -> torch.Tensor:
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c))
    return torch.tensor(out, dtype=torch.int32, device=device)


def token_indices_of(lengths: Sequence[int], device) -> torch.Tensor:
    """``[sum(lengths), 2]`` int32 rows ``(n, t)`` (FLA ``prepare_token_indices``)."""
    seq = [torch.full((int(n),), i, dtype=torch.int32) for i, n in enumerate(lengths)]
    pos = [torch.arange(int(n), dtype=torch.int32) for n in lengths]
    if not seq:
        return torch.zeros((0, 2), dtype=torch.int32, device=device)
    return torch.stack([torch.cat(seq), torch.cat(pos)], dim=1).to(device)


def varlen_metadata(lengths: Sequence[int], bs: int, device) -> dict[str, torch.Tensor]:
    """``offsets``, ``chunk_offsets`` and ``token_indices`` of a packed batch with these lengths."""
    return {
        "offsets": prefix_sums(lengths, device),
        "chunk_offsets": prefix_sums(chunk_counts(lengths, bs), device),
        "token_indices": token_indices_of(lengths, device),
    }


def check_scale_param(scale: object) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale: expected a Python float, got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: must be finite and > 0, got {scale}")
    return scale


def check_int_param(name: str, value: object, low: int, high: int, *, power_of_two: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a Python int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: must lie in [{low}, {high}], got {value}")
    if power_of_two and value & (value - 1):
        raise ValueError(f"{name}: must be a power of two, got {value}")
    return value


def check_heads(q_heads: int, kv_heads: int, kv_name: str) -> int:
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(
            f"{kv_name}: {kv_heads} KV heads must divide the {q_heads} query heads of q (GQA: head h uses h // G)"
        )
    return q_heads // kv_heads


def check_packing(
    offsets: object,
    token_indices: object,
    num_tokens: int,
    device: torch.device,
    *,
    chunk_offsets: object = None,
    bs: int | None = None,
    num_chunks: int | None = None,
) -> int:
    """Check ``offsets`` / ``token_indices`` (and ``chunk_offsets`` when given) for a packed batch of
    ``num_tokens`` query rows; returns the number of sequences N."""
    checks.check_tensor("offsets", offsets, dtype=torch.int32, ndim=1, device=device, inner_contiguous=1)
    if offsets.numel() < 1:
        raise ValueError("offsets: expected shape (N+1,) with N >= 0, got an empty tensor")
    n = offsets.numel() - 1
    checks.check_tensor("token_indices", token_indices, dtype=torch.int32, shape=(num_tokens, 2), device=device,
                        inner_contiguous=2)
    if chunk_offsets is not None:
        checks.check_tensor("chunk_offsets", chunk_offsets, dtype=torch.int32, shape=(n + 1,), device=device,
                            inner_contiguous=1)
    if not checks.validate_values(*(t for t in (offsets, token_indices, chunk_offsets) if t is not None)):
        return n
    checks.check_cu_seqlens("offsets", offsets, num_tokens)
    lengths = (offsets[1:] - offsets[:-1]).long().cpu()
    if chunk_offsets is not None:
        want = prefix_sums(chunk_counts(lengths.tolist(), bs), "cpu")
        got = chunk_offsets.cpu()
        if not torch.equal(got, want):
            i = int((got != want).nonzero()[0])
            raise ValueError(
                f"chunk_offsets: must be the prefix sums of ceil(len_n / bs) = ceil(len_n / {bs}) over offsets; "
                f"entry {i} is {int(got[i])}, expected {int(want[i])}"
            )
        if num_chunks is not None and int(want[-1]) != num_chunks:
            raise ValueError(
                f"k_cmp: has {num_chunks} compressed rows, but chunk_offsets[N] = {int(want[-1])}"
            )
    want_ti = token_indices_of(lengths.tolist(), "cpu")
    got_ti = token_indices.cpu()
    if not torch.equal(got_ti, want_ti):
        i = int((got_ti != want_ti).any(1).nonzero()[0])
        raise ValueError(
            f"token_indices: row {i} is {tuple(got_ti[i].tolist())}, but offsets place packed token {i} at "
            f"(sequence, position) = {tuple(want_ti[i].tolist())}"
        )
    return n


def check_tile_strides(name: str, t: torch.Tensor, rows_per_tile: int = 128):
    """Kernels address a tile as an int64 base plus int32 offsets: ``rows_per_tile`` token rows of ``t`` must
    span fewer than 2^31 elements."""
    span = rows_per_tile * max(abs(t.stride(0)), 1) + t.shape[1] * max(abs(t.stride(1)), 1)
    if span >= 2**31:
        raise ValueError(f"{name}: strides {tuple(t.stride())} are too large (a 128-token tile spans >= 2^31 "
                         "elements); pass a compact tensor")
