"""Peers of the three paged attn-core ops (GQAPagedFwd, MHADecodePagedWithKVCacheFwd,
GQAPrefillPagedWithKVCacheFwd): vLLM FA3 paged, FlashInfer paged decode / prefill wrappers, torch gather +
SDPA, and the eager torch reference.

Each adapter is faithful to our call (bottom-right causal, windows, softcap, sinks, RoPE positions, fp8
scales, the prefill op's append) or raises ``Unsupported`` naming what it cannot express. Plans, index
tensors, slot mappings and JIT compilation happen in the adapter, outside the timed call; what the timed
call must still do to be equivalent (RoPE passes, the K/V append, dequantizing gathers) is in it and named
in the note. Imported by ``benchmarks.baselines.attn_core``.
"""

from __future__ import annotations

import math
import time

import torch

from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case

from . import Runner, Unsupported, adapter, require, rope_torch

PAGED, MHA, PREFILL = "GQAPagedFwd", "MHADecodePagedWithKVCacheFwd", "GQAPrefillPagedWithKVCacheFwd"
_WS: dict[str, torch.Tensor] = {}


def _workspace(dev) -> torch.Tensor:
    if "fi" not in _WS:
        _WS["fi"] = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    return _WS["fi"]


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


# =====================================================================================================
# GQAPagedFwd
# =====================================================================================================


class _Paged:
    """One GQAPagedFwd call with host-side lengths."""

    def __init__(self, case: Case):
        a = case.inputs
        self.a = a
        self.q, self.kp, self.vp = a["q"], a["k_pages"], a["v_pages"]
        self.T, self.H, self.D = self.q.shape
        self.NP, self.PS, self.H_kv, _ = self.kp.shape
        cu = a["cu_seqlens_q"].tolist()
        self.q_lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
        self.kv_lens = a["cache_seqlens"].tolist()
        self.causal = a.get("is_causal", True)
        self.wl, self.wr = a.get("window_size_left", -1), a.get("window_size_right", -1)
        self.softcap = float(a.get("softcap") or 0.0)
        self.sm_scale = a.get("sm_scale") or 1.0 / math.sqrt(self.D)
        self.rope = a.get("pos_encoding_mode", "none") == "rope"
        self.R = (a.get("rotary_dim") or self.D) if self.rope else 0
        self.interleaved = a.get("rope_layout") == "interleaved"
        self.sinks = a.get("sinks")
        self.fp8_q = self.q.dtype == E4M3
        self.fp8_kv = self.kp.dtype == E4M3
        self.out_dtype = a.get("out_dtype") or self.q.dtype
        self.dev = self.q.device

    def rotated_pool(self):
        """(k_pool_rotated buffer, run()) : a RoPE pre-pass that rotates every pool row the call reads at its
        position (rows gathered, rotated, scattered into a second pool); raises Unsupported when a shared
        row is read at two different positions."""
        tab = self.a["page_table"].long()
        rows, pos = [], []
        for b, c in enumerate(self.kv_lens):
            if self.q_lens[b] == 0 or c == 0:
                continue
            p = torch.arange(c, device=self.dev)
            rows.append(tab[b, p // self.PS] * self.PS + p % self.PS)
            pos.append(p)
        if not rows:
            return self.kp, lambda: None
        rows, pos = torch.cat(rows), torch.cat(pos)
        uniq, inv = torch.unique(rows, return_inverse=True)
        first = torch.full((uniq.numel(),), -1, dtype=torch.long, device=self.dev).scatter_(0, inv, pos)
        if not bool((first[inv] == pos).all()):
            raise Unsupported("a shared page is read at two positions: one rotated copy cannot serve both")
        flat = self.kp.reshape(-1, self.H_kv, self.D)
        out = flat.clone()
        cos, sin = self.a["rope_cos"], self.a["rope_sin"]

        def run():
            out.index_copy_(0, rows, rope_torch(flat.index_select(0, rows), pos, cos, sin, self.R, self.interleaved))

        return out.view_as(self.kp), run

    def rotated_q(self):
        cos, sin = self.a["rope_cos"], self.a["rope_sin"]
        pos = torch.cat([torch.arange(c - n, c, device=self.dev) for n, c in zip(self.q_lens, self.kv_lens)]
                        or [torch.zeros(0, dtype=torch.long, device=self.dev)])
        return lambda: rope_torch(self.q, pos, cos, sin, self.R, self.interleaved)


@adapter("fa3", PAGED)
def fa3_paged(case: Case) -> Runner:
    fa = require("vllm_flash_attn")
    c = _Paged(case)
    if c.fp8_kv or c.fp8_q:
        raise Unsupported("FA3 paged fp8 needs an fp8 q, fp8 cache and bf16 output together")
    if c.D > 256:
        raise Unsupported(f"FA3 head dim <= 256, got {c.D}")
    kwargs, notes = {}, []
    if c.sinks is not None:
        if c.H > 64:
            raise Unsupported("FA3 s_aux (sinks) supports at most 64 query heads")
        kwargs["s_aux"] = c.sinks.to(torch.bfloat16)
        notes.append("sinks rounded to bf16 (FA3 s_aux)")
    window = [c.wl, 0 if c.causal else c.wr]
    max_q, max_k = max(c.q_lens, default=0), max(c.kv_lens, default=0)
    a = case.inputs
    k_pool, rope_k = c.kp, None
    q_of = lambda: c.q
    if c.rope:
        k_pool, rope_k = c.rotated_pool()
        q_of = c.rotated_q()
        notes.append("RoPE pre-pass in torch (q, and every pool row read, rotated into a second pool) in the call")

    def run():
        if rope_k is not None:
            rope_k()
        return fa.flash_attn_varlen_func(q_of(), k_pool, c.vp, max_q, a["cu_seqlens_q"], max_k,
                                         seqused_k=a["cache_seqlens"], block_table=a["page_table"],
                                         softmax_scale=c.sm_scale, causal=c.causal, window_size=window,
                                         softcap=c.softcap, fa_version=3, **kwargs)

    run()
    _sync(c.dev)
    return _single_output_runner(run, note="; ".join(notes))


def _single_output_runner(run, note: str = "", setup_s: float = 0.0, shape=None) -> Runner:
    last: dict[str, torch.Tensor] = {}

    def go():
        last["o"] = run()

    def outputs():
        o = last["o"]
        return {"o": o if shape is None else o.reshape(shape)}

    return Runner(go, outputs, note=note, setup_s=setup_s)


def _fi_paged_indices(table: torch.Tensor, kv_lens: list[int], page_size: int, dev):
    """FlashInfer's CSR page list: (kv_indptr, kv_indices, kv_last_page_len), built once outside the timing."""
    pages = [-(-n // page_size) for n in kv_lens]
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    tab = table.cpu()
    indices = torch.cat([tab[b, :p] for b, p in enumerate(pages)] + [torch.zeros(0, dtype=torch.int32)])
    last = torch.tensor([(n - 1) % page_size + 1 if n else 0 for n in kv_lens], dtype=torch.int32, device=dev)
    return indptr, indices.to(torch.int32).to(dev), last


def _fi_run(fi, case_q, kv, *, decode: bool, qo_indptr, kv_indices, kv_last, kv_indptr, H, H_kv, D, PS, causal,
            wl, softcap, sm_scale, dtype, kv_dtype, rope_kw, sinks, group):
    ws = _workspace(case_q.device)
    kw = dict(window_left=wl, logits_soft_cap=softcap or None, sm_scale=sm_scale, **rope_kw)
    if sinks is not None:
        return flashinfer_sink_run(fi, case_q, kv, decode=decode, qo_indptr=qo_indptr, kv_indices=kv_indices,
                            kv_last=kv_last, kv_indptr=kv_indptr, H=H, H_kv=H_kv, D=D, PS=PS, causal=causal,
                            wl=wl, softcap=softcap, sm_scale=sm_scale, dtype=dtype, kv_dtype=kv_dtype,
                            rope_kw=rope_kw, sinks=sinks)
    if decode:
        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=group >= 4)
        w.plan(kv_indptr, kv_indices, kv_last, H, H_kv, D, PS, q_data_type=dtype, kv_data_type=kv_dtype, **kw)
    else:
        w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="auto")
        w.plan(qo_indptr, kv_indptr, kv_indices, kv_last, H, H_kv, D, PS, causal=causal, q_data_type=dtype,
               kv_data_type=kv_dtype, **kw)
    return lambda: w.run(case_q, kv)


def flashinfer_sink_run(fi, case_q, kv, *, decode: bool, qo_indptr, kv_indices, kv_last, kv_indptr, H, H_kv, D, PS,
                 causal, wl, softcap, sm_scale, dtype, kv_dtype, rope_kw, sinks):
    """FlashInfer's attention-sink wrappers: a separate JIT variant (``AttentionSink``) whose softmax adds
    ``exp(sink_h - m)`` to each row's denominator, sinks in the scores' natural-log units as the spec's. Its
    plain FA2 / FA3 modules take ``sinks=`` and drop it (docs/peer-gaps.md §10). The kernel reads the scale from
    ``run``'s positional ``sm_scale``; the window is fixed when the wrapper is built."""
    if softcap or rope_kw:
        raise Unsupported("FlashInfer's attention-sink variant has no softcap / RoPE")
    ws = _workspace(case_q.device)
    sinks32 = sinks.float().contiguous()
    variant = dict(q_data_type=dtype, kv_data_type=kv_dtype, head_dim_qk=D, head_dim_vo=D, window_left=wl)
    if decode:
        w = fi.BatchDecodeWithAttentionSinkWrapper(ws, "NHD", backend="auto", **variant)
        w.plan(kv_indptr, kv_indices, kv_last, H, H_kv, D, PS, window_left=wl, sm_scale=sm_scale,
               q_data_type=dtype, kv_data_type=kv_dtype)
    else:
        w = fi.BatchAttentionWithAttentionSinkWrapper(ws, "NHD", backend="auto", **variant)
        w.plan(qo_indptr, kv_indptr, kv_indices, kv_last, H, H_kv, D, PS, causal=causal, window_left=wl,
               sm_scale=sm_scale, q_data_type=dtype, kv_data_type=kv_dtype)
    return lambda: w.run(case_q, kv, sinks32, sm_scale)


@adapter("flashinfer", PAGED)
def flashinfer_paged(case: Case) -> Runner:
    fi = require("flashinfer")
    c = _Paged(case)
    if c.fp8_kv or c.fp8_q:
        raise Unsupported("FlashInfer fp8 paged attention takes per-tensor scales on an fp8 q path we do not map")
    if c.D not in (64, 128, 256):
        raise Unsupported(f"FlashInfer head dim 64/128/256, got {c.D}")
    if c.wr >= 0 and not c.causal:
        raise Unsupported("FlashInfer has no right window")
    rope_kw = {}
    if c.rope:
        cos = case.inputs["rope_cos"]
        inv = 1e4 ** (-torch.arange(0, c.R, 2, dtype=torch.float64, device=c.dev) / c.R)
        ang = torch.arange(cos.shape[0], dtype=torch.float64, device=c.dev)[:, None] * inv[None, :]
        standard = bool(torch.allclose(cos.double(), ang.cos(), atol=1e-2))
        if c.interleaved or c.R != c.D or not standard:
            raise Unsupported("FlashInfer ROPE_LLAMA rotates all of D (NeoX) with its own theta=1e4 tables")
        rope_kw = dict(pos_encoding_mode="ROPE_LLAMA", rope_theta=1e4, rope_scale=1.0)
    a = case.inputs
    kv_indptr, kv_indices, kv_last = _fi_paged_indices(a["page_table"], c.kv_lens, c.PS, c.dev)
    decode = all(n == 1 for n in c.q_lens)
    t0 = time.perf_counter()
    run = _fi_run(fi, c.q, (c.kp, c.vp), decode=decode, qo_indptr=a["cu_seqlens_q"], kv_indices=kv_indices,
                  kv_last=kv_last, kv_indptr=kv_indptr, H=c.H, H_kv=c.H_kv, D=c.D, PS=c.PS, causal=c.causal,
                  wl=c.wl, softcap=c.softcap, sm_scale=c.sm_scale, dtype=c.q.dtype, kv_dtype=c.kp.dtype,
                  rope_kw=rope_kw, sinks=c.sinks, group=c.H // c.H_kv)
    try:
        run()  # JIT / first-use setup outside the timing
    except (NotImplementedError, TypeError, ValueError) as e:
        raise Unsupported(f"FlashInfer: {str(e).splitlines()[0][:200]}") from None
    _sync(c.dev)
    note = ("decode wrapper" if decode else "paged prefill wrapper") + "; plan outside the timing"
    if c.sinks is not None:
        note = "attention-sink " + note
    return _single_output_runner(run, note=note, setup_s=time.perf_counter() - t0)


@adapter("sdpa-gather", PAGED)
def sdpa_gather_paged(case: Case) -> Runner:
    """torch: gather each request's pages into contiguous K/V (index_select), RoPE / fp8 dequant in torch,
    then SDPA with a boolean bottom-right mask. Decode-like batches (every q_len <= 16) are padded into one
    SDPA call; others loop over requests."""
    c = _Paged(case)
    if c.softcap or c.sinks is not None:
        raise Unsupported("SDPA has no softcap / sinks")
    a = case.inputs
    dt = c.out_dtype
    tab = a["page_table"].long()
    flat_k = c.kp.reshape(-1, c.H_kv, c.D)
    flat_v = c.vp.reshape(-1, c.H_kv, c.D)
    big = 1 << 30
    wl = c.wl if c.wl >= 0 else big
    wr = min(0 if c.causal else big, c.wr if c.wr >= 0 else big)
    cos, sin = a.get("rope_cos"), a.get("rope_sin")

    def scale_of(name, b):
        s = a.get(name)
        if s is None:
            return None
        return s.reshape(-1)[0] if s.numel() == 1 else s[b][None, :, None]

    def prep_kv(b, rows, pos):
        k, v = flat_k.index_select(0, rows), flat_v.index_select(0, rows)
        if c.fp8_kv:
            k, v = (k.float() * scale_of("k_scale", b)).to(dt), (v.float() * scale_of("v_scale", b)).to(dt)
        if c.rope:
            k = rope_torch(k, pos, cos, sin, c.R, c.interleaved)
        return k, v

    def prep_q(b, qb, pos):
        if c.fp8_q:
            qb = (qb.float() * a["q_scale"][b].repeat_interleave(c.H // c.H_kv)[None, :, None]).to(dt)
        if c.rope:
            qb = rope_torch(qb, pos, cos, sin, c.R, c.interleaved)
        return qb

    cu = a["cu_seqlens_q"].tolist()
    live = [b for b in range(len(c.q_lens)) if c.q_lens[b] > 0]
    o = torch.zeros(c.T, c.H, c.D, dtype=dt, device=c.dev)
    if max(c.q_lens, default=0) <= 16 and live and not (c.fp8_kv or c.fp8_q or c.rope):
        # One padded batch: [B, max_c] row indices (clamped), a validity + position mask.
        max_q, max_c = max(c.q_lens[b] for b in live), max(max(c.kv_lens[b] for b in live), 1)
        j = torch.arange(max_c, device=c.dev)
        lens = torch.tensor([c.kv_lens[b] for b in live], device=c.dev)
        rows = tab[live][:, (j // c.PS)].clamp(min=0) * c.PS + (j % c.PS)[None, :]
        rows = torch.where(j[None, :] < lens[:, None], rows, torch.zeros_like(rows))
        qi = torch.arange(max_q, device=c.dev)
        qlens = torch.tensor([c.q_lens[b] for b in live], device=c.dev)
        p = lens[:, None] - qlens[:, None] + qi[None, :]  # [B, max_q]
        mask = (j[None, None, :] < lens[:, None, None]) & (j[None, None, :] >= p[..., None] - wl) & \
            (j[None, None, :] <= p[..., None] + wr)
        q_rows = torch.tensor([cu[b] for b in live], device=c.dev)[:, None] + qi[None, :].clamp(max=max_q - 1)
        q_ok = qi[None, :] < qlens[:, None]
        q_rows = torch.where(q_ok, q_rows, q_rows[:, :1])

        def run():
            k = flat_k.index_select(0, rows.reshape(-1)).view(len(live), max_c, c.H_kv, c.D).transpose(1, 2)
            v = flat_v.index_select(0, rows.reshape(-1)).view(len(live), max_c, c.H_kv, c.D).transpose(1, 2)
            q = c.q.index_select(0, q_rows.reshape(-1)).view(len(live), max_q, c.H, c.D).transpose(1, 2)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None],
                                                                   scale=c.sm_scale, enable_gqa=c.H != c.H_kv)
            o.index_copy_(0, q_rows[q_ok], out.transpose(1, 2)[q_ok])
            return o

        note = "pages gathered into padded contiguous K/V (index_select), one masked SDPA"
    else:
        plan = []
        for b in live:
            n, kv = c.q_lens[b], c.kv_lens[b]
            kpos = torch.arange(kv, device=c.dev)
            qpos = torch.arange(kv - n, kv, device=c.dev)
            rows = tab[b, kpos // c.PS] * c.PS + kpos % c.PS
            mask = (kpos[None, :] >= qpos[:, None] - wl) & (kpos[None, :] <= qpos[:, None] + wr)
            plan.append((b, n, rows, kpos, qpos, mask))

        def run():
            for b, n, rows, kpos, qpos, mask in plan:
                k, v = prep_kv(b, rows, kpos)
                qb = prep_q(b, c.q[cu[b]:cu[b] + n], qpos)
                out = torch.nn.functional.scaled_dot_product_attention(
                    qb.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                    attn_mask=mask[None, None], scale=c.sm_scale, enable_gqa=c.H != c.H_kv)
                o[cu[b]:cu[b] + n] = out[0].transpose(0, 1)
            return o

        note = "per request: pages gathered into contiguous K/V (index_select), masked SDPA"
    run()
    _sync(c.dev)
    return _single_output_runner(run, note=note)


@adapter("torch-ref", PAGED)
def torch_ref_paged(case: Case) -> Runner:
    from attnops.attn_core.gqa_paged_fwd.reference import gqa_paged_fwd_ref

    c = _Paged(case)
    return _single_output_runner(lambda: gqa_paged_fwd_ref(**case.inputs, lowp=c.out_dtype),
                                 note="eager fp32 reference, loops over requests")


# =====================================================================================================
# MHADecodePagedWithKVCacheFwd
# =====================================================================================================


def _mha(case: Case):
    a = case.inputs
    q, k, v = a["q"], a["k"], a["v"]
    B, S_q, H, D = q.shape
    PS = a["page_size"]
    lens = a["real_seqlen_kv"].tolist()
    return a, q, k.view(-1, PS, H, D), v.view(-1, PS, H, D), B, S_q, H, D, PS, lens


@adapter("fa3", MHA)
def fa3_mha(case: Case) -> Runner:
    fa = require("vllm_flash_attn")
    a, q, kp, vp, B, S_q, H, D, PS, lens = _mha(case)
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device) * S_q
    q3 = q.reshape(B * S_q, H, D)
    max_k = max(lens, default=0)

    def run():
        return fa.flash_attn_varlen_func(q3, kp, vp, S_q, cu_q, max_k, seqused_k=a["real_seqlen_kv"],
                                         block_table=a["block_table"], softmax_scale=1.0 / math.sqrt(D),
                                         causal=a["is_causal"], fa_version=3)

    run()
    _sync(q.device)
    return _single_output_runner(run, note="flat pool viewed as [NP, PS, H, D]; cu_seqlens_q built outside",
                                 shape=q.shape)


@adapter("flashinfer", MHA)
def flashinfer_mha(case: Case) -> Runner:
    fi = require("flashinfer")
    a, q, kp, vp, B, S_q, H, D, PS, lens = _mha(case)
    if D not in (64, 128, 256):
        raise Unsupported(f"FlashInfer head dim 64/128/256, got {D}")
    kv_indptr, kv_indices, kv_last = _fi_paged_indices(a["block_table"], lens, PS, q.device)
    qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=q.device) * S_q
    decode = S_q == 1
    t0 = time.perf_counter()
    q_in = q.reshape(B * S_q, H, D)
    run = _fi_run(fi, q_in, (kp, vp), decode=decode, qo_indptr=qo_indptr, kv_indices=kv_indices, kv_last=kv_last,
                  kv_indptr=kv_indptr, H=H, H_kv=H, D=D, PS=PS, causal=a["is_causal"], wl=-1, softcap=0.0,
                  sm_scale=1.0 / math.sqrt(D), dtype=q.dtype, kv_dtype=q.dtype, rope_kw={}, sinks=None, group=1)
    run()
    _sync(q.device)
    return _single_output_runner(run, note=("decode" if decode else "paged prefill") + " wrapper; plan outside",
                                 setup_s=time.perf_counter() - t0, shape=q.shape)


@adapter("torch-ref", MHA)
def torch_ref_mha(case: Case) -> Runner:
    from attnops.attn_core.mha_decode_paged_with_kv_cache_fwd.reference import mha_decode_paged_with_kv_cache_fwd_ref

    q = case.inputs["q"]
    return _single_output_runner(lambda: mha_decode_paged_with_kv_cache_fwd_ref(**case.inputs, lowp=q.dtype),
                                 note="eager fp32 reference, loops over requests")


# =====================================================================================================
# GQAPrefillPagedWithKVCacheFwd
# =====================================================================================================


@adapter("fa3", PREFILL)
def fa3_prefill(case: Case) -> Runner:
    """RoPE (torch) on q / k_new, vLLM's reshape_and_cache_flash for the append, FA3 paged attention over
    cache + new rows. fp8 pools: FA3 would need an fp8 q (ours attends the exact 16-bit q and new keys), so
    the cached rows are gathered and dequantized (torch) and attended with the new rows as varlen."""
    fa = require("vllm_flash_attn")
    co = require("vllm_cache_ops")
    a = case.inputs
    q, kn, vn, kp, vp = a["q"], a["k_new"], a["v_new"], a["k_pages"], a["v_pages"]
    T, H, D = q.shape
    H_kv = kn.shape[1]
    PS = a["page_size"]
    dev, dt = q.device, q.dtype
    fp8 = kp.dtype == E4M3
    cu = a["cu_seqlens_q"].tolist()
    q_lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    c_lens = a["cache_seqlens"].tolist()
    tab = a["block_table"].long()
    pos = torch.cat([torch.arange(c, c + n, device=dev) for c, n in zip(c_lens, q_lens)]
                    + [torch.zeros(0, dtype=torch.long, device=dev)])
    req = torch.repeat_interleave(torch.arange(len(q_lens), device=dev), torch.tensor(q_lens, device=dev))
    slots = (tab[req, pos // PS] * PS + pos % PS).to(torch.int64)
    sm_scale = a.get("sm_scale") or 1.0 / math.sqrt(D)
    softcap = float(a.get("softcap") or 0.0)
    causal = a.get("is_causal", True)
    out = a["out"]
    rope = a.get("fuse_rope", False)
    if rope:
        from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.reference import rope_table

        R = a.get("rotary_dim") or D
        cos, sin = rope_table(a["max_position"], R, a.get("rope_base", 1e4), dt, dev)
    kp4, vp4 = kp.view(-1, PS, H_kv, D), vp.view(-1, PS, H_kv, D)
    one = torch.ones(1, device=dev)
    pools = (kp4.view(torch.uint8), vp4.view(torch.uint8)) if fp8 else (kp4, vp4)
    kind = "fp8" if fp8 else "auto"
    k_scale, v_scale = (a["k_scale"], a["v_scale"]) if fp8 else (one, one)
    totals = [c + n for c, n in zip(c_lens, q_lens)]
    max_q = max(q_lens, default=0)
    if not fp8:
        seqused = torch.tensor(totals, dtype=torch.int32, device=dev)

        def attend(qr, kr, vr):
            return fa.flash_attn_varlen_func(qr, kp4, vp4, max_q, a["cu_seqlens_q"], max(totals, default=0),
                                             seqused_k=seqused, block_table=a["block_table"],
                                             softmax_scale=sm_scale, causal=causal, softcap=softcap, out=out,
                                             fa_version=3)

        note = "torch RoPE + reshape_and_cache_flash + FA3 paged"
    else:
        # per request: c cached rows (dequantized) then the q new rows, packed as varlen K/V
        rows_c = torch.cat([tab[b, torch.arange(c, device=dev) // PS] * PS + torch.arange(c, device=dev) % PS
                            for b, c in enumerate(c_lens)] + [torch.zeros(0, dtype=torch.long, device=dev)])
        dst_c, dst_n, off = [], [], 0
        for c, n in zip(c_lens, q_lens):
            dst_c.append(torch.arange(off, off + c, device=dev))
            dst_n.append(torch.arange(off + c, off + c + n, device=dev))
            off += c + n
        dst_c = torch.cat(dst_c + [torch.zeros(0, dtype=torch.long, device=dev)])
        dst_n = torch.cat(dst_n + [torch.zeros(0, dtype=torch.long, device=dev)])
        kbuf = torch.empty(off, H_kv, D, dtype=dt, device=dev)
        vbuf = torch.empty(off, H_kv, D, dtype=dt, device=dev)
        cu_k = torch.tensor([0] + torch.tensor(totals).cumsum(0).tolist(), dtype=torch.int32, device=dev)
        flat_k, flat_v = kp, vp

        def attend(qr, kr, vr):
            kbuf.index_copy_(0, dst_c, (flat_k.index_select(0, rows_c).float() * a["k_scale"]).to(dt))
            vbuf.index_copy_(0, dst_c, (flat_v.index_select(0, rows_c).float() * a["v_scale"]).to(dt))
            kbuf.index_copy_(0, dst_n, kr)
            vbuf.index_copy_(0, dst_n, vr)
            return fa.flash_attn_varlen_func(qr, kbuf, vbuf, max_q, a["cu_seqlens_q"], max(totals, default=0),
                                             cu_seqlens_k=cu_k, softmax_scale=sm_scale, causal=causal,
                                             softcap=softcap, out=out, fa_version=3)

        note = ("reshape_and_cache_flash (fp8) for the append; cached rows gathered + dequantized in torch "
                "(FA3 fp8 needs an fp8 q), FA3 varlen")

    def run():
        qr, kr = q, kn
        if rope:
            qr = rope_torch(q, pos, cos, sin, R, False)
            kr = rope_torch(kn, pos, cos, sin, R, False)
        co.reshape_and_cache_flash(kr, vn, *pools, slots, kind, k_scale, v_scale)
        return attend(qr, kr, vn)

    run()
    _sync(dev)
    return Runner(run, lambda: {n: a[n] for n in case.outputs}, note=note + ("; RoPE in torch" if rope else ""))


@adapter("torch-ref", PREFILL)
def torch_ref_prefill(case: Case) -> Runner:
    from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.reference import gqa_prefill_paged_with_kv_cache_fwd_ref

    a = case.inputs
    run = lambda: gqa_prefill_paged_with_kv_cache_fwd_ref(**a, lowp=a["q"].dtype)
    return Runner(run, lambda: {n: a[n] for n in case.outputs}, note="eager fp32 reference, loops over requests")
