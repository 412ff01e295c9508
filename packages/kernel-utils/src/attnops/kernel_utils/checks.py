"""Argument checks shared by every op's ``op.py``: each failure names the argument, what was expected
and what was given, and happens before any launch.

Checks that need values from the device (index ranges) would force a host sync on every call, which
breaks CUDA-graph capture and costs more than a small kernel. They run when the tensors live on the CPU,
or when ``ATTNOPS_VALIDATE=1``; kernels never read or write outside their tensors either way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

# Shape entries: an int must match exactly; None matches anything.
ShapeSpec = Sequence[int | None]


def _fmt_dtypes(dtypes: Iterable[torch.dtype]) -> str:
    return " or ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    t: object,
    *,
    dtype: torch.dtype | Iterable[torch.dtype] | None = None,
    shape: ShapeSpec | None = None,
    ndim: int | None = None,
    device: torch.device | None = None,
    inner_contiguous: int = 0,
) -> torch.Tensor:
    """Validate one tensor argument; ``inner_contiguous=n`` requires the last n dims to be dense."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if t.dtype not in allowed:
            raise TypeError(f"{name}: expected dtype {_fmt_dtypes(allowed)}, got {_fmt_dtypes([t.dtype])}")
    want_ndim = len(shape) if shape is not None else ndim
    if want_ndim is not None and t.dim() != want_ndim:
        raise ValueError(f"{name}: expected {want_ndim} dims, got shape {tuple(t.shape)}")
    if shape is not None:
        for axis, (want, got) in enumerate(zip(shape, t.shape)):
            if want is not None and want != got:
                expected = tuple("*" if s is None else s for s in shape)
                raise ValueError(
                    f"{name}: expected shape {expected}, got {tuple(t.shape)} (dim {axis}: {want} != {got})"
                )
    if device is not None and t.device.type != device.type:
        raise ValueError(f"{name}: expected a tensor on {device.type}, got {t.device}")
    if inner_contiguous:
        expected_stride = 1
        for axis in range(t.dim() - 1, t.dim() - 1 - inner_contiguous, -1):
            if t.shape[axis] > 1 and t.stride(axis) != expected_stride:
                raise ValueError(
                    f"{name}: the last {inner_contiguous} dims must be contiguous, got strides {t.stride()}"
                )
            expected_stride *= t.shape[axis]
    return t


def check_scale(name: str, scale: object, device: torch.device, shape: ShapeSpec = (1,)) -> torch.Tensor:
    t = check_tensor(name, scale, dtype=torch.float32, device=device)
    if t.numel() == 1 and tuple(shape) == (1,):
        return t.reshape(1)
    return check_tensor(name, t, shape=shape)


def validate_values(*tensors: torch.Tensor) -> bool:
    """Whether to run value checks (index ranges) that read device memory on the host."""
    if os.environ.get("ATTNOPS_VALIDATE", "0") not in ("", "0"):
        return True
    return all(t.device.type == "cpu" for t in tensors)


def check_index_range(name: str, t: torch.Tensor, low: int, high: int, *, ignore_below: int | None = None):
    """Raise unless every entry lies in ``[low, high)``; entries below ``ignore_below`` are skipped."""
    if t.numel() == 0:
        return
    vals = t if ignore_below is None else t[t >= ignore_below]
    if vals.numel() == 0:
        return
    lo, hi = int(vals.min()), int(vals.max())
    if lo < low or hi >= high:
        bad = lo if lo < low else hi
        raise ValueError(f"{name}: entries must lie in [{low}, {high}), got {bad}")


def check_cu_seqlens(name: str, cu: torch.Tensor, total: int | None = None):
    """A ``[B+1]`` exclusive prefix sum starting at 0, non-decreasing, ending at ``total``."""
    if cu.numel() == 0 or int(cu[0]) != 0:
        raise ValueError(f"{name}: must start at 0, got {cu[:1].tolist()}")
    if bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"{name}: must be non-decreasing, got {cu.tolist()[:16]}")
    if total is not None and int(cu[-1]) != total:
        raise ValueError(f"{name}: last entry must equal the packed length {total}, got {int(cu[-1])}")
