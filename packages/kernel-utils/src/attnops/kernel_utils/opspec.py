"""The declaration every op makes in its ``spec.py``: its seed workloads, how a workload becomes a
call (full size or shrunk for the interpreter), its reference, its cost and its acceptance rule. Tests,
the benchmark harness and the report all read this one object."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import testing
from .cost import Cost
from .workloads import Workload


@dataclass
class Case:
    """One concrete call: keyword arguments for the public function (tensors and params).

    ``outputs`` names what the call produces. For in-place ops these are keys of ``inputs`` that the
    call mutates; otherwise they name the returned tensors, in order.
    """

    inputs: dict[str, Any]
    outputs: tuple[str, ...]
    inplace: bool = False
    label: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def fresh(self) -> Case:
        """A copy whose tensors can be mutated without touching this case (for in-place ops)."""
        inputs = {k: (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)) for k, v in self.inputs.items()}
        return Case(inputs, self.outputs, self.inplace, self.label, self.meta)

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()`` once per state of this case's input tensors (kept in ``meta`` with their identities and
        version counters: replacing or writing an input makes it again): e.g. the low-precision baseline every
        implementation's output is compared against, half of a benchmark row's wall time when each comparison
        made it again."""
        stamp = tuple((k, id(v), v._version) for k, v in self.inputs.items() if isinstance(v, torch.Tensor))
        held = self.meta.get(key)
        if held is None or held[0] != stamp:
            held = self.meta[key] = (stamp, make())
        return held[1]

    def run(self, fn: Callable[..., Any]) -> dict[str, torch.Tensor]:
        """Call ``fn(**inputs)`` and collect the named outputs."""
        return self.collect(fn(**self.inputs))

    def run_untouched(self, fn: Callable[..., Any]) -> dict[str, torch.Tensor]:
        """``run``, then check that every input tensor the call may not write (all of them, or all but the
        mutated outputs of an in-place op) kept its bits: a kernel storing through a wrong base pointer
        into an input fails here even when its outputs are right."""
        written = set(self.outputs) if self.inplace else set()
        before = {k: v.clone() for k, v in self.inputs.items() if isinstance(v, torch.Tensor) and k not in written}
        out = self.run(fn)
        for name, old in before.items():
            testing.assert_bitwise(f"input {name} (the call must not write it)", self.inputs[name], old)
        return out

    def collect(self, result: Any) -> dict[str, torch.Tensor]:
        """Name the outputs of one call: the mutated inputs, or the returned tensors in order."""
        if self.inplace:
            return {name: self.inputs[name] for name in self.outputs}
        if isinstance(result, torch.Tensor):
            result = (result,)
        return dict(zip(self.outputs, result))


@dataclass(frozen=True)
class OpSpec:
    name: str  # the card's op name, e.g. "PagedKVCacheWriteFwd"
    family: str  # distribution name, e.g. "kvcache-ops"
    fn: Callable[..., Any]  # the public function
    reference: Callable[..., Any]  # plain-torch fp32 reference with the same signature
    workloads: tuple[Workload, ...]
    make_case: Callable[[Workload, torch.device, bool, int], Case]  # (workload, device, shrink, seed)
    cost: Callable[[Case], Cost]
    compare: Callable[[dict, dict, Case], None]  # raises AssertionError on mismatch
    # Whether Triton's CPU interpreter computes this row correctly: it rounds bf16 arithmetic and casts
    # wrongly, so by default bf16 rows run on the GPU only (a bit copy of bf16 is fine: ops say so).
    interpreter_ok: Callable[[Workload], bool] = lambda w: "bf16" not in w.dtype
    # A seeded generator of valid calls nobody hand-picked (random sizes, lengths 0 and 1, odd pages, shared
    # pages, scales near saturation ...): ``fuzz(seed, device) -> Case``, checked like any case.
    fuzz: Callable[[int, torch.device], Case] | None = None
    # Whether two identical calls give bitwise-identical outputs (False for ops that accumulate with atomics).
    deterministic: bool = True

    def check(
        self, case: Case, fn: Callable[..., Any] | None = None, *, keep_views: bool = False
    ) -> dict[str, torch.Tensor]:
        """Run the op (or ``fn``, e.g. the op pinned to one launch config) and the reference on separate
        copies of ``case`` and compare; returns our outputs. Inputs the op may not write must keep their
        bits. ``keep_views`` runs ours on the case's own tensors, so strided views stay strided
        (``Case.fresh`` clones them dense)."""
        ours = (case if keep_views else case.fresh()).run_untouched(fn or self.fn)
        expected = case.fresh().run(self.reference)
        self.compare(ours, expected, case)
        return ours

    def check_each(self, case: Case, fns: dict[str, Callable[..., Any]]):
        """Several implementations (e.g. every launch config) against one reference run of ``case``; a
        failure names the implementation."""
        expected = case.fresh().run(self.reference)
        for name, fn in fns.items():
            try:
                self.compare(case.fresh().run_untouched(fn), expected, case)
            except AssertionError as e:
                raise AssertionError(f"{name}: {e}") from None
