"""Pieces shared by the GQADenseFwd and GQAVarlenFwd specs: visible-pair counting (the FLOP rule of spec
README §8), input factories (random, fp8-quantized, RoPE tables, sinks) that also work on the ``meta``
device (cost checks without allocating full-size rows), shrinking, and the dual-reference comparison."""

from __future__ import annotations

import math

import torch

from attnops.kernel_utils import testing
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.reliability import random_choice, random_int

FP8_SPREAD = 16.0  # fp8 inputs are N(0, 16²) codes (some saturate at ±448); scales ~1/16 bring them to N(0, 1)
SHRINK_MAX_LEN = 48  # interpreter: longest request after shrinking


def visible_counts(q_len: int, kv_len: int, is_causal: bool, wl: int, wr: int) -> tuple[int, int]:
    """``(scores, rows)`` of one request: visible (query, key) pairs and rows with >= 1 visible key,
    counted row by row on bottom-right positions (spec README §4)."""
    if q_len <= 0 or kv_len <= 0:
        return 0, 0
    pos = torch.arange(q_len, dtype=torch.int64) + (kv_len - q_len)
    hi = torch.full_like(pos, kv_len - 1)
    if is_causal:
        hi = torch.minimum(hi, pos)
    if wr >= 0:
        hi = torch.minimum(hi, pos + wr)
    lo = torch.zeros_like(pos)
    if wl >= 0:
        lo = torch.maximum(lo, pos - wl)
    n = (hi - lo + 1).clamp(min=0)
    return int(n.sum()), int((n > 0).sum())


def rand(shape, dtype: torch.dtype, device, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Fresh N(0, scale²) values (fp8: saturated codes); an uninitialized tensor on the meta device."""
    if torch.device(device).type == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    return testing.randn(shape, dtype, device, gen, scale=scale)


def fp8_scales(batch: int, kv_heads: int, device, gen: torch.Generator) -> torch.Tensor:
    """``[B, H_kv]`` f32 dequant multipliers around 1/FP8_SPREAD (each request and head its own)."""
    if torch.device(device).type == "meta":
        return torch.empty((batch, kv_heads), dtype=torch.float32, device="meta")
    s = (0.5 + torch.rand((batch, kv_heads), generator=gen)) / FP8_SPREAD
    return s.to(device)


def rope_tables(positions: int, rotary_dim: int, dtype: torch.dtype, device, base: float = 10000.0):
    """``[positions, R/2]`` cos / sin of ``pos · base^(−2m/R)``, rounded to ``dtype``."""
    if torch.device(device).type == "meta":
        t = torch.empty((positions, rotary_dim // 2), dtype=dtype, device="meta")
        return t, torch.empty_like(t)
    inv = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    ang = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().to(dtype).to(device), ang.sin().to(dtype).to(device)


def sinks(heads: int, device, gen: torch.Generator) -> torch.Tensor:
    """``[H]`` f32 sink logits, large enough to take a visible share of each row's mass."""
    if torch.device(device).type == "meta":
        return torch.empty((heads,), dtype=torch.float32, device="meta")
    return (torch.randn(heads, generator=gen) * 1.5 + 1.0).to(device)


def shrink_len(x: int, factor: float) -> int:
    """Scale a length down; 0 stays 0 and a positive length stays >= 1 (relations q <= kv are kept)."""
    return 0 if x <= 0 else max(1, math.ceil(x * factor))


def shrink_heads(heads: int, kv_heads: int, max_kv_heads: int = 2) -> tuple[int, int]:
    """Fewer KV heads, same GQA ratio."""
    g = heads // kv_heads
    kv = min(kv_heads, max_kv_heads)
    return g * kv, kv


def input_dtypes(w) -> tuple[torch.dtype, torch.dtype | None]:
    """(q/k/v dtype, out_dtype argument) of a row: 'fp8e4m3/bf16' -> (e4m3, bf16), 'f16' -> (f16, None)."""
    dts = w.dtypes()
    return dts[0], (dts[1] if len(dts) > 1 else None)


def compare_dual(out: dict, ref: dict, case, reference) -> None:
    """Our output against the fp32 reference, accepted within 2× the error of the same reference computed
    in the low-precision dtype (rounded inputs, Q·Kᵀ, P, P·V) plus a floor."""
    out_dt = case.inputs.get("out_dtype") or case.inputs["q"].dtype
    lowp = case.memo("lowp", lambda: reference(**case.inputs, compute_dtype=out_dt))
    floor = 2e-3 if case.inputs["q"].dtype == E4M3 else 1e-3
    testing.assert_close_dual("o", out["o"], ref["o"], lowp, floor=floor)


def fuzz_params(gen: torch.Generator, d: int, causal: bool, rope: bool) -> dict:
    """The mask / scale / RoPE keywords of a fuzzed GQADenseFwd or GQAVarlenFwd call (windows, softcap,
    sm_scale, partial rotary dims, both RoPE layouts), drawn from ``gen``."""
    return {
        "is_causal": causal,
        "window_size_left": random_choice(gen, [-1, -1, 0, random_int(gen, 1, 30)]),
        "window_size_right": random_choice(gen, [-1, -1, random_int(gen, 0, 10)]) if not causal else -1,
        "softcap": random_choice(gen, [None, None, 3.0, 30.0]),
        "sm_scale": random_choice(gen, [None, None, 0.05]),
        "pos_encoding_mode": "rope" if rope else "none",
        "rotary_dim": random_choice(gen, [None, d // 2 - (d // 2) % 2]) if rope else None,
        "rope_layout": random_choice(gen, ["neox", "interleaved"]),
    }
