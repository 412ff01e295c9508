"""GQAVarlenFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd import cases
from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import gqa_varlen_fwd
from .reference import gqa_varlen_fwd_ref

OP = "GQAVarlenFwd"
_LENGTH_PARAMS = ("q_lens", "kv_lens")


def make_case(
    w: Workload, device, shrink: bool = False, seed: int = 0, *, q_lens: list[int] | None = None,
    kv_lens: list[int] | None = None, heads: tuple[int, int] | None = None, head_dim: int | None = None,
    with_sinks: bool | None = None, **params,
) -> Case:
    """Inputs for one row (lengths from the row's ``q_lens / kv_lens``). ``shrink`` scales every length
    so the longest is <= 48 (0 stays 0, 1 stays 1, q <= kv relations kept), windows alike, and keeps
    <= 2 KV heads (same GQA ratio). Keyword overrides (``q_lens, kv_lens, heads=(H, H_kv), head_dim,
    with_sinks`` and any op parameter) build edge cases from a row."""
    device = torch.device(device)
    gen = testing.generator(seed)
    dt, out_dtype = cases.input_dtypes(w)
    if dt == E4M3 and "out_dtype" in params:  # fp8 rows: the 16-bit output dtype may be overridden
        out_dtype = params.pop("out_dtype")
    _, H, D = w.shape("q")
    H_kv = w.shape("k")[1]
    ql, kl = list(w.params["q_lens"]), list(w.params["kv_lens"])
    p = {"is_causal": True, **{k: v for k, v in w.params.items() if k not in _LENGTH_PARAMS}, **params}
    if shrink:
        f = min(1.0, cases.SHRINK_MAX_LEN / max(ql + kl))
        ql = [cases.shrink_len(x, f) for x in ql]
        kl = [cases.shrink_len(x, f) for x in kl]
        H, H_kv = cases.shrink_heads(H, H_kv)
        for side in ("window_size_left", "window_size_right"):
            if p.get(side, -1) > 0:
                p[side] = cases.shrink_len(p[side], f)
    ql = q_lens if q_lens is not None else ql
    kl = kv_lens if kv_lens is not None else kl
    H, H_kv = heads if heads is not None else (H, H_kv)
    D = head_dim if head_dim is not None else D
    B = len(ql)
    spread = cases.FP8_SPREAD if dt == E4M3 else 1.0
    meta_dev = device.type == "meta"
    inputs = {
        "q": cases.rand((sum(ql), H, D), dt, device, gen, spread),
        "k": cases.rand((sum(kl), H_kv, D), dt, device, gen, spread),
        "v": cases.rand((sum(kl), H_kv, D), dt, device, gen, spread),
        "cu_seqlens_q": torch.empty(B + 1, dtype=torch.int32, device="meta") if meta_dev
        else testing.cu_seqlens(ql, device),
        "cu_seqlens_kv": torch.empty(B + 1, dtype=torch.int32, device="meta") if meta_dev
        else testing.cu_seqlens(kl, device),
    }
    if dt == E4M3:
        for name in ("q_scale", "k_scale", "v_scale"):
            inputs[name] = cases.fp8_scales(B, H_kv, device, gen)
    out_dt = out_dtype or dt
    if p.get("pos_encoding_mode", "none") == "rope":
        r = p.get("rotary_dim") or D
        positions = w.shape("rope_cos")[0] if not shrink and w.has("rope_cos") else max(kl + [1])
        inputs["rope_cos"], inputs["rope_sin"] = cases.rope_tables(max(positions, max(kl + [1])), r, out_dt, device)
    sink_on = w.has("sinks") if with_sinks is None else with_sinks
    if sink_on:
        inputs["sinks"] = cases.sinks(H, device, gen)
    inputs.update(p)
    if out_dtype is not None:
        inputs["out_dtype"] = out_dtype
    # host bounds, as a serving engine passes them: the call reads no lengths back from the device
    inputs.setdefault("max_seqlen_q", max(ql, default=0))
    inputs.setdefault("max_seqlen_kv", max(kl, default=0))
    return Case(inputs, outputs=("o",), label=w.id, meta={"q_lens": ql, "kv_lens": kl})


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-5 requests with lengths 0 / 1 / short / long (q_len > kv_len included),
    G 1..8 with 1-2 KV heads, D 16..128 incl. 80, f16 / bf16 (GPU) / fp8 (-> f16 on the interpreter, bf16
    or f16 on a GPU), causal or not, windows, softcap, sinks, sm_scale, RoPE (both layouts, partial), host
    length bounds given or read."""
    from attnops.kernel_utils import runtime
    from attnops.kernel_utils.reliability import random_choice, random_int

    gen = testing.generator(seed)
    rows = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
    kinds = ["llama-8b-uniform/f16", "llama-8b-uniform/f16", "llama-8b-fp8/fp8e4m3/bf16"]
    if not runtime.interpreting():
        kinds.append("llama-8b-uniform/bf16")
    w = rows[random_choice(gen, kinds)]
    long_len = 60 if runtime.interpreting() else 1200
    batch = random_int(gen, 1, 5)
    q_lens, kv_lens = [], []
    for _ in range(batch):
        kv = random_choice(gen, [0, 1, random_int(gen, 2, 20), random_int(gen, 1, long_len)])
        q = random_choice(gen, [0, 1, random_int(gen, 1, max(kv, 1)), random_int(gen, 1, 30)])
        q_lens.append(q)
        kv_lens.append(kv)
    kv_heads, group = random_int(gen, 1, 2), random_choice(gen, [1, 2, 3, 4, 5, 8])
    d = random_choice(gen, [16, 32, 64, 64, 80, 128])
    causal = random_choice(gen, [True, True, False])
    rope = random_choice(gen, [False, False, True])
    params = cases.fuzz_params(gen, d, causal, rope)
    if w.dtypes()[0] == E4M3:
        params["out_dtype"] = torch.float16 if runtime.interpreting() else random_choice(
            gen, [torch.float16, torch.bfloat16])
    case = make_case(w, device, False, seed, q_lens=q_lens, kv_lens=kv_lens, heads=(kv_heads * group, kv_heads),
                     head_dim=d, with_sinks=random_choice(gen, [False, True]), **params)
    if random_choice(gen, [False, True]):  # read the lengths on the host instead
        case.inputs["max_seqlen_q"] = case.inputs["max_seqlen_kv"] = None
    case.label = f"fuzz-{seed}"
    return case


def cost(case: Case) -> Cost:
    a = case.inputs
    q = a["q"]
    H, D = q.shape[1], q.shape[2]
    sc = rw = 0
    for q_len, kv_len in zip(case.meta["q_lens"], case.meta["kv_lens"]):
        s, r = cases.visible_counts(q_len, kv_len, a.get("is_causal", True), a.get("window_size_left", -1),
                                    a.get("window_size_right", -1))
        sc, rw = sc + s, rw + r
    out_dt = a.get("out_dtype") or q.dtype
    out_bytes = q.numel() * torch.empty((), dtype=out_dt).element_size()
    names = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_kv", "q_scale", "k_scale", "v_scale", "rope_cos",
             "rope_sin", "sinks")
    return Cost(
        flops=attention_flops(H, sc, rw, D, D, bool(a.get("softcap"))),
        bytes=sum(nbytes(a.get(n)) for n in names) + out_bytes,
        roof=roof_for(q.dtype),
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    cases.compare_dual(out, ref, case, gqa_varlen_fwd_ref)


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=gqa_varlen_fwd,
    reference=gqa_varlen_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=lambda seed, device: fuzz(seed, device),
)
