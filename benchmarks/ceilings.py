"""The two ceilings measured once per run on the GPU at hand: device-to-device copy bandwidth (bytes
read + written) and a large bf16 matrix product, both on random data and timed like every op."""

from __future__ import annotations

import torch

from .timing import L2Flusher, profile_iterations


def _copy_tb_s(flush: L2Flusher, n: int = 1 << 30) -> float:
    """2 GiB of bf16 copied device to device (far past L2); bytes read plus bytes written."""
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = sorted(profile_iterations(lambda: dst.copy_(src), 20, flush, count_copies=True))[10]
    return 2 * n * src.element_size() / (ms * 1e-3) / 1e12


def _matmul_tflop_s(flush: L2Flusher, m: int = 8192) -> float:
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    ms = sorted(profile_iterations(lambda: a @ b, 20, flush))[10]
    return 2 * m**3 / (ms * 1e-3) / 1e12


def measure_ceilings(flush: L2Flusher) -> dict[str, float]:
    return {"copy_tb_s": _copy_tb_s(flush), "bf16_matmul_tflop_s": _matmul_tflop_s(flush)}
