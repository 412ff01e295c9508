"""Out-of-bounds detection for kernels run by Triton's interpreter (the CPU half of compute-sanitizer's memcheck).

The interpreter dereferences raw host addresses without any check, so a kernel that reads past its tensors
passes on the CPU (it reads whatever lies there) and faults on the GPU. ``install()`` wraps the interpreter:
each launch records the byte ranges of the storages behind its tensor arguments, and every load, store and
atomic checks that each address it touches with the mask on lies inside one of them (an address inside some
other argument's storage passes: the check catches stray addresses, not a mix-up of two arguments). A
violation raises :class:`OutOfBoundsAccess` naming the access and the first offending address.

The test plugin installs it for every interpreter run (``ATTNOPS_BOUNDS_CHECK=0`` turns it off).
"""

from __future__ import annotations

import numpy as np
import torch

_RANGES: list[np.ndarray] = [np.zeros(0, np.uint64), np.zeros(0, np.uint64)]  # sorted starts, their ends
_installed = False


class OutOfBoundsAccess(AssertionError):
    """A kernel touched an address outside every tensor argument of its launch."""


def _storages(arg, found: dict[int, int]) -> None:
    if isinstance(arg, torch.Tensor):
        storage = arg.untyped_storage()
        found[storage.data_ptr()] = max(found.get(storage.data_ptr(), 0), storage.nbytes())
    elif isinstance(arg, (tuple, list)):
        for a in arg:
            _storages(a, found)
    elif isinstance(getattr(arg, "base", None), torch.Tensor):  # a tensor descriptor
        _storages(arg.base, found)


def _record(args, kwargs) -> None:
    found: dict[int, int] = {}
    _storages(list(args) + list(kwargs.values()), found)
    starts = np.array(sorted(found), dtype=np.uint64)
    ends = np.array([s + found[int(s)] for s in starts.tolist()], dtype=np.uint64)
    _RANGES[:] = [starts, ends]


def check(kind: str, ptrs, mask, element_bytes: int) -> None:
    """Raise if an address of ``ptrs`` (a uint64 array) with ``mask`` on (None: all) is out of range."""
    addrs = np.asarray(ptrs, dtype=np.uint64)
    if mask is not None:
        addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)]
    addrs = addrs.reshape(-1)
    if addrs.size == 0:
        return
    starts, ends = _RANGES
    slot = np.searchsorted(starts, addrs, side="right").astype(np.int64) - 1
    inside = slot >= 0
    inside[inside] &= addrs[inside] + np.uint64(element_bytes) <= ends[slot[inside]]
    if not inside.all():
        bad = int(addrs[~inside][0])
        near = ", ".join(f"[{int(s):#x}, {int(e):#x})" for s, e in zip(starts, ends))
        raise OutOfBoundsAccess(f"{kind}: {int((~inside).sum())} of {addrs.size} addresses outside every "
                                f"tensor argument, first {bad:#x}; arguments: {near}")


def _element_bytes(ptr_handle) -> int:
    return max(ptr_handle.get_element_ty().primitive_bitwidth // 8, 1)


def installed() -> bool:
    return _installed


def install() -> None:
    """Wrap Triton's interpreter once per process (no effect on compiled GPU launches)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    init_args = interpreter.GridExecutor._init_args_hst

    def init_args_checked(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        _record(args_hst, kwargs_hst)
        return args_hst, kwargs_hst

    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def load_checked(ptrs, mask, other, *rest, **kw):
        check("load", ptrs.data, mask.data, _element_bytes(ptrs))
        return load(ptrs, mask, other, *rest, **kw)

    def store_checked(ptrs, value, mask, *rest, **kw):
        check("store", ptrs.data, mask.data, _element_bytes(ptrs))
        return store(ptrs, value, mask, *rest, **kw)

    def rmw_checked(op, ptr, val, mask, *rest, **kw):
        check("atomic", ptr.data, mask.data, _element_bytes(ptr))
        return rmw(op, ptr, val, mask, *rest, **kw)

    def cas_checked(ptr, cmp, val, *rest, **kw):
        check("atomic_cas", ptr.data, None, _element_bytes(ptr))
        return cas(ptr, cmp, val, *rest, **kw)

    interpreter.GridExecutor._init_args_hst = init_args_checked
    builder.create_masked_load, builder.create_masked_store = load_checked, store_checked
    builder.create_atomic_rmw, builder.create_atomic_cas = rmw_checked, cas_checked
    _installed = True
