"""Peers of the kvcache-ops family: vLLM's cache kernels, FlashInfer's page append, eager torch and
torch.compile of it."""

from __future__ import annotations

import torch

from attnops.kernel_utils.fp8 import E4M3, dequantize_e4m3, quantize_e4m3
from attnops.kernel_utils.opspec import Case

from . import Runner, Unsupported, adapter, compiled_runner, require, runner_of

WRITE, GATHER = "PagedKVCacheWriteFwd", "PagedKVCacheGatherFwd"


# --- PagedKVCacheWriteFwd -------------------------------------------------------------------------


@adapter("vllm", WRITE)
def vllm_write(case: Case) -> Runner:
    co = require("vllm_cache_ops")
    a = case.inputs
    fp8 = a["k_pages"].dtype == E4M3
    pools = (a["k_pages"].view(torch.uint8), a["v_pages"].view(torch.uint8)) if fp8 else (a["k_pages"], a["v_pages"])
    one = torch.ones(1, device=a["k"].device)
    k_scale, v_scale = (a["k_scale"], a["v_scale"]) if fp8 else (one, one)
    kind = "fp8" if fp8 else "auto"
    run = lambda **_: co.reshape_and_cache_flash(a["k"], a["v"], *pools, a["slot_mapping"], kind, k_scale, v_scale)
    return runner_of(run, case)


@adapter("flashinfer", WRITE)
def flashinfer_write(case: Case) -> Runner:
    fi = require("flashinfer")
    a = case.inputs
    if a["k_pages"].dtype == E4M3:
        raise Unsupported("append_paged_kv_cache has no scaled fp8 store")
    slots = a["slot_mapping"]
    if bool((slots < 0).any()):
        raise Unsupported("append_paged_kv_cache has no padding tokens")
    # Each token becomes a one-page request whose page is its slot's page: the same writes, expressed in
    # FlashInfer's (batch index, position) form; built once here, like a plan.
    page_size = a["k_pages"].shape[1]
    n = slots.numel()
    dev = slots.device
    kv_indices = (slots // page_size).to(torch.int32)
    positions = (slots % page_size).to(torch.int32)
    kv_indptr = torch.arange(n + 1, dtype=torch.int32, device=dev)
    batch_indices = torch.arange(n, dtype=torch.int32, device=dev)
    last_page_len = positions + 1
    run = lambda **_: fi.append_paged_kv_cache(a["k"], a["v"], batch_indices, positions,
                                               (a["k_pages"], a["v_pages"]), kv_indices, kv_indptr, last_page_len,
                                               "NHD")
    return runner_of(run, case, note="one request per token (slot -> page, position)")


def _torch_write(k, v, k_pages, v_pages, slot_mapping, k_scale=None, v_scale=None):
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    for src, pool, scale in ((k, k_pages, k_scale), (v, v_pages, v_scale)):
        rows = src[keep]
        if pool.dtype == E4M3:
            rows = quantize_e4m3(rows, scale)
        pool.view(-1, *pool.shape[2:]).index_copy_(0, slots, rows)


@adapter("torch-ref", WRITE)
def torch_write(case: Case) -> Runner:
    return runner_of(_torch_write, case)


# --- PagedKVCacheGatherFwd ------------------------------------------------------------------------


@adapter("vllm", GATHER)
def vllm_gather(case: Case) -> Runner:
    co = require("vllm_cache_ops")
    a = case.inputs
    if a["cache"].dim() != 3:
        raise Unsupported("gather_and_maybe_dequant_cache takes [NP, PS, entry] caches only")
    fp8 = a["cache"].dtype == E4M3
    cu = a["cu_seq_lens"]
    lens = (cu[1:] - cu[:-1]).long()
    token_to_seq = torch.repeat_interleave(torch.arange(lens.numel(), device=cu.device), lens).to(torch.int32)
    src = a["cache"].view(torch.uint8) if fp8 else a["cache"]
    scale = a["scale"] if fp8 else torch.ones(1, device=cu.device)
    num_tokens = a["dst"].shape[0]
    run = lambda **_: co.ops.gather_and_maybe_dequant_cache(src, a["dst"], a["block_table"], cu, token_to_seq,
                                                            num_tokens, "fp8" if fp8 else "auto", scale,
                                                            a.get("seq_starts"))
    return runner_of(run, case, note="token_to_seq built outside the timed call")


@adapter("vllm-cp-gather", GATHER)
def vllm_cp_gather(case: Case) -> Runner:
    co = require("vllm_cache_ops")
    a = case.inputs
    if a["cache"].dtype == E4M3:
        raise Unsupported("cp_gather_cache copies raw bytes: no dequant")
    batch = a["block_table"].shape[0]
    run = lambda **_: co.cp_gather_cache(a["cache"], a["dst"], a["block_table"], a["cu_seq_lens"], batch,
                                         a.get("seq_starts"))
    return runner_of(run, case)


def _torch_gather(dst, cache, block_table, cu_seq_lens, seq_starts=None, scale=None, out_dtype=None):
    page_size, total = cache.shape[1], dst.shape[0]
    lens = (cu_seq_lens[1:] - cu_seq_lens[:-1]).long()
    request = torch.repeat_interleave(torch.arange(lens.numel(), device=dst.device), lens, output_size=total)
    pos = torch.arange(total, device=dst.device) - cu_seq_lens[request].long()
    if seq_starts is not None:
        pos += seq_starts[request].long()
    rows = block_table[request, pos // page_size].long() * page_size + pos % page_size
    gathered = cache.view(-1, *cache.shape[2:]).index_select(0, rows)
    dst.copy_(dequantize_e4m3(gathered, scale, dst.dtype) if cache.dtype == E4M3 else gathered)


@adapter("torch-ref", GATHER)
def torch_gather(case: Case) -> Runner:
    return runner_of(_torch_gather, case)


@adapter("torch-compile", GATHER)
def torch_compile_gather(case: Case) -> Runner:
    return compiled_runner(_torch_gather, case)


@adapter("torch-compile", WRITE)
def torch_compile_write(case: Case) -> Runner:
    return compiled_runner(_torch_write, case)
