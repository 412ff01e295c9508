"""The 223 seed benchmark rows (``data/seed.json``, copied from the shared workload catalog), with
their published TileOPs and peer timings. Each op's ``spec.py`` selects its rows from here."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import torch

DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "fp8e4m3": torch.float8_e4m3fn,
    "i32": torch.int32,
    "i64": torch.int64,
}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype name {name!r}; expected one of {sorted(DTYPES)}") from None


@dataclass(frozen=True)
class Published:
    """What the seed page printed for a row (H200, TileOPs' harness)."""

    tileops_ms: float | None
    alternatives: tuple[tuple[str, float], ...]
    ratio: float | None
    ratio_alt: str | None
    sol: float | None
    bound: str | None

    def best_peer(self) -> tuple[str, float] | None:
        peers = [(n, ms) for n, ms in self.alternatives if not n.endswith("-ref")]
        return min(peers, key=lambda p: p[1]) if peers else None


@dataclass(frozen=True)
class Workload:
    id: str
    op: str
    name: str
    dtype: str
    tensors: dict[str, dict[str, Any]]
    params: dict[str, Any]
    published: Published
    page_issues: tuple[str, ...] = field(default=())

    def shape(self, tensor: str) -> tuple[int, ...]:
        return tuple(self.tensors[tensor]["shape"])

    def has(self, tensor: str) -> bool:
        return tensor in self.tensors

    def dtypes(self) -> list[torch.dtype]:
        """The row's dtype string split at '/', e.g. 'bf16/fp8e4m3' -> [bfloat16, float8_e4m3fn]."""
        return [parse_dtype(p) for p in self.dtype.split("/")]

    def tensor_dtype(self, tensor: str) -> torch.dtype | None:
        name = self.tensors[tensor].get("dtype")
        return parse_dtype(name) if name else None


def _workload(row: dict) -> Workload:
    return Workload(
        id=row["id"],
        op=row["op"],
        name=row["workload"],
        dtype=row["dtype"],
        tensors=row["tensors"],
        params={k: v for k, v in row["params"].items() if k != "truncated_lists"},
        published=Published(
            tileops_ms=row.get("ours_ms"),
            alternatives=tuple((a["name"], a["ms"]) for a in row.get("alternatives", [])),
            ratio=row.get("ratio"),
            ratio_alt=row.get("ratio_alt"),
            sol=row.get("sol"),
            bound=row.get("bound"),
        ),
        page_issues=tuple(i["detail"] for i in row.get("page_issues", [])),
    )


@functools.cache
def all_workloads() -> tuple[Workload, ...]:
    text = resources.files("attnops.kernel_utils").joinpath("data/seed.json").read_text()
    return tuple(_workload(r) for r in json.loads(text))


def workloads_for(op: str) -> tuple[Workload, ...]:
    rows = tuple(w for w in all_workloads() if w.op == op)
    if not rows:
        raise KeyError(f"no seed workloads for op {op!r}")
    return rows
