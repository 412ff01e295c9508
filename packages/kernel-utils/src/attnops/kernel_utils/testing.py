"""Input factories and acceptance rules shared by tests and the benchmark harness.

Inputs are fresh random values (never zeros); outputs are allocated poisoned (NaN, or a sentinel for
integers) so an unwritten element fails the comparison.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import torch

from . import runtime

# Entry written into block-table columns that the lengths never reach: any read of it is out of range.
UNUSED_PAGE = -(2**30)


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def randn(shape, dtype: torch.dtype, device, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values (× scale) in ``dtype``; fp8 values are drawn in fp32 and saturated. On a GPU they
    are drawn there, by a generator seeded from ``gen`` (the same values on every run): the CPU took seconds a
    gigabyte (20 s for one MLA decode row's 4.8 GB cache)."""
    device = torch.device(device)
    if device.type == "cuda":
        seed = int(torch.randint(2**62, (1,), generator=gen))
        x = torch.randn(shape, generator=torch.Generator(device).manual_seed(seed), dtype=torch.float32,
                        device=device)
    else:
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
    x.mul_(scale)
    if dtype == torch.float8_e4m3fn:
        x.clamp_(-448, 448)
    return x.to(dtype)


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """``torch.empty`` filled with NaN (floating) or the most negative value (integers)."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, torch.iinfo(dtype).min, dtype=dtype, device=device)


def kernel_buffer(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """A buffer a kernel fills (an output, a split workspace): ``torch.empty`` on a GPU, NaN / int-min
    poisoned under the interpreter or with ``ATTNOPS_POISON=1`` (GPU test runs), so that an element the kernel
    should write and does not fails the tests instead of passing on whatever reused memory held."""
    if runtime.interpreting() or os.environ.get("ATTNOPS_POISON", "0") not in ("", "0"):
        return poisoned(shape, dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)


def cu_seqlens(lengths, device) -> torch.Tensor:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + int(n))
    return torch.tensor(cu, dtype=torch.int32, device=device)


def climbing_scores(q_cols: torch.Tensor, k_cols: torch.Tensor, sm_scale: float, *, keys_a_step: int = 96,
                    step: float = 12.0, positions: torch.Tensor | None = None) -> None:
    """Make attention scores climb along the keys, in place (an input for the lazy O rescale's tests): the chosen
    channels of q (``q_cols``, ``[..., W]``) all 1 and those of the key at position n (``k_cols``, ``[..., N, H_kv,
    W]``, keys on dim -3; ``positions`` [N], default 0..N-1: a key's index in its request) raised by ``(n //
    keys_a_step) · c`` on top of their noise, so that every ``keys_a_step`` keys the scores rise by ~``step`` in
    base-2 units at ``sm_scale``. With ``step`` > 8 a lazy rescale's reference max has to move there (else O is off
    by ~2^step) and stays put between the steps: both of its paths run."""
    c = step / (q_cols.shape[-1] * sm_scale * 1.4426950408889634)
    if positions is None:
        positions = torch.arange(k_cols.shape[-3], device=k_cols.device)
    q_cols.fill_(1.0)
    k_cols.add_(((positions // keys_a_step).to(k_cols.dtype) * c).view(-1, 1, 1))


def random_lengths(n: int, total: int, gen: torch.Generator, *, zero_frac: float = 0.0) -> list[int]:
    """``n`` skewed lengths summing to ``total``; about ``zero_frac`` of them are 0."""
    weights = torch.rand(n, generator=gen).pow(3) + 1e-3  # cubed: a few long, many short
    zero = torch.rand(n, generator=gen) < zero_frac
    if bool(zero.all()):
        zero[0] = False
    weights[zero] = 0
    raw = (weights / weights.sum() * total).floor().long()
    raw[int(torch.argmax(weights))] += total - int(raw.sum())
    return raw.tolist()


def block_table(
    lengths, page_size: int, num_pages: int, width: int, gen: torch.Generator, device, *, share: bool = False
) -> torch.Tensor:
    """``[B, width]`` int32 table of shuffled physical pages covering each length.

    Pages are distinct across requests while the pool allows it (or always, unless ``share``); columns past
    ``ceil(len / page_size)`` hold ``UNUSED_PAGE`` so a kernel that reads them fails loudly.
    """
    needed = [math.ceil(n / page_size) for n in lengths]
    if max(needed, default=0) > width:
        raise ValueError(f"block table width {width} cannot hold {max(needed)} pages")
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.full((len(lengths), width), UNUSED_PAGE, dtype=torch.int32)
    cursor = 0
    for b, n in enumerate(needed):
        if n > num_pages:  # more pages than the pool holds: a read-only request may name a page twice
            table[b, :n] = torch.randint(num_pages, (n,), generator=gen, dtype=torch.int32)
        elif share or cursor + n > num_pages:
            start = int(torch.randint(0, num_pages - n + 1, (1,), generator=gen))
            table[b, :n] = perm[start : start + n].to(torch.int32)
        else:
            table[b, :n] = perm[cursor : cursor + n].to(torch.int32)
            cursor += n
    return table.to(device)


# ---------------------------------------------------------------------------------------------------
# Acceptance rules


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bit patterns as integers of the same width (a view where ``t`` is contiguous)."""
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(bits)


def assert_bitwise(name: str, out: torch.Tensor, ref: torch.Tensor, *, any_nan: bool = False):
    """Exact comparison of the bit patterns, NaN poison included (copy-type ops). ``any_nan``: where the
    reference is NaN, any NaN passes (where only "NaN stays NaN" is promised, not its sign or payload).
    Compared where ``out`` lives: copying both to the host, widened to int64, took ~14 s for each call of TopK's
    full-size rows on an H100 (``Case.run_untouched`` checks the 8.6 GB score input after every config)."""
    if out.shape != ref.shape or out.dtype != ref.dtype:
        raise AssertionError(f"{name}: got {tuple(out.shape)} {out.dtype}, expected {tuple(ref.shape)} {ref.dtype}")
    ref = ref.to(out.device)
    bad = _bits(out) != _bits(ref)
    if any_nan and out.is_floating_point():
        bad &= ~(out.isnan() & ref.isnan())
    if bool(bad.any()):  # (a bool tensor's sum() widens it to int64 first: 16 GiB for a full-size TopK row)
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{name}: {int(torch.count_nonzero(bad))} of {out.numel()} elements differ; first at {idx}: "
            f"got {out[idx].item()}, expected {ref[idx].item()}"
        )


def rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """‖x − ref‖ / ‖ref‖ in fp64 (∞ if x has a NaN or ref is all zero while x is not)."""
    x64, r64 = x.detach().double().cpu(), ref.detach().double().cpu()
    if not bool(torch.isfinite(x64).all()):
        return math.inf
    num = (x64 - r64).norm().item()
    den = r64.norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def assert_close_dual(
    name: str, out: torch.Tensor, ref: torch.Tensor, lowp: torch.Tensor, *, floor: float = 1e-3, factor: float = 2.0
):
    """Dual-reference rule: our error against the fp32 reference at most ``factor`` × torch's own
    low-precision error on the same inputs, plus ``floor``. NaN never passes."""
    if out.shape != ref.shape:
        raise AssertionError(f"{name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    err, base = rel_error(out, ref), rel_error(lowp, ref)
    if not err <= factor * base + floor:
        raise AssertionError(f"{name}: rel. error {err:.3e} > {factor} × torch low-precision {base:.3e} + {floor:.0e}")


def assert_topk_equivalent(
    name: str, idx: torch.Tensor, ref_idx: torch.Tensor, scores: torch.Tensor, *, pad: int, atol: float = 0.0
):
    """Top-k outputs agree up to ties: per row the sets have the same size, ours holds no duplicates and
    no out-of-range index, and the sorted gathered scores match the reference's. Computed where ``idx`` lives,
    only the selected scores in float64: copying whole score rows to the host in float64 made TopK's full-size
    test of six configs run for minutes on the GPU machine (8.6 GB of scores, 2026-12-06)."""
    if idx.shape != ref_idx.shape:
        raise AssertionError(f"{name}: shape {tuple(idx.shape)}, expected {tuple(ref_idx.shape)}")
    idx, ref_idx, scores = idx.long(), ref_idx.to(idx.device).long(), scores.to(idx.device)
    valid, ref_valid = idx != pad, ref_idx != pad
    if not torch.equal(valid.sum(-1), ref_valid.sum(-1)):
        raise AssertionError(f"{name}: number of selected (non-pad) entries differs per row")
    if bool(((idx < 0) | (idx > pad)).any()):
        raise AssertionError(f"{name}: index out of [0, {pad}]")
    s = torch.sort(torch.where(valid, idx, -1 - torch.arange(idx.shape[-1], device=idx.device)), dim=-1).values
    if bool(((s[..., 1:] == s[..., :-1]) & (s[..., 1:] >= 0)).any()):
        raise AssertionError(f"{name}: duplicate indices in a row")
    rows = scores.reshape(-1, scores.shape[-1])
    flat_i, flat_r = idx.reshape(rows.shape[0], -1), ref_idx.reshape(rows.shape[0], -1)
    got = torch.where(flat_i != pad, rows.gather(1, flat_i.clamp(max=rows.shape[1] - 1)).double(), -math.inf)
    exp = torch.where(flat_r != pad, rows.gather(1, flat_r.clamp(max=rows.shape[1] - 1)).double(), -math.inf)
    got, exp = got.sort(-1).values, exp.sort(-1).values
    if not torch.allclose(got, exp, atol=atol, rtol=0):
        raise AssertionError(f"{name}: selected scores differ from the reference beyond ties")


def run_compile_script(script, timeout: int) -> subprocess.CompletedProcess:
    """Run ``script``, a file that compiles kernels for sm_90 without a GPU, in a fresh Python with
    ``TRITON_INTERPRET=0`` (the interpreter never compiles) and return its result (stdout / stderr captured). Calls
    ``pytest.skip`` where Triton's NVIDIA backend or Gluon is not installed."""
    try:
        from triton.backends.nvidia import compiler  # noqa: F401
        from triton.experimental import gluon  # noqa: F401
    except ImportError:
        import pytest

        pytest.skip("Triton's NVIDIA backend or Gluon is not installed")
    env = dict(os.environ, TRITON_INTERPRET="0")
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout)


def replayed_in_graph(run):
    """``run()`` captured in a CUDA graph and the graph replayed once: returns what the capture returned (its tensors
    then hold the replay's results). A capture cannot allocate without torch's caching allocator
    (``PYTORCH_NO_CUDA_MEMORY_CACHING``, which the memcheck lanes set so the sanitizer sees each tensor's end): there
    it calls ``pytest.skip``, the test's checks before it having run."""
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") not in ("", "0"):
        import pytest

        pytest.skip("CUDA graph capture needs torch's caching allocator (PYTORCH_NO_CUDA_MEMORY_CACHING is set)")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    graph.replay()
    torch.cuda.synchronize()
    return captured


def opcheck_as_called(module, attr: str, call) -> None:
    """``torch.library.opcheck`` (schema: declared mutations; fake impl: output metadata) of the custom op
    ``module.<attr>`` on the arguments a public function really passes it, so the checked tuple cannot drift from
    the op's signature: ``call()`` runs the public function once while the op is recorded."""
    op = getattr(module, attr)
    seen = []

    def copy(a):
        return a.clone() if isinstance(a, torch.Tensor) else a

    def record(*args, **kwargs):
        # copies taken before the op runs: an in-place op rerun on its own results would write the same values
        # again and hide an undeclared mutation from the schema check
        seen.append((tuple(map(copy, args)), {k: copy(a) for k, a in kwargs.items()}))
        return op(*args, **kwargs)

    setattr(module, attr, record)
    try:
        call()
    finally:
        setattr(module, attr, op)
    if not seen:
        raise AssertionError(f"{module.__name__}.{attr}: the call never reached the custom op")
    args, kwargs = seen[0]
    # (raises OpCheckError, naming the failed test, on the first one that fails)
    torch.library.opcheck(op, args, kwargs, test_utils=("test_schema", "test_faketensor"), raise_exception=True)
