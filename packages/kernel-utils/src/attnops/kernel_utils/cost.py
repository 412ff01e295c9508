"""The spec's cost model (README §8): analytic FLOPs, algorithmic-minimum bytes, the H200 roofs that
reproduce the published SOL column, and the SOL / Bound rule. Every op's ``spec.py`` prices its
workloads with these helpers and nothing else prices them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Effective H200 ceilings (theoretical × calibration factor) that reproduce the page's SOL column.
HBM_EFF_BYTES_PER_S = 4.8e12 * 0.938
ROOF_EFF_FLOPS = {
    "tensor_core.fp16": 989.5e12 * 0.737,
    "tensor_core.bf16": 989.5e12 * 0.768,
    "tensor_core.fp8": 1979e12 * 0.6977,
    "cuda_core.fp32": 67.0e12 * 0.8548,
}
LATENCY_SOL_S = 3e-6
LATENCY_TIME_S = 20e-6


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    roof: str  # a key of ROOF_EFF_FLOPS

    def t_mem(self, hbm: float = HBM_EFF_BYTES_PER_S) -> float:
        return self.bytes / hbm

    def t_comp(self, roofs: dict[str, float] = ROOF_EFF_FLOPS) -> float:
        return self.flops / roofs[self.roof]

    def t_sol(self, hbm: float = HBM_EFF_BYTES_PER_S, roofs: dict[str, float] = ROOF_EFF_FLOPS) -> float:
        return max(self.t_mem(hbm), self.t_comp(roofs))

    def sol(self, time_s: float, **ceilings) -> float:
        """Fraction of speed-of-light achieved by a measured device time (seconds)."""
        return self.t_sol(**ceilings) / time_s

    def bound(self, time_s: float) -> str:
        if self.t_sol() < LATENCY_SOL_S and time_s < LATENCY_TIME_S:
            return "lat"
        return "mem" if self.t_mem() >= self.t_comp() else "comp"


def attention_flops(heads: int, scores: int, rows: int, d_qk: int, d_v: int, softcap: bool = False) -> float:
    """``heads · (scores · (2·d_qk + 2·d_v + 5 + 3·[softcap]) + rows · d_v)``."""
    return heads * (scores * (2 * d_qk + 2 * d_v + 5 + 3 * int(bool(softcap))) + rows * d_v)


def roof_for(dtype: torch.dtype) -> str:
    """Tensor-core roof key of an attention op's query dtype."""
    if dtype == torch.bfloat16:
        return "tensor_core.bf16"
    if dtype == torch.float16:
        return "tensor_core.fp16"
    if dtype == torch.float8_e4m3fn:
        return "tensor_core.fp8"
    return "cuda_core.fp32"


def nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()
