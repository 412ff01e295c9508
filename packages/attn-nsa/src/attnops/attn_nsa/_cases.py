"""Case-building helpers shared by the family's ``spec.py`` files (seed row -> packed batch)."""

from __future__ import annotations

import torch


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

