"""Peers of the attn-mla family: FlashInfer MLA decode and top-k, FlashMLA dense and sparse, DeepGEMM's
indexer logits, eager torch and torch.compile.

Each adapter is faithful to our call or raises ``Unsupported`` naming what it cannot express. Layout
work a serving engine would keep (576-wide concatenated caches, page tables over our contiguous caches,
cleaned index lists, fp8 quantization of bf16 indexer inputs) happens in the adapter, outside the timed
call, and the note says so; what the call must still do to match our output (masking DeepGEMM's
out-of-window logits) is inside it. Imported by ``benchmarks.baselines.adapters_for``.
"""

from __future__ import annotations

import math

import torch

from attnops.attn_mla.dsa_decode_with_kvcache_fwd.spec import selection, torch_sparse_attention
from attnops.attn_mla.mla_decode_with_kvcache_fwd.spec import lowp_baseline as mla_torch
from attnops.kernel_utils.fp8 import E4M3, E4M3_MAX
from attnops.kernel_utils.opspec import Case

from . import Runner, Unsupported, adapter, compiled_runner, require, runner_of

MLA, DSA = "MLADecodeWithKVCacheFwd", "DSADecodeWithKVCacheFwd"
INDEXER, TOPK = "FP8LightningIndexerFwd", "TopKSelectFwd"
_WS: dict[str, torch.Tensor] = {}


def _workspace(dev) -> torch.Tensor:
    if "fi" not in _WS:
        _WS["fi"] = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    return _WS["fi"]


def _mla_single_kv_head(a) -> tuple[int, int, int, int, int]:
    b, h, d = a["q"].shape
    n_kv, h_kv = a["k"].shape[1:3]
    if h_kv != 1:
        raise Unsupported(f"MLA kernels take one latent KV head, got H_kv = {h_kv}")
    if n_kv == 0:
        raise Unsupported("no keys")
    return b, h, d, n_kv, a["q_pe"].shape[2]


# --- MLADecodeWithKVCacheFwd ----------------------------------------------------------------------


@adapter("flashinfer", MLA)
def flashinfer_mla(case: Case) -> Runner:
    require("flashinfer")
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

    a = case.inputs
    b, h, d, n_kv, pe = _mla_single_kv_head(a)
    page = 64 if n_kv % 64 == 0 else 1
    try:  # our contiguous per-request caches are already a paged pool: request b owns pages b·N/P ...
        ckv = a["k"].view(b * n_kv // page, page, d)
        kpe = a["k_pe"].view(b * n_kv // page, page, pe)
    except RuntimeError as e:
        raise Unsupported(f"cache not viewable as pages without a copy: {e}") from None
    dev = a["q"].device
    i32 = dict(dtype=torch.int32, device=dev)
    per = n_kv // page
    meta = MLAPlanMetadata.csr(torch.arange(b + 1, **i32), torch.arange(b + 1, **i32) * per,
                               torch.arange(b * per, **i32), torch.full((b,), n_kv, **i32))
    w = BatchMLAPagedAttentionWrapper(_workspace(dev), backend="fa3")
    w.plan(metadata=meta, num_heads=h, head_dim_ckv=d, head_dim_kpe=pe, page_size=page, causal=False,
           sm_scale=1.0 / math.sqrt(d + pe), q_data_type=a["q"].dtype, kv_data_type=a["k"].dtype,
           query_layout="split", kv_cache_layout="split")
    run = lambda **_: w.run(query=(a["q"], a["q_pe"]), kv_cache=(ckv, kpe))
    note = f"FA3 backend; our caches viewed as {page}-token pages (no copy); plan outside the timed call"
    if a["q"].dtype == torch.float16:
        note += "; f16 module JIT-compiled on first use"
    return runner_of(run, case, note=note)


@adapter("flashmla", MLA)
def flashmla_dense(case: Case) -> Runner:
    fm = require("vllm_flashmla")
    a = case.inputs
    b, h, d, n_kv, pe = _mla_single_kv_head(a)
    page = 64
    blocks = math.ceil(n_kv / page)
    dev = a["q"].device
    # FlashMLA reads one 576-wide row per token: concatenate q and the cache once, outside the timed call.
    q = torch.cat([a["q"], a["q_pe"]], dim=-1).unsqueeze(1)  # [B, 1, H, 576]
    cache = torch.zeros((b * blocks, page, 1, d + pe), dtype=a["k"].dtype, device=dev)
    view = cache.view(b, blocks * page, 1, d + pe)
    view[:, :n_kv, :, :d] = a["k"]
    view[:, :n_kv, :, d:] = a["k_pe"]
    table = torch.arange(b * blocks, dtype=torch.int32, device=dev).view(b, blocks)
    seqlens = torch.full((b,), n_kv, dtype=torch.int32, device=dev)
    meta, _ = fm.get_mla_metadata()
    scale = 1.0 / math.sqrt(d + pe)
    run = lambda **_: fm.flash_mla_with_kvcache(q, cache, table, seqlens, d, meta, None, softmax_scale=scale,
                                               causal=False)[0][:, 0]
    return runner_of(run, case, note="q and cache pre-concatenated to 576-wide 64-token pages outside the timed call")


@adapter("torch-ref", MLA)
def torch_mla(case: Case) -> Runner:
    _mla_single_kv_head(case.inputs)
    return runner_of(mla_torch, case, note="eager torch bmm + softmax in the input dtype")


@adapter("torch-compile", MLA)
def torch_compile_mla(case: Case) -> Runner:
    _mla_single_kv_head(case.inputs)
    return compiled_runner(mla_torch, case)


# --- DSADecodeWithKVCacheFwd ----------------------------------------------------------------------


def _flashmla_refusal(a) -> str | None:
    """Why FlashMLA's sparse kernel cannot run the call, or None where it can."""
    b, h_kv = a["q"].shape[0], a["kv"].shape[2]
    if a["q"].dtype != torch.bfloat16:
        return "flash_mla_sparse_fwd is bf16 only"
    if b != 1 or h_kv != 1:
        return f"flash_mla_sparse_fwd takes one request and one KV head, got B = {b}, H_kv = {h_kv}"
    return None


@adapter("flashmla", DSA)
def flashmla_sparse(case: Case) -> Runner:
    fm = require("vllm_flashmla")
    a = case.inputs
    refusal = _flashmla_refusal(a)
    if refusal:
        raise Unsupported(refusal)
    q, kv = a["q"], a["kv"]
    b, s, h, width = q.shape
    s_kv = kv.shape[1]
    tail = a.get("dim_tail")
    tail = (width - 512 if width > 512 else 0) if tail is None else tail
    # Our slot rules (causal filter, any invalid value, repeats counted once) as FlashMLA's: −1 = nothing.
    ranked, keep = selection(a["indices"], s_kv, a["q_start_index_s"], a.get("stride_kv", 1), a.get("is_causal", True))
    indices = torch.where(keep, ranked, -1).to(torch.int32).view(s, 1, -1).contiguous()
    q0, kv0 = q[0].contiguous(), kv[0].contiguous()
    scale = a.get("sm_scale") or width**-0.5
    run = lambda **_: fm.flash_mla_sparse_fwd(q0, kv0, indices, scale, width - tail)[0].unsqueeze(0)
    return runner_of(run, case, note="sparse prefill kernel; indices cleaned (causal, pads → −1, repeats dropped) "
                                     "outside the timed call")


def _dsa_torch(**inputs):
    return torch_sparse_attention(**inputs, rows_per_chunk=64)


def _dsa_torch_whole(**inputs):
    return torch_sparse_attention(**inputs, rows_per_chunk=1 << 30)


@adapter("torch-ref", DSA)
def torch_dsa(case: Case) -> Runner:
    return runner_of(_dsa_torch, case, note="eager gather + matmul + masked softmax, 64 query rows per step")


def _one_shot_gather_fits(a) -> None:
    """The whole-call torch peers gather every selected row of every query row at once: refuse where that copy
    would not fit beside the inputs."""
    b, s, h, width = a["q"].shape
    gathered = b * s * a["indices"].shape[-1] * a["indices"].shape[-2] * width * a["q"].element_size()
    if gathered > 24 << 30:
        raise Unsupported(f"one-shot gather would take {gathered / 2**30:.0f} GiB")


def _torch_peer_wanted(a) -> None:
    """The eager torch peers (the seed page's on the f16 rows) are timed where FlashMLA cannot run: beside it
    they would only add minutes of gathers to each call."""
    if _flashmla_refusal(a) is None:
        raise Unsupported("timed only where FlashMLA's sparse kernel cannot run (f16, several requests / KV heads)")
    _one_shot_gather_fits(a)


@adapter("torch-gather", DSA)
def torch_gather_dsa(case: Case) -> Runner:
    _torch_peer_wanted(case.inputs)
    return runner_of(_dsa_torch_whole, case, note="eager: every selected row gathered at once, matmul + masked softmax")


@adapter("torch-sdpa", DSA)
def torch_sdpa_dsa(case: Case) -> Runner:
    _torch_peer_wanted(case.inputs)
    return runner_of(lambda **inputs: torch_sparse_attention(**inputs, rows_per_chunk=1 << 30, sdpa=True), case,
                     note="eager: every selected row gathered at once, one 4-D F.scaled_dot_product_attention "
                          "((B·S, H_kv) as batch × heads, the G heads as query rows), slot mask")


@adapter("torch-compile", DSA)
def torch_compile_dsa(case: Case) -> Runner:
    _torch_peer_wanted(case.inputs)
    return compiled_runner(_dsa_torch_whole, case)


# --- FP8LightningIndexerFwd -----------------------------------------------------------------------


def _window_mask(a, s_kv: int) -> torch.Tensor:
    t = torch.arange(s_kv, device=a["index_q"].device)
    return (t[None, :] >= a["cu_seqlen_ks"][:, None]) & (t[None, :] < a["cu_seqlen_ke"][:, None])


@adapter("deepgemm", INDEXER)
def deepgemm_indexer(case: Case) -> Runner:
    dg = require("deep_gemm")
    a = case.inputs
    q, k = a["index_q"], a["index_k"]
    b, s, h, d = q.shape
    s_kv, g = k.shape[1:3]
    if b != 1 or g != 1:
        raise Unsupported(f"fp8_fp4_mqa_logits takes one request and one key group, got B = {b}, G = {g}")
    ks, ke = a["cu_seqlen_ks"], a["cu_seqlen_ke"]
    if bool((ks != 0).any()):
        # This DeepGEMM build only returns "compressed" logits (it asserts max_seqlen_k > 0): row m's column j is
        # key ks[m] + j. That equals the op's [S, S_kv] layout only when every window starts at key 0; otherwise
        # producing the op's output needs a scatter pass that is not DeepGEMM's. Measured once on the H200 (kernel
        # alone, compressed output, S x max-window floats): docs/perf/attn-mla.md.
        raise Unsupported("fp8_fp4_mqa_logits returns logits indexed from ks[m] (compressed layout); windows here "
                          "do not start at key 0, so its output is not the op's [S, S_kv] layout")
    note = "fp8_fp4_mqa_logits; out-of-window −inf written by masked_fill_ in the timed call"
    weights = a["weights"]
    if q.dtype == E4M3:
        q8, k8 = q[0].contiguous(), k[0, :, 0].contiguous()
        scale = a.get("index_k_scale")
        k_scale = scale[0, :, 0].contiguous() if scale is not None else torch.ones(s_kv, device=q.device)
    else:
        # bf16 call: q per (token, head) and k per row scaled by amax/448 (outside timing). A q scale s > 0 moves
        # into the head weight exactly: w·relu(s·x) = (w·s)·relu(x).
        qf = q[0].float()
        q_scale = (qf.abs().amax(dim=-1) / E4M3_MAX).clamp(min=1e-12)
        q8 = (qf / q_scale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
        weights = (weights.float() * q_scale).contiguous()
        kf = k[0, :, 0].float()
        k_scale = (kf.abs().amax(dim=-1) / E4M3_MAX).clamp(min=1e-12)
        k8 = (kf / k_scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
        note += ("; bf16 inputs quantized to fp8 outside the timed call (q per token-head, scale folded into "
                 "weights; k per row)")
    outside = ~_window_mask(a, s_kv)
    clean = a.get("clean_logits", True)

    def run(**_):
        # Windows start at 0, so the compressed layout with max_seqlen_k = S_kv is the op's layout.
        logits = dg.fp8_fp4_mqa_logits((q8, None), (k8, k_scale), weights, ks, ke, s_kv)[:, :s_kv]
        if clean:
            logits = logits.masked_fill_(outside, float("-inf"))
        return logits.unsqueeze(0).unsqueeze(-1)

    return runner_of(run, case, note=note)


def _indexer_torch(index_q, index_k, weights, cu_seqlen_ks, cu_seqlen_ke, index_k_scale=None, clean_logits=True,
                   rows_per_chunk=16):
    """Eager vectorized torch in f32, query rows in chunks ([rows, H, S_kv] scores per step)."""
    b, s, h, d = index_q.shape
    s_kv, g = index_k.shape[1:3]
    heads = h // g
    out = torch.empty((b, s, s_kv, g), dtype=torch.float32, device=index_q.device)
    k = index_k.float()
    if index_k_scale is not None:
        k = k * index_k_scale.float()[..., None]
    t = torch.arange(s_kv, device=index_q.device)
    for s0 in range(0, s, rows_per_chunk):
        sl = slice(s0, s0 + rows_per_chunk)
        q = index_q[:, sl].float().unflatten(2, (g, heads))  # [B, s, G, heads, D]
        scores = torch.einsum("bsghd,btgd->bsgth", q, k).relu_()
        w = weights[sl].float().unflatten(1, (g, heads))  # [s, G, heads]
        logits = (scores * w[None, :, :, None, :]).sum(-1).transpose(2, 3)  # [B, s, S_kv, G]
        inside = (t[None, :] >= cu_seqlen_ks[sl, None]) & (t[None, :] < cu_seqlen_ke[sl, None])
        out[:, sl] = logits.masked_fill(~inside[None, :, :, None], float("-inf"))
    return out


@adapter("torch-ref", INDEXER)
def torch_indexer(case: Case) -> Runner:
    return runner_of(_indexer_torch, case, note="eager einsum + relu + weighted head sum in f32, 16 rows per step")


def _indexer_torch_whole(**inputs):
    return _indexer_torch(**inputs, rows_per_chunk=1 << 30)


@adapter("torch-compile", INDEXER)
def torch_compile_indexer(case: Case) -> Runner:
    b, s, h, _ = case.inputs["index_q"].shape
    scores = 4 * b * s * h * case.inputs["index_k"].shape[1]
    if scores > 16 << 30:
        raise Unsupported(f"one-shot [S, H, S_kv] scores would take {scores / 2**30:.0f} GiB")
    return compiled_runner(_indexer_torch_whole, case)


# --- TopKSelectFwd --------------------------------------------------------------------------------


def _whole_rows(a) -> bool:
    s_kv = a["index_score"].shape[2]
    return bool((a["starts"] <= 0).all()) and bool((a["ends"] >= s_kv).all())


@adapter("flashinfer", TOPK)
def flashinfer_topk(case: Case) -> Runner:
    fi = require("flashinfer")
    a = case.inputs
    score = a["index_score"]
    b, s, s_kv, g = score.shape
    if g != 1 or not score.is_contiguous():
        raise Unsupported("flashinfer.top_k takes contiguous [rows, S_kv] rows (G = 1)")
    if not _whole_rows(a):
        raise Unsupported("flashinfer.top_k has no per-row windows")
    rows = score.view(b * s, s_kv)
    k = a["topk"]
    run = lambda **_: fi.top_k(rows, k, sorted=False)[1].view(b, s, 1, k)
    return runner_of(run, case, note="unsorted; int64 indices")


def _topk_torch(index_score, starts, ends, topk):
    """torch.topk per row; windows other than whole rows via an ordered integer key (out-of-window lowest),
    short windows padded with S_kv."""
    b, s, s_kv, g = index_score.shape
    rows = index_score.permute(0, 1, 3, 2)  # [B, S, G, S_kv]
    lo = starts.clamp(min=0)[:, :, None, None].long()
    hi = ends.clamp(max=s_kv)[:, :, None, None].long()
    if bool((lo == 0).all()) and bool((hi == s_kv).all()):
        return torch.topk(rows, topk, dim=-1, sorted=False).indices
    t = torch.arange(s_kv, device=index_score.device)
    inside = (t >= lo) & (t < hi)
    bits = rows.contiguous().view(torch.int32).long()
    key = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits) + 2**31  # order-preserving, >= 0
    key = torch.where(inside, key, -1)
    idx = torch.topk(key, topk, dim=-1, sorted=False).indices
    return torch.where(torch.gather(inside, -1, idx), idx, s_kv)  # short window: the rest is padding


@adapter("torch", TOPK)
def torch_topk(case: Case) -> Runner:
    return runner_of(_topk_torch, case, note="torch.topk (unsorted); windows other than whole rows keyed")


@adapter("torch-compile", TOPK)
def torch_compile_topk(case: Case) -> Runner:
    return compiled_runner(_topk_torch, case)
