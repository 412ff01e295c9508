"""Peers of the attn-core family.

Each adapter translates our call faithfully (bottom-right causal alignment, windows, softcap, sinks,
fp8 scales, RoPE tables) or raises ``Unsupported`` naming what it cannot express. Plans, index tensors and
compilation happen in the adapter (outside the timed call); the runner only launches.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case

from . import Runner, Unsupported, adapter, compiled_runner, require, rope_torch

# =====================================================================================================
# GQADenseFwd / GQAVarlenFwd (dense BSHD and packed THD forward)
# =====================================================================================================

DENSE, VARLEN = "GQADenseFwd", "GQAVarlenFwd"
_WORKSPACE: dict[str, torch.Tensor] = {}


@dataclass
class _Call:
    """One dense or varlen call in packed (THD) terms, with host-side lengths."""

    dense: bool
    q: torch.Tensor  # [T_q, H, D] (dense: a view of [B, S_q, H, D])
    k: torch.Tensor
    v: torch.Tensor
    out_shape: tuple[int, ...]
    q_lens: list[int]
    kv_lens: list[int]
    cu_q: torch.Tensor
    cu_kv: torch.Tensor
    H: int
    H_kv: int
    D: int
    causal: bool
    wl: int
    wr: int
    softcap: float
    sm_scale: float
    rope: bool
    rotary_dim: int
    interleaved: bool
    sinks: torch.Tensor | None
    fp8: bool
    out_dtype: torch.dtype

    @property
    def group(self) -> int:
        return self.H // self.H_kv


def _call(case: Case) -> _Call:
    a = case.inputs
    q, k, v = a["q"], a["k"], a["v"]
    dense = q.dim() == 4
    dev = q.device
    if dense:
        B, S_q, H, D = q.shape
        S_kv, H_kv = k.shape[1], k.shape[2]
        q_lens, kv_lens = [S_q] * B, [S_kv] * B
        qp, kp, vp = q.reshape(B * S_q, H, D), k.reshape(B * S_kv, H_kv, D), v.reshape(B * S_kv, H_kv, D)
        cu_q = torch.arange(B + 1, dtype=torch.int32, device=dev) * S_q
        cu_kv = torch.arange(B + 1, dtype=torch.int32, device=dev) * S_kv
    else:
        _, H, D = q.shape
        H_kv = k.shape[1]
        q_lens, kv_lens = list(case.meta["q_lens"]), list(case.meta["kv_lens"])
        qp, kp, vp = q, k, v
        cu_q, cu_kv = a["cu_seqlens_q"], a["cu_seqlens_kv"]
    rope = a.get("pos_encoding_mode", "none") == "rope"
    return _Call(
        dense=dense, q=qp, k=kp, v=vp, out_shape=tuple(q.shape), q_lens=q_lens, kv_lens=kv_lens, cu_q=cu_q,
        cu_kv=cu_kv, H=H, H_kv=H_kv, D=D, causal=a.get("is_causal", True), wl=a.get("window_size_left", -1),
        wr=a.get("window_size_right", -1), softcap=float(a.get("softcap") or 0.0),
        sm_scale=a.get("sm_scale") or 1.0 / math.sqrt(D), rope=rope,
        rotary_dim=(a.get("rotary_dim") or D) if rope else 0, interleaved=a.get("rope_layout") == "interleaved",
        sinks=a.get("sinks"), fp8=q.dtype == E4M3, out_dtype=a.get("out_dtype") or q.dtype,
    )


def _standard_rope_tables(c: _Call, case: Case, theta: float = 1e4) -> bool:
    """Whether the caller's tables are ``pos · theta^(−2m/R)`` (what a peer's built-in RoPE computes)."""
    cos = case.inputs["rope_cos"]
    n = cos.shape[0]
    inv = theta ** (-torch.arange(0, c.rotary_dim, 2, dtype=torch.float64, device=cos.device) / c.rotary_dim)
    ang = torch.arange(n, dtype=torch.float64, device=cos.device)[:, None] * inv[None, :]
    return bool(torch.allclose(cos.double(), ang.cos(), atol=1e-2)
                and torch.allclose(case.inputs["rope_sin"].double(), ang.sin(), atol=1e-2))


def _runner(run, c: _Call, note: str = "", setup_s: float = 0.0, post=None) -> Runner:
    """A Runner whose output is reshaped back to the op's layout (a view, no copy in the timed call)."""
    last: dict[str, torch.Tensor] = {}

    def go():
        last["o"] = run()

    def outputs():
        o = last["o"]
        if post is not None:
            o = post(o)
        return {"o": o.reshape(c.out_shape)}

    return Runner(go, outputs, note=note, setup_s=setup_s)


def _workspace(dev) -> torch.Tensor:
    if "fi" not in _WORKSPACE:
        _WORKSPACE["fi"] = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    return _WORKSPACE["fi"]


# --- vLLM FA3 ---------------------------------------------------------------------------------------


def _rope_positions(c: _Call) -> tuple[torch.Tensor, torch.Tensor]:
    """Per packed row: query positions (kv_len − q_len + i, clamped at 0: such rows see no key when causal)
    and key positions (0 .. kv_len − 1), as the spec rotates them."""
    dev = c.q.device
    q_pos = [torch.arange(kl - ql, kl, device=dev).clamp_(min=0) for ql, kl in zip(c.q_lens, c.kv_lens)]
    k_pos = [torch.arange(kl, device=dev) for kl in c.kv_lens]
    empty = torch.zeros(0, dtype=torch.long, device=dev)
    return torch.cat(q_pos) if q_pos else empty, torch.cat(k_pos) if k_pos else empty


def _fa3(case: Case) -> Runner:
    fa = require("vllm_flash_attn")
    c = _call(case)
    if c.D > 256:
        raise Unsupported(f"FA3 head dim <= 256, got {c.D}")
    if c.fp8 and c.out_dtype != torch.bfloat16:
        raise Unsupported("FA3 fp8 attention outputs bf16 only")
    kwargs = {}
    if c.fp8:
        a = case.inputs
        kwargs.update(q_descale=a["q_scale"], k_descale=a["k_scale"], v_descale=a["v_scale"])  # [B, H_kv]
    note = ""
    if c.sinks is not None:
        if c.H > 64:
            raise Unsupported("FA3 s_aux (sinks) supports at most 64 query heads")
        kwargs["s_aux"] = c.sinks.to(torch.bfloat16)
        note = "sinks rounded to bf16 (FA3 s_aux)"
    window = [c.wl, 0 if c.causal else c.wr]
    max_q, max_kv = max(c.q_lens, default=0), max(c.kv_lens, default=0)
    rotate = lambda q, k: (q, k)  # noqa: E731
    if c.rope:  # vLLM's FA3 varlen has no rotary input: rotate q and k in torch inside the timed call
        if c.fp8:
            raise Unsupported("RoPE pre-pass on fp8 q / k: FA3 would need requantized inputs")
        q_pos, k_pos = _rope_positions(c)
        cos, sin = case.inputs["rope_cos"], case.inputs["rope_sin"]
        rotate = lambda q, k: (rope_torch(q, q_pos, cos, sin, c.rotary_dim, c.interleaved),  # noqa: E731
                               rope_torch(k, k_pos, cos, sin, c.rotary_dim, c.interleaved))
        note = "RoPE pre-pass in torch (q and k rotated in the call, fp32 math)" + (f"; {note}" if note else "")

    def run():
        q, k = rotate(c.q, c.k)
        return fa.flash_attn_varlen_func(q, k, c.v, max_q, c.cu_q, max_kv, cu_seqlens_k=c.cu_kv,
                                         softmax_scale=c.sm_scale, causal=c.causal, window_size=window,
                                         softcap=c.softcap, fa_version=3, **kwargs)

    return _runner(run, c, note=("dense rows packed as uniform varlen; " if c.dense else "") + note)


adapter("fa3", DENSE)(_fa3)
adapter("fa3", VARLEN)(_fa3)


# --- FlashInfer -------------------------------------------------------------------------------------


def _fi_common(c: _Call, case: Case) -> dict:
    if c.fp8:
        raise Unsupported("FlashInfer fp8 prefill/decode take per-tensor scales, not per-[B, H_kv]")
    if c.D not in (64, 128, 256):
        raise Unsupported(f"FlashInfer head dim 64/128/256, got {c.D}")
    if c.wr >= 0 and not c.causal:
        raise Unsupported("FlashInfer has no right window")
    kw = {"window_left": c.wl, "logits_soft_cap": c.softcap or None, "sm_scale": c.sm_scale}
    if c.rope:
        if c.interleaved or c.rotary_dim != c.D or not _standard_rope_tables(c, case):
            raise Unsupported("FlashInfer ROPE_LLAMA rotates all of D (NeoX) with its own tables")
        kw.update(pos_encoding_mode="ROPE_LLAMA", rope_theta=1e4, rope_scale=1.0)
    return kw


def _flashinfer(case: Case) -> Runner:
    fi = require("flashinfer")
    c = _call(case)
    kw = _fi_common(c, case)
    dt = c.q.dtype
    ws = _workspace(c.q.device)
    t0 = time.perf_counter()
    decode = c.dense and c.out_shape[1] == 1
    if c.sinks is not None:
        run, note = _flashinfer_sink_varlen(fi, c, rope_kw={"pos_encoding_mode": "ROPE_LLAMA"} if c.rope else {})
    elif decode:
        # Contiguous dense K/V [B, S_kv, H_kv, D] is a paged NHD cache whose pages are consecutive: request b
        # owns pages [b·S_kv/PS, (b+1)·S_kv/PS). A view, no copy.
        B, S_kv = len(c.kv_lens), c.kv_lens[0] if c.kv_lens else 0
        k_dense, v_dense = case.inputs["k"], case.inputs["v"]
        if not (k_dense.is_contiguous() and v_dense.is_contiguous()):
            raise Unsupported("dense decode as pages needs contiguous k / v")
        ps = next(p for p in (256, 64, 16, 8, 4, 2, 1) if S_kv % p == 0)  # 256: as on the seed page
        per_req = S_kv // ps
        dev = c.q.device
        k_cache = k_dense.view(B * per_req, ps, c.H_kv, c.D)
        v_cache = v_dense.view(B * per_req, ps, c.H_kv, c.D)
        q = c.q.reshape(B, c.H, c.D)
        # Tensor-core decode first (FlashInfer's faster GQA path, and what the seed page timed); with JIT
        # off its module exists only for some dtypes / head dims, so fall back to the CUDA-core kernel.
        for tensor_cores in (True, False):
            try:
                w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tensor_cores)
                w.plan(torch.arange(B + 1, dtype=torch.int32, device=dev) * per_req,
                       torch.arange(B * per_req, dtype=torch.int32, device=dev),
                       torch.full((B,), ps, dtype=torch.int32, device=dev), c.H, c.H_kv, c.D, ps,
                       q_data_type=dt, kv_data_type=dt, **kw)
                w.run(q, (k_cache, v_cache))
                break
            except Exception as e:  # module missing (JIT off): the CUDA-core kernel is shipped for all
                if not tensor_cores:
                    raise
                tc_error = f"{type(e).__name__}"
        run = lambda: w.run(q, (k_cache, v_cache))  # noqa: E731
        path = "tensor-core decode" if tensor_cores else f"CUDA-core decode (tensor-core path: {tc_error})"
        note = f"dense K/V viewed as consecutive pages of {ps} tokens; {path}"
    else:
        w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="auto")
        w.plan(c.cu_q, c.cu_kv, c.H, c.H_kv, c.D, causal=c.causal, q_data_type=dt, kv_data_type=dt, **kw)
        run = lambda: w.run(c.q, c.k, c.v)
        note = "ragged prefill" + (" (dense rows packed)" if c.dense else "")
    run()  # JIT / first-use setup outside the timing
    torch.cuda.synchronize()
    return _runner(run, c, note=note, setup_s=time.perf_counter() - t0)


def _flashinfer_sink_varlen(fi, c: _Call, rope_kw: dict):
    """Sinks run only through FlashInfer's paged attention-sink wrapper (as on the seed page:
    "flashinfer-paged-sink"): contiguous K/V [T_kv, H_kv, D] is a paged NHD cache of one-token pages, page i =
    token i (a view, no copy); request b owns pages cu_kv[b]..cu_kv[b+1]."""
    from .attn_core_paged import flashinfer_sink_run

    dev = c.q.device
    T_kv = c.k.shape[0]
    kv = (c.k.view(T_kv, 1, c.H_kv, c.D), c.v.view(T_kv, 1, c.H_kv, c.D))
    last = torch.tensor([1 if n else 0 for n in c.kv_lens], dtype=torch.int32, device=dev)
    run = flashinfer_sink_run(fi, c.q, kv, decode=False, qo_indptr=c.cu_q, kv_indices=torch.arange(
        T_kv, dtype=torch.int32, device=dev), kv_last=last, kv_indptr=c.cu_kv, H=c.H, H_kv=c.H_kv, D=c.D, PS=1,
        causal=c.causal, wl=c.wl, softcap=c.softcap, sm_scale=c.sm_scale, dtype=c.q.dtype, kv_dtype=c.k.dtype,
        rope_kw=rope_kw, sinks=c.sinks)
    return run, "attention-sink paged prefill wrapper, K/V viewed as one-token pages; plan outside the timing"


adapter("flashinfer", DENSE)(_flashinfer)
adapter("flashinfer", VARLEN)(_flashinfer)


# --- torch SDPA (cuDNN / flash backends), dense only ------------------------------------------------


def _sdpa(case: Case, backend_name: str) -> Runner:
    c = _call(case)
    if not c.dense:
        raise Unsupported("SDPA has no packed varlen entry point")
    if c.fp8 or c.rope or c.softcap or c.sinks is not None or c.wl >= 0 or c.wr >= 0:
        raise Unsupported("SDPA: no fp8 scales / RoPE / softcap / sinks / windows")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)
    B, S_q, H, D = c.out_shape
    S_kv = c.kv_lens[0] if c.kv_lens else 0
    if c.causal and S_q not in (1, S_kv):
        raise Unsupported("SDPA is_causal is top-left aligned; bottom-right needs S_q == S_kv (or S_q == 1)")
    is_causal = c.causal and S_q == S_kv and S_q > 1  # S_q == 1 bottom-right: every key visible
    a = case.inputs
    q, k, v = a["q"].transpose(1, 2), a["k"].transpose(1, 2), a["v"].transpose(1, 2)
    note = ""

    def call(kk, vv, gqa):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=is_causal, scale=c.sm_scale,
                                                                    enable_gqa=gqa)

    try:
        call(k, v, c.group > 1)
        run = lambda: call(k, v, c.group > 1)
    except RuntimeError as e:
        if c.group == 1:
            raise Unsupported(f"SDPA {backend_name}: {str(e).splitlines()[0][:200]}") from None
        ke, ve = k.repeat_interleave(c.group, 1), v.repeat_interleave(c.group, 1)
        try:
            call(ke, ve, False)
        except RuntimeError as e2:
            raise Unsupported(f"SDPA {backend_name}: {str(e2).splitlines()[0][:200]}") from None
        run = lambda: call(ke, ve, False)
        note = "KV heads expanded before the call (no enable_gqa on this backend)"
    if q.is_cuda:
        torch.cuda.synchronize()
    return _runner(run, c, note=note, post=lambda o: o.transpose(1, 2))


adapter("sdpa-cudnn", DENSE)(lambda case: _sdpa(case, "CUDNN_ATTENTION"))
adapter("sdpa-flash", DENSE)(lambda case: _sdpa(case, "FLASH_ATTENTION"))


# --- flex_attention ----------------------------------------------------------------------------------


def _flex(case: Case) -> Runner:
    c = _call(case)
    if c.fp8 or c.rope or c.sinks is not None:
        raise Unsupported("flex_attention: no fp8 scales / RoPE tables / sinks")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    dev = c.q.device
    big = 1 << 30
    wl = c.wl if c.wl >= 0 else big
    wr = min(0 if c.causal else big, c.wr if c.wr >= 0 else big)
    if c.dense:
        a = case.inputs
        B, S_q = c.out_shape[0], c.out_shape[1]
        S_kv = c.kv_lens[0] if c.kv_lens else 0
        shift = S_kv - S_q
        q, k, v = a["q"].transpose(1, 2), a["k"].transpose(1, 2), a["v"].transpose(1, 2)

        def mask_mod(b, h, q_idx, kv_idx):
            p = q_idx + shift
            return (kv_idx <= p + wr) & (kv_idx >= p - wl)

        q_len, kv_len, batch = S_q, S_kv, B
    else:
        # Packed requests as one sequence with per-token request ids (document masking).
        lens_q = torch.tensor(c.q_lens, device=dev)
        lens_kv = torch.tensor(c.kv_lens, device=dev)
        req_q = torch.repeat_interleave(torch.arange(len(c.q_lens), device=dev), lens_q)
        req_kv = torch.repeat_interleave(torch.arange(len(c.kv_lens), device=dev), lens_kv)
        pos_q = torch.arange(req_q.numel(), device=dev) - c.cu_q.long()[req_q] + (lens_kv - lens_q)[req_q]
        pos_kv = torch.arange(req_kv.numel(), device=dev) - c.cu_kv.long()[req_kv]

        def mask_mod(b, h, q_idx, kv_idx):
            p = pos_q[q_idx]
            j = pos_kv[kv_idx]
            return (req_q[q_idx] == req_kv[kv_idx]) & (j <= p + wr) & (j >= p - wl)

        q, k, v = c.q.transpose(0, 1)[None], c.k.transpose(0, 1)[None], c.v.transpose(0, 1)[None]
        q_len, kv_len, batch = c.q.shape[0], c.k.shape[0], 1
    score_mod = None
    if c.softcap:
        cap = c.softcap

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)

    t0 = time.perf_counter()
    block_mask = create_block_mask(mask_mod, batch, None, q_len, kv_len, device=dev)
    flex = torch.compile(flex_attention, dynamic=False)
    run = lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=c.sm_scale, enable_gqa=c.group > 1)
    run()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    post = (lambda o: o.transpose(1, 2)) if c.dense else (lambda o: o[0].transpose(0, 1))
    return _runner(run, c, note="block mask built outside the timing", setup_s=time.perf_counter() - t0, post=post)


adapter("flex", DENSE)(_flex)
adapter("flex", VARLEN)(_flex)


# --- eager torch ---------------------------------------------------------------------------------------


def _torch_ref(case: Case) -> Runner:
    """The plain-torch reference computed in the 16-bit output dtype (per request, all heads batched)."""
    from attnops.attn_core.gqa_dense_fwd.reference import gqa_dense_fwd_ref
    from attnops.attn_core.gqa_varlen_fwd.reference import gqa_varlen_fwd_ref

    c = _call(case)
    ref = gqa_dense_fwd_ref if c.dense else gqa_varlen_fwd_ref
    run = lambda: ref(**case.inputs, compute_dtype=c.out_dtype)
    return _runner(run, c, note="eager, loops over requests and KV heads")


adapter("torch-ref", DENSE)(_torch_ref)
adapter("torch-ref", VARLEN)(_torch_ref)


@adapter("torch-compile", DENSE)
def torch_compile_dense(case: Case) -> Runner:
    """``torch.compile`` of the plain-torch reference computed in the 16-bit output dtype. Only on the rows no SDPA
    or flex backend serves (RoPE tables, fp8 scales): elsewhere those are the torch peers, and compiling every
    dense row would add minutes of compile to each run."""
    from attnops.attn_core.gqa_dense_fwd.reference import gqa_dense_fwd_ref

    c = _call(case)
    if not (c.rope or c.fp8):
        raise Unsupported("torch.compile is timed only on rows SDPA / flex cannot serve (RoPE, fp8 scales)")

    def run(**inputs):
        return gqa_dense_fwd_ref(**inputs, compute_dtype=c.out_dtype)

    return compiled_runner(run, case)


# --- paged ops (GQAPagedFwd, MHADecodePagedWithKVCacheFwd, GQAPrefillPagedWithKVCacheFwd): own module ---
from . import attn_core_paged  # noqa: E402, F401

# --- GQABwd (backward): own module; the assignment keeps its import a separate block for isort ---
BWD_MODULE = "attn_core_bwd"
from . import attn_core_bwd  # noqa: E402, F401
