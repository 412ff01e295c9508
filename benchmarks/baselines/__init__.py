"""Peer implementations ("alternatives") of each op, for the benchmark harness only.

An adapter translates one op's call (a ``Case``) into a peer's API and returns a ``Runner``: a zero-
argument launch plus a way to read its outputs for the correctness check. Peers are imported lazily
inside the adapter; an adapter whose peer is missing or cannot serve the row returns ``None`` (or raises
``Unsupported`` with the reason), and the harness records why.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnops.kernel_utils.opspec import Case


class Unsupported(Exception):
    """The peer cannot run this row (missing library, unsupported dtype / feature)."""


@dataclass
class Runner:
    run: Callable[[], object]
    outputs: Callable[[], dict[str, torch.Tensor]]
    note: str = ""  # e.g. "KV heads expanded before the call", shown beside the time
    setup_s: float = 0.0  # JIT compile / plan time spent outside the timed region


@dataclass
class Adapter:
    name: str  # as on the seed page: "vllm", "flashinfer", "torch-ref", ...
    op: str
    prepare: Callable[[Case], Runner]
    reference_like: bool = field(default=False)  # names ending "-ref": timed, never rated


ADAPTERS: dict[str, list[Adapter]] = {}

FAMILY_MODULES = {
    "kvcache-ops": "benchmarks.baselines.kvcache_ops",
    "attn-core": "benchmarks.baselines.attn_core",
    "attn-mla": "benchmarks.baselines.attn_mla",
    "attn-nsa": "benchmarks.baselines.attn_nsa",
}


def adapter(name: str, op: str):
    def register(prepare: Callable[[Case], Runner]):
        ADAPTERS.setdefault(op, []).append(Adapter(name, op, prepare, reference_like=name.endswith("-ref")))
        return prepare

    return register


def adapters_for(op: str, family: str) -> list[Adapter]:
    module = FAMILY_MODULES.get(family)
    if module is not None:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
    return ADAPTERS.get(op, [])


def require(module: str):
    """Import a peer library or raise ``Unsupported`` naming it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise Unsupported(f"{module} not importable: {e}") from None


def runner_of(fn: Callable[..., object], case: Case, **kwargs) -> Runner:
    """A Runner that calls ``fn(**case.inputs)`` and keeps the last result for the check."""
    last: dict[str, object] = {}

    def run():
        last["result"] = fn(**case.inputs)

    return Runner(run, lambda: case.collect(last.get("result")), **kwargs)


def compiled_runner(fn: Callable[..., object], case: Case) -> Runner:
    """``torch.compile`` of an eager torch composition of the op, compiled and warmed outside the timing."""
    compiled = torch.compile(fn, dynamic=False)
    start = time.perf_counter()
    compiled(**case.fresh().inputs)
    if torch.cuda.is_available():  # (the CPU smoke runs the adapters too)
        torch.cuda.synchronize()
    return runner_of(compiled, case, setup_s=time.perf_counter() - start)


def rope_torch(x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, r: int,
               interleaved: bool) -> torch.Tensor:
    """RoPE of ``x [n, heads, D]`` at ``pos [n]`` with ``[P, R/2]`` tables, in x's dtype (torch ops)."""
    c, s = cos[pos][:, None, :].float(), sin[pos][:, None, :].float()
    xf = x.float()
    out = xf.clone()
    if interleaved:
        x0, x1 = xf[..., 0:r:2], xf[..., 1:r:2]
        out[..., 0:r:2], out[..., 1:r:2] = x0 * c - x1 * s, x1 * c + x0 * s
    else:
        h = r // 2
        x0, x1 = xf[..., :h], xf[..., h:r]
        out[..., :h], out[..., h:r] = x0 * c - x1 * s, x1 * c + x0 * s
    return out.to(x.dtype)
