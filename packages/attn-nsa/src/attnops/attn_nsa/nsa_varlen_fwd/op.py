"""NSAVarlenFwd: checks, launch configs, torch custom-op registration."""

from __future__ import annotations

import math

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from attnops.attn_nsa._tuning import TunedKernel
from attnops.attn_nsa._varlen import (
    ACTIVATIONS,
    check_heads,
    check_int_param,
    check_packing,
    check_scale_param,
    check_tile_strides,
)
from attnops.kernel_utils import checks, runtime, testing

from .kernel import nsa_varlen_fwd_kernel

LOG2E = math.log2(math.e)

# One-warp configs (the group's 16 heads are one m16 MMA tile): fewer registers per token than 2 or 4 warps, so
# more tokens in flight per SM. H200 sweeps (benchmarks/tune_attn_nsa.py, every config forced and checked in one
# process; docs/perf/attn-nsa.md v6), KB 1 / 2 stages everywhere, µs, run of 2026-12-01 21:00 (afd1b65):
# - 2x4k (D 64, SEL 4): int32 rows 34.6 against 37.4 for the int64 form (pointer gather, 1 warp); host-descriptor
#   TMA 38.6, per-program TMA 39.9, 2 warps 43.0, 4 warps 52.5; more stages slower everywhere (s3 43.2); several
#   tokens per program 39.1 (NT 2) to 43.6 (NT 8). The non-causal 2x4k row alike (34.9 against 37.6).
# - 4x2k (D 64, SEL 1): four tokens per program at 128 registers 16.5 against 17.4 (NT 2), 19.2 uncapped, 18.9
#   host-descriptor TMA, 20.4 int32 rows: with one block per token the pipeline only overlaps across tokens.
# - ragged (D 128, SEL 8): int32 rows on 1 warp 28.9 against per-program TMA 30.9, host-descriptor TMA 32.7, the
#   int64 pointer gather 36.9 (2 warps) / 41.0 (1 warp); several tokens per program 39.5-90.5 (255 registers).
CONFIGS = (
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=3),
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=1),
    triton.Config({"NT": 1, "KB": 2, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=2, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=2, num_stages=3),
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=4, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 1, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 1, "INT32_ROWS": 0}, num_warps=1, num_stages=3),
    triton.Config({"NT": 1, "KB": 1, "TMA": 1, "INT32_ROWS": 0}, num_warps=1, num_stages=4),
    triton.Config({"NT": 1, "KB": 1, "TMA": 1, "INT32_ROWS": 0}, num_warps=2, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 1, "INT32_ROWS": 0}, num_warps=2, num_stages=3),
    triton.Config({"NT": 1, "KB": 1, "TMA": 2, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 2, "INT32_ROWS": 0}, num_warps=1, num_stages=3),
    # int32 masks and in-block row offsets for the pointer gather (benchmarks/sm90_compile_attn_nsa.py, per step:
    # D 64 / 1 warp 464 against 592 at 129 registers against 128; D 128 / 2 warps 395 against 530 at 174
    # registers against 132; the TMA forms gained nothing): the default for selections of several blocks
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 1}, num_warps=1, num_stages=2),
    triton.Config({"NT": 1, "KB": 1, "TMA": 0, "INT32_ROWS": 1}, num_warps=2, num_stages=2),
    # several tokens per program, one loop over all their blocks (kernel.py): the pipeline runs across token
    # boundaries and the per-token prologue shrinks to vector loads
    triton.Config({"NT": 2, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 4, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 8, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 4, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=3),
    triton.Config({"NT": 4, "KB": 1, "TMA": 1, "INT32_ROWS": 0}, num_warps=1, num_stages=2),
    triton.Config({"NT": 4, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=2, num_stages=2),
    # capped at the one-token form's 128 registers (offline sm_90 at D 64: 24 bytes of spill, 736 instructions per
    # step against 700 at 164 registers): 16 resident warps per SM instead of 12; NT 4 the default for one-block
    # selections at D <= 64
    triton.Config({"NT": 2, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2, maxnreg=128),
    triton.Config({"NT": 4, "KB": 1, "TMA": 0, "INT32_ROWS": 0}, num_warps=1, num_stages=2, maxnreg=128),
)


def _valid(c: triton.Config, a: dict) -> bool:
    kb = c.kwargs["KB"]
    keys = kb * a["BS"]
    # at most 8K elements per K (and V) tile in registers (4K for one warp: KB 2 / D 128 spills on sm_90);
    # no more gathered slots than the row has; TMA configs only where the call's K / V allow boxes (tma_applies);
    # several tokens per program with KB 1, host descriptors or none, and at most 256 block ids per program
    limit = 4096 if c.num_warps == 1 else 8192
    nt = c.kwargs["NT"]
    multi_token = nt == 1 or (kb == 1 and c.kwargs["TMA"] != 2 and nt * triton.next_power_of_2(a["SEL"]) <= 256)
    return (keys * a["BD"] <= limit and (kb == 1 or kb <= triton.next_power_of_2(max(a["SEL"], 1)))
            and (not c.kwargs["TMA"] or a["tma"]) and multi_token)


def tma_applies(k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether K / V can be read as TMA boxes of the view ``[T, H_kv·D]``: Hopper or the interpreter, D a
    power of two >= 16 (a box of exactly one head), heads packed in a row, rows that do not overlap (a
    broadcast K / V with token stride 0 takes the pointer gather), rows and base 16-byte aligned."""
    if not (runtime.interpreting() or runtime.is_hopper()):
        return False
    _, h_kv, d = k.shape
    if d < 16 or d != triton.next_power_of_2(d):
        return False
    return all(t.stride(1) == d and t.stride(0) >= h_kv * d and t.data_ptr() % 16 == 0
               and t.stride(0) * t.element_size() % 16 == 0 for t in (k, v))


def _box_descriptor(x: torch.Tensor, bs: int) -> TensorDescriptor:
    t, h_kv, d = x.shape
    return TensorDescriptor(x, shape=[t, h_kv * d], strides=[x.stride(0), 1], block_shape=[bs, d])


def _default(valid: list[triton.Config], a: dict) -> triton.Config:
    if runtime.interpreting():  # fewest iterations: the interpreter pays per operation, not per element
        return max(valid, key=lambda c: (c.kwargs["KB"], c.num_warps, -c.kwargs["TMA"], -c.kwargs["NT"]))
    # the sweeps' winners (see CONFIGS), KB 1 / 2 stages / 1 warp: one-block selections at D <= 64 four tokens
    # per program at 128 registers, everything else the int32-row pointer gather (no TMA: it lost every row)
    if a["SEL"] == 1 and a["BD"] <= 64:
        want = (4, 0, 128)  # NT, INT32_ROWS, maxnreg
    else:
        want = (1, 1, None)
    for c in valid:
        if (c.kwargs["KB"] == 1 and c.kwargs["TMA"] == 0 and c.num_warps == 1 and c.num_stages == 2
                and (c.kwargs["NT"], c.kwargs["INT32_ROWS"], c.maxnreg) == want):
            return c
    return valid[0]


_TUNED = TunedKernel(nsa_varlen_fwd_kernel, CONFIGS, valid=_valid, default=_default)


def _run(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale, block_size, config=None):
    """Allocate and launch (no argument checks). ``config`` forces one launch config (tests)."""
    num_tokens, h, d = q.shape
    h_kv = k.shape[1]
    o = testing.kernel_buffer((num_tokens, h, d), q.dtype, q.device)
    if num_tokens == 0:
        return o
    g = h // h_kv
    tma = tma_applies(k, v)
    if tma:
        runtime.ensure_descriptor_scratch()  # the TMA = 2 configs build descriptors on the device
    args = dict(
        q_ptr=q, k_ptr=k, v_ptr=v, o_ptr=o,
        k_desc=_box_descriptor(k, block_size) if tma else k, v_desc=_box_descriptor(v, block_size) if tma else v,
        bi_ptr=block_indices, bc_ptr=block_counts, offsets_ptr=offsets, tok_ptr=token_indices,
        num_tokens=num_tokens, qk_scale=scale * LOG2E,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kt=k.stride(0), stride_kh=k.stride(1),
        stride_vt=v.stride(0), stride_vh=v.stride(1), stride_ot=o.stride(0), stride_oh=o.stride(1),
        stride_bit=block_indices.stride(0), stride_bih=block_indices.stride(1),
        stride_bct=block_counts.stride(0), stride_bch=block_counts.stride(1),
        G=g, GP=max(16, triton.next_power_of_2(g)), D=d, BD=max(16, triton.next_power_of_2(d)),
        BS=block_size, SEL=block_indices.shape[2], SELP=max(1, triton.next_power_of_2(block_indices.shape[2])),
        CAUSAL=bool(is_causal),
    )
    _TUNED.launch(lambda meta: (triton.cdiv(num_tokens, meta["NT"]), h_kv), args, config, hints={"tma": tma})
    return o


@torch.library.custom_op("attnops::nsa_varlen_fwd", mutates_args=())
def _nsa_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_indices: torch.Tensor,
    block_counts: torch.Tensor,
    offsets: torch.Tensor,
    token_indices: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_size: int,
) -> torch.Tensor:
    return _run(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale, block_size)


@_nsa_varlen.register_fake
def _(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale, block_size):
    return torch.empty_like(q)


def check_args(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale, block_size):
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=ACTIVATIONS, ndim=3, device=dev, inner_contiguous=1)
    t, h, d = q.shape
    checks.check_tensor("k", k, dtype=q.dtype, shape=(t, None, d), device=dev, inner_contiguous=1)
    h_kv = k.shape[1]
    checks.check_tensor("v", v, dtype=q.dtype, shape=(t, h_kv, d), device=dev, inner_contiguous=1)
    check_tile_strides("k", k)  # a block's rows are addressed with int32 offsets (INT32_ROWS configs)
    check_tile_strides("v", v)
    g = check_heads(h, h_kv, "k")
    if not 1 <= d <= 128:
        raise ValueError(f"q: head dim must lie in [1, 128], got {d}")
    if g > 128:
        raise ValueError(f"k: at most 128 query heads per KV head are supported, got G = {g}")
    checks.check_tensor("block_indices", block_indices, dtype=torch.int32, shape=(t, h_kv, None), device=dev,
                        inner_contiguous=1)
    checks.check_tensor("block_counts", block_counts, dtype=torch.int32, shape=(t, h_kv), device=dev)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal: expected a bool, got {type(is_causal).__name__}")
    scale = check_scale_param(scale)
    block_size = check_int_param("block_size", block_size, 16, 128, power_of_two=True)
    check_packing(offsets, token_indices, t, dev)
    if checks.validate_values(block_counts):
        checks.check_index_range("block_counts", block_counts, 0, block_indices.shape[2] + 1)
    return scale, block_size


def nsa_varlen_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_indices: torch.Tensor,
    block_counts: torch.Tensor,
    offsets: torch.Tensor,
    token_indices: torch.Tensor,
    is_causal: bool,
    scale: float,
    block_size: int = 32,
) -> torch.Tensor:
    """NSA selected-block attention over packed sequences (FLA ``parallel_nsa`` selection branch, no gate).

    For token t of sequence n (length L) and KV group g: ``end = t + 1`` if causal else ``L``. Slot
    ``i < block_counts[t, g]`` with id ``β = block_indices[t, g, i]`` contributes keys at sequence positions
    ``[β·bs, (β+1)·bs) ∩ [0, end)`` (packed rows ``offsets[n] + r``); a negative id or ``β·bs >= end`` contributes
    nothing (padding with −1 or with T_q both work). Each query head h of group g attends with
    ``softmax(scale·<q_h, k_r>)`` over the collected keys (slots are independent: a repeated id counts twice).
    No key -> zeros.

    Args:
        q: ``[T_q, H, D]`` f16/bf16, D <= 128, last dim contiguous.
        k, v: ``[T_q, H_kv, D]``, q's dtype, packed like q; ``H % H_kv == 0``.
        block_indices: ``[T_q, H_kv, SEL]`` int32 block ids relative to the sequence start, last dim contiguous.
        block_counts: ``[T_q, H_kv]`` int32 in ``[0, SEL]``: how many leading slots are used.
        offsets: ``[N+1]`` int32 token prefix sums.
        token_indices: ``[T_q, 2]`` int32 contiguous ``(n, t)`` per packed token (must agree with offsets).
        is_causal: keys up to the token itself, or the whole sequence.
        scale: softmax scale (> 0).
        block_size: selection block size, a power of two in [16, 128] (32 or 64).

    Returns:
        ``o_slc [T_q, H, D]`` in q's dtype.

    Example::

        o = nsa_varlen_fwd(q, k, v, block_indices, block_counts, offsets, token_indices, True, 64**-0.5, 32)
    """
    scale, block_size = check_args(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale,
                                   block_size)
    return _nsa_varlen(q, k, v, block_indices, block_counts, offsets, token_indices, is_causal, scale, block_size)
