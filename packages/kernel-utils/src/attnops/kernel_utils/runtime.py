"""Where kernels run: a CUDA GPU, or Triton's interpreter on the CPU.

Importing this module decides once, before any ``@triton.jit`` kernel of attnops is defined: without a
CUDA device, ``TRITON_INTERPRET=1`` is set so the same kernels run (slowly) on CPU tensors. Nothing here
touches the CUDA driver at import beyond ``torch.cuda.is_available()``.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402  (must follow the interpreter decision above)


def interpreting() -> bool:
    """True when Triton kernels run through the CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device() -> torch.device:
    """The device attnops kernels run on here: ``cuda`` when available, else ``cpu`` (interpreter)."""
    return torch.device("cpu") if interpreting() else torch.device("cuda")


@functools.cache
def compute_capability() -> tuple[int, int] | None:
    if interpreting() or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


def is_hopper() -> bool:
    """sm_90: TMA descriptors and warp specialization are available (never under the interpreter)."""
    return compute_capability() == (9, 0)


def dependent_launch() -> bool:
    """Programmatic dependent launch (``launch_pdl=True``, ``griddepcontrol`` in the kernels): sm_90 and later, never
    under the interpreter (it cannot run the ``griddepcontrol`` inline assembly)."""
    cc = compute_capability()
    return cc is not None and cc >= (9, 0)


@functools.cache
def num_sms() -> int:
    """Streaming multiprocessors of the current GPU (132 on an H200); 1 under the interpreter."""
    if interpreting():
        return 1
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _torch_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device=device())


def ensure_descriptor_scratch() -> None:
    """Kernels that build TMA descriptors on the device (``tl.make_tensor_descriptor``) need Triton's
    launch-time scratch allocator. Install one backed by torch's caching allocator unless the caller has
    set their own (Triton keeps it in a context variable: per thread / task). Uses Triton's private
    ``_allocation`` module to look, which is why ``triton`` is pinned."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_torch_scratch)


_COUNTERS: dict[tuple, torch.Tensor] = {}


def arrival_counters(dev: torch.device, n: int) -> torch.Tensor:
    """``n`` int32 zeros for a kernel whose last-arriving program per group resets its counter to 0 (split-KV
    merged in the kernel). One buffer per (device, stream) serves every such call: stream-ordered calls never
    use it at the same time. It only grows (a fresh zeroed allocation)."""
    stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else 0
    key = (dev, stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=dev)
        _COUNTERS[key] = buf
    return buf


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


@contextlib.contextmanager
def side_stream(dev: torch.device, enabled: bool = True):
    """Yield a second stream of ``dev`` (one per device, shared by every caller) forked from the current stream, for
    launches that may run beside what the current stream queues inside the block (queue them with
    ``on_stream``); the current stream joins it on exit. So CUDA-graph capture sees a fork and a join, later work on
    the current stream (and the caching allocator's reuse of the tensors the side launches touched) is ordered
    after them, and calls that take turns on it never overlap each other. Yields None where not ``enabled`` or off
    CUDA (then every launch stays on the current stream)."""
    if not enabled or dev.type != "cuda":
        yield None
        return
    if dev not in _SIDE_STREAMS:
        _SIDE_STREAMS[dev] = torch.cuda.Stream(device=dev)
    main, side = torch.cuda.current_stream(dev), _SIDE_STREAMS[dev]
    side.wait_stream(main)
    try:
        yield side
    finally:
        main.wait_stream(side)


def on_stream(stream: torch.cuda.Stream | None):
    """``torch.cuda.stream(stream)``; for None, no change of stream."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


@contextlib.contextmanager
def pinned(store: dict, **values):
    """Set the non-None ``values`` in a launcher's override ``store`` for the block, then restore it (how
    tests and sweeps pin a tile config, split count or path)."""
    saved = dict(store)
    store.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        store.clear()
        store.update(saved)


def eager_under_compile(fn):
    """For the launches of a call made with a plan (paged ops' plan / run split): the plan is a host object that a
    custom op's schema cannot carry, so that call is not one registered op, and under ``torch.compile`` it runs
    eagerly (a graph break) instead of dynamo tracing into the launcher. ~0.4 µs a call outside compile."""
    return torch.compiler.disable(fn)
