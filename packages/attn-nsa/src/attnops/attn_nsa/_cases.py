"""Case-building helpers shared by the family's ``spec.py`` files (seed row -> packed batch)."""

from __future__ import annotations

import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.reliability import random_choice, random_int


def seq_lengths(w) -> list[int]:
    lens = [int(n) for n in w.params["seq_lens"]]
    total = w.shape("q")[0]
    if sum(lens) != total:  # the page truncates long lists; the packed total is authoritative
        raise ValueError(f"{w.id}: seq_lens sum to {sum(lens)}, q has {total} rows")
    return lens


def shrink_lengths(lens: list[int], bs: int, *, max_seqs: int = 3, full_blocks: int = 3) -> list[int]:
    """At most ``max_seqs`` sequences of at most ``full_blocks`` whole blocks plus the row's own partial tail
    (``len % bs``), so ragged tails and sub-block sequences survive the shrink."""
    return [min(n, full_blocks * bs + n % bs) for n in lens[:max_seqs]]


def assert_empty_rows_zero(name: str, out: torch.Tensor, ref: torch.Tensor, empty: torch.Tensor):
    """Rows the spec defines as empty (``empty`` bool over the leading dims) must be exact zeros."""
    if not bool(empty.any()):
        return
    got = out.detach().float().cpu()[empty.cpu()]
    if not bool((got == 0).all()):
        bad = int((got != 0).flatten(1).any(1).sum()) if got.dim() > 1 else int((got != 0).sum())
        raise AssertionError(f"{name}: {bad} empty rows (no visible key) are not exact zeros")
    want = ref.detach().float().cpu()[empty.cpu()]
    assert bool((want == 0).all()), f"{name}: the reference itself has non-zero empty rows"



# ---------------------------------------------------------------------------------------------------
# Fuzzing (``SPEC.fuzz``): draws shared by the three ops' generators


def fuzz_dtype(gen: torch.Generator) -> torch.dtype:
    """f16 under the interpreter (it rounds bf16 arithmetic wrongly), f16 or bf16 on the GPU."""
    return random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])


def fuzz_lengths(gen: torch.Generator, bs: int, max_tokens: int, max_seqs: int = 4) -> list[int]:
    """0..``max_seqs`` sequences (rarely none), each of length 0, 1, shorter than a block, whole blocks, or whole
    blocks plus a ragged tail, cut to ``max_tokens`` in total (the interpreter pays per token)."""
    count = 0 if random_int(gen, 0, 15) == 0 else random_int(gen, 1, max_seqs)
    lengths: list[int] = []
    for _ in range(count):
        room = max_tokens - sum(lengths)
        kind = random_choice(gen, ["zero", "one", "short", "whole", "ragged", "ragged"])
        blocks = random_int(gen, 1, max(1, (room - 1) // bs))
        n = {"zero": 0, "one": 1, "short": random_int(gen, 2, bs - 1), "whole": blocks * bs,
             "ragged": blocks * bs + random_int(gen, 1, bs - 1)}[kind]
        lengths.append(max(0, min(n, room)))
    return lengths


def head_slices(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """The same values as head slices of one wider tensor (``[rows, ΣH + 1, D]``, as a fused projection returns
    them: token stride > H·D), whose spare last head is NaN so that a kernel reading past its heads fails."""
    spare = testing.poisoned((tensors[0].shape[0], 1, tensors[0].shape[2]), tensors[0].dtype, tensors[0].device)
    wide = torch.cat([*tensors, spare], dim=1)
    views, first = [], 0
    for t in tensors:
        views.append(wide[:, first : first + t.shape[1]])
        first += t.shape[1]
    return views
