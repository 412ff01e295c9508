"""Peers of the attn-nsa family: FLA's NSA Triton kernels (fla-core 0.6.0) and the eager fp32 torch references.

FLA is called at its forward entry points (``parallel_nsa_compression_fwd``, ``parallel_nsa_topk``,
``parallel_nsa_fwd``) on the case's own packed tensors viewed as batch 1: no autograd wrapper, no mean-pooling
of k/v (``parallel_nsa`` pools k_cmp/v_cmp on every call even when they are unused), and ``token_indices``
passed in, as our op receives it. FLA compiles and autotunes on its first call: that call happens in
``prepare`` and is reported as setup time, outside the timed region.
"""

from __future__ import annotations

import time

import torch

from attnops.attn_nsa.nsa_compressed_varlen_fwd.reference import nsa_compressed_varlen_fwd_ref
from attnops.attn_nsa.nsa_topk_varlen_fwd.reference import nsa_topk_varlen_fwd_ref
from attnops.attn_nsa.nsa_varlen_fwd.reference import nsa_varlen_fwd_ref
from attnops.kernel_utils.opspec import Case

from . import Runner, Unsupported, adapter, require, runner_of

COMPRESSED, TOPK, SELECTED = "NSACompressedVarlenFwd", "NSATopKVarlenFwd", "NSAVarlenFwd"


def _fla_group_ok(h: int, h_kv: int):
    g = h // h_kv
    if g < 16 or g & (g - 1):
        raise Unsupported(f"FLA NSA needs HQ/H a power of two >= 16, got {h}/{h_kv}")


def _warmed(run, collect, note: str) -> Runner:
    """First call (Triton compile + FLA autotune) outside the timed region, reported as setup time."""
    start = time.perf_counter()
    result = {"last": run()}
    torch.cuda.synchronize()
    setup = time.perf_counter() - start

    def timed():
        result["last"] = run()

    return Runner(timed, lambda: collect(result["last"]), note=note, setup_s=setup)


# --- NSACompressedVarlenFwd -----------------------------------------------------------------------


@adapter("fla", COMPRESSED)
def fla_compressed(case: Case) -> Runner:
    compression = require("fla.ops.nsa.compression")
    a = case.inputs
    t, h, _ = a["q"].shape
    _fla_group_ok(h, a["k_cmp"].shape[1])
    q, k, v = (a[n].unsqueeze(0) for n in ("q", "k_cmp", "v_cmp"))
    cu, tok = a["offsets"], a["token_indices"]

    def run():
        return compression.parallel_nsa_compression_fwd(q, k, v, t, a["bs"], a["scale"], cu_seqlens_q=cu,
                                                        cu_seqlens_k=cu, token_indices_q=tok)

    return _warmed(run, lambda r: {"o": r[0][0], "lse": r[1][0]},
                   "parallel_nsa_compression_fwd; lse written in f32 (FLA's choice)")


@adapter("torch-ref", COMPRESSED)
def torch_compressed(case: Case) -> Runner:
    return runner_of(nsa_compressed_varlen_fwd_ref, case)


# --- NSATopKVarlenFwd -----------------------------------------------------------------------------


@adapter("fla", TOPK)
def fla_topk(case: Case) -> Runner:
    parallel = require("fla.ops.nsa.parallel")
    a = case.inputs
    t, h, _ = a["q"].shape
    _fla_group_ok(h, a["k_cmp"].shape[1])
    s, bs = a["selected_block_num"], a["bs"]
    if s & (s - 1):
        raise Unsupported(f"FLA rounds selected_block_num up to a power of two (got {s}): a different output")
    if bs < 2 * s:
        raise Unsupported(f"FLA's top-k kernel needs bs >= 2 * selected_block_num, got bs {bs}, S {s}")
    q, k = a["q"].unsqueeze(0), a["k_cmp"].unsqueeze(0)
    cu = a["offsets"]

    def run():
        return parallel.parallel_nsa_topk(q, k, t, None, s, block_size=bs, scale=a["scale"], cu_seqlens=cu)

    return _warmed(run, lambda r: {"block_indices": r[0]}, "parallel_nsa_topk (lse recomputed: lse=None)")


@adapter("torch-ref", TOPK)
def torch_topk(case: Case) -> Runner:
    return runner_of(nsa_topk_varlen_fwd_ref, case)


# --- NSAVarlenFwd ---------------------------------------------------------------------------------


@adapter("fla", SELECTED)
def fla_selected(case: Case) -> Runner:
    parallel = require("fla.ops.nsa.parallel")
    a = case.inputs
    _, h, _ = a["q"].shape
    _fla_group_ok(h, a["k"].shape[1])
    if not a["is_causal"]:
        raise Unsupported("FLA parallel_nsa is causal only")
    q, k, v = (a[n].unsqueeze(0) for n in ("q", "k", "v"))
    bi, bc = a["block_indices"].unsqueeze(0), a["block_counts"].unsqueeze(0)
    cu, tok = a["offsets"], a["token_indices"]

    def run():
        return parallel.parallel_nsa_fwd(q, k, v, bi, bc, a["block_size"], a["scale"], cu_seqlens_q=cu,
                                         cu_seqlens_k=cu, token_indices_q=tok)

    return _warmed(run, lambda r: {"o_slc": r[0][0]}, "parallel_nsa_fwd (no gate); also writes an f32 lse")


@adapter("torch-ref", SELECTED)
def torch_selected(case: Case) -> Runner:
    return runner_of(nsa_varlen_fwd_ref, case)
