"""Out-of-bounds detection for kernels run by Triton's interpreter (the CPU half of compute-sanitizer's memcheck).

The interpreter dereferences raw host addresses without any check, so a kernel that reads past its tensors
passes on the CPU (it reads whatever lies there) and faults on the GPU. ``install()`` wraps the interpreter:
every kernel argument becomes a pointer that carries the byte range of its storage, and pointers derived from it
keep that range (offsets, splat / broadcast / reshape / transpose / split / join, a select between pointers of
the same argument); every load, store and atomic checks that each address it touches with the mask on lies
inside the range of the argument it came from, so reading past ``q`` into ``k`` fails too. A pointer whose origin
is lost (built from an integer, a select between two arguments, a descriptor's materialized tile) is held to the
weaker rule: inside the storage of some argument of the launch. A violation raises :class:`OutOfBoundsAccess`
naming the access and the first offending address.

The test plugin installs it for every interpreter run (``ATTNOPS_BOUNDS_CHECK=0`` turns it off).
"""

from __future__ import annotations

import numpy as np
import torch

_RANGES: list[np.ndarray] = [np.zeros(0, np.uint64), np.zeros(0, np.uint64)]  # sorted starts, their ends
_ORIGIN = "attnops_storage"  # TensorHandle.attr key: (start, end) of the storage a pointer was derived from
_installed = False


class OutOfBoundsAccess(AssertionError):
    """A kernel touched an address outside the tensor argument its pointer came from."""


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


def check(kind: str, ptrs, mask, element_bytes: int, origin: tuple[int, int] | None = None) -> None:
    """Raise if an address of ``ptrs`` (a uint64 array) with ``mask`` on (None: all) is out of range: outside
    ``origin`` (the storage the pointer came from) if known, else outside every argument of the launch."""
    addrs = np.asarray(ptrs, dtype=np.uint64)
    if mask is not None:
        addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)]
    addrs = addrs.reshape(-1)
    if addrs.size == 0:
        return
    if origin is not None:
        starts, ends = np.array([origin[0]], np.uint64), np.array([origin[1]], np.uint64)
    else:
        starts, ends = _RANGES
    slot = np.searchsorted(starts, addrs, side="right").astype(np.int64) - 1
    inside = slot >= 0
    inside[inside] &= addrs[inside] + np.uint64(element_bytes) <= ends[slot[inside]]
    if not inside.all():
        bad = int(addrs[~inside][0])
        where = "its argument" if origin is not None else "every tensor argument"
        ranges = ", ".join(f"[{int(a):#x}, {int(b):#x})" for a, b in zip(starts, ends))
        raise OutOfBoundsAccess(f"{kind}: {int((~inside).sum())} of {addrs.size} addresses outside {where}, "
                                f"first {bad:#x}; range(s): {ranges}")


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

    def origin(handle):
        return handle.attr.get(_ORIGIN)

    def load_checked(ptrs, mask, other, *rest, **kw):
        check("load", ptrs.data, mask.data, _element_bytes(ptrs), origin(ptrs))
        return load(ptrs, mask, other, *rest, **kw)

    def store_checked(ptrs, value, mask, *rest, **kw):
        check("store", ptrs.data, mask.data, _element_bytes(ptrs), origin(ptrs))
        return store(ptrs, value, mask, *rest, **kw)

    def rmw_checked(op, ptr, val, mask, *rest, **kw):
        check("atomic", ptr.data, mask.data, _element_bytes(ptr), origin(ptr))
        return rmw(op, ptr, val, mask, *rest, **kw)

    def cas_checked(ptr, cmp, val, *rest, **kw):
        check("atomic_cas", ptr.data, None, _element_bytes(ptr), origin(ptr))
        return cas(ptr, cmp, val, *rest, **kw)

    convert = interpreter._implicit_cvt

    def convert_tracked(arg):  # a kernel argument becomes a pointer that knows its storage
        out = convert(arg)
        if isinstance(arg, torch.Tensor):
            storage = arg.untyped_storage()
            out.handle.attr[_ORIGIN] = (storage.data_ptr(), storage.data_ptr() + storage.nbytes())
        return out

    def keep_origin(method, *sources):
        """Wrap ``method`` so its result keeps the origin of its pointer operands (positions ``sources``)
        when they all share one; results that are tuples (split) get it on every element."""
        def wrapped(*args, **kw):
            out = method(*args, **kw)
            found = {origin(args[i]) for i in sources if i < len(args) and hasattr(args[i], "attr")}
            if len(found) == 1 and None not in found:
                for o in out if isinstance(out, tuple) else (out,):
                    if hasattr(o, "attr"):
                        o.attr[_ORIGIN] = next(iter(found))
            return out
        return wrapped

    for name, sources in (("create_addptr", (0,)), ("create_splat", (1,)), ("create_expand_dims", (0,)),
                          ("create_broadcast", (0,)), ("create_trans", (0,)), ("create_reshape", (0,)),
                          ("create_unsplat", (0,)), ("create_split", (0,)), ("create_cat", (0, 1)),
                          ("create_join", (0, 1)), ("create_select", (1, 2))):
        setattr(builder, name, keep_origin(getattr(builder, name), *sources))
    interpreter._implicit_cvt = convert_tracked
    interpreter.GridExecutor._init_args_hst = init_args_checked
    builder.create_masked_load, builder.create_masked_store = load_checked, store_checked
    builder.create_atomic_rmw, builder.create_atomic_cas = rmw_checked, cas_checked
    _installed = True
