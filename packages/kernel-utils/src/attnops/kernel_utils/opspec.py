"""The declaration every op makes in its ``spec.py``: its seed workloads, how a workload becomes a
call (full size or shrunk for the interpreter), its reference, its cost and its acceptance rule. Tests,
the benchmark harness and the report all read this one object."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

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

    def run(self, fn: Callable[..., Any]) -> dict[str, torch.Tensor]:
        """Call ``fn(**inputs)`` and collect the named outputs."""
        result = fn(**self.inputs)
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
    test_dtypes_interpreter: tuple[str, ...] = ()  # workload dtypes the interpreter may run

    @property
    def func_name(self) -> str:
        return self.fn.__name__

    def interpreter_ok(self, w: Workload) -> bool:
        """bf16 is computed wrongly by Triton's interpreter: such rows run on the GPU only."""
        return "bf16" not in w.dtype or w.dtype in self.test_dtypes_interpreter
