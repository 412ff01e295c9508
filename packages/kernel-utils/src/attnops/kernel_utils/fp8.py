"""FP8 e4m3 (``float8_e4m3fn``) helpers with the spec's rules (README §6).

Dequantize multiplies by the scale; quantize divides, rounds to nearest even and saturates to ±448
(``Tensor.to`` alone does not saturate, so the clamp is explicit).
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def quantize_e4m3(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """``sat_e4m3(rne(float(x) / scale))``."""
    y = x.float() / (scale.float() if isinstance(scale, torch.Tensor) else float(scale))
    return y.clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def dequantize_e4m3(x: torch.Tensor, scale: torch.Tensor | float, dtype=torch.float32) -> torch.Tensor:
    """``float(x) · scale`` rounded once to ``dtype``."""
    y = x.float() * (scale.float() if isinstance(scale, torch.Tensor) else float(scale))
    return y.to(dtype)
