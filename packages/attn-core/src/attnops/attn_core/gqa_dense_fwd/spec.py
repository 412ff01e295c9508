"""GQADenseFwd: seed workloads, shrink, cost model, acceptance rule.

The two ``qwen3-8b-chunked-*`` rows declare ``S_q = 128``; the page timed them with one query token
(spec attn-core.md, Caution). We build and time the declared ``S_q = 128`` and price it as such, so
their FLOPs / SOL are not comparable with the page's (see docs/ops/gqa_dense_fwd.md).
"""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd import cases
from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import gqa_dense_fwd
from .reference import gqa_dense_fwd_ref

OP = "GQADenseFwd"
# Rows whose page timing does not follow their declared shape (spec attn-core.md, Caution).
DECLARED_SHAPE_DIFFERS = ("qwen3-8b-chunked-prefill", "qwen3-8b-chunked-b8")


def make_case(
    w: Workload, device, shrink: bool = False, seed: int = 0, *, batch: int | None = None, s_q: int | None = None,
    s_kv: int | None = None, heads: tuple[int, int] | None = None, head_dim: int | None = None, **params,
) -> Case:
    """Inputs for one row. ``shrink`` caps B <= 2, S_kv <= 48 (S_q scaled alike), H_kv <= 2 (same GQA
    ratio) for the interpreter. Keyword overrides (``batch, s_q, s_kv, heads=(H, H_kv), head_dim`` and
    any op parameter) build edge cases from a row."""
    device = torch.device(device)
    gen = testing.generator(seed)
    dt, out_dtype = cases.input_dtypes(w)
    if dt == E4M3 and "out_dtype" in params:  # fp8 rows: the 16-bit output dtype may be overridden
        out_dtype = params.pop("out_dtype")
    B, S_q, H, D = w.shape("q")
    S_kv, H_kv = w.shape("k")[1], w.shape("k")[2]
    p = {"is_causal": True, **w.params, **params}
    if shrink:
        f = min(1.0, cases.SHRINK_MAX_LEN / S_kv)
        B, S_q, S_kv = min(B, 2), cases.shrink_len(S_q, f), cases.shrink_len(S_kv, f)
        H, H_kv = cases.shrink_heads(H, H_kv)
        for side in ("window_size_left", "window_size_right"):
            if p.get(side, -1) > 0:
                p[side] = cases.shrink_len(p[side], f)
    B = batch if batch is not None else B
    S_q = s_q if s_q is not None else S_q
    S_kv = s_kv if s_kv is not None else S_kv
    H, H_kv = heads if heads is not None else (H, H_kv)
    D = head_dim if head_dim is not None else D
    spread = cases.FP8_SPREAD if dt == E4M3 else 1.0
    inputs = {
        "q": cases.rand((B, S_q, H, D), dt, device, gen, spread),
        "k": cases.rand((B, S_kv, H_kv, D), dt, device, gen, spread),
        "v": cases.rand((B, S_kv, H_kv, D), dt, device, gen, spread),
    }
    if dt == E4M3:
        for name in ("q_scale", "k_scale", "v_scale"):
            inputs[name] = cases.fp8_scales(B, H_kv, device, gen)
    out_dt = out_dtype or dt
    if p.get("pos_encoding_mode", "none") == "rope":
        r = p.get("rotary_dim") or D
        inputs["rope_cos"], inputs["rope_sin"] = cases.rope_tables(S_kv, r, out_dt, device)
    inputs.update(p)
    if out_dtype is not None:
        inputs["out_dtype"] = out_dtype
    meta = {"q_lens": [S_q] * B, "kv_lens": [S_kv] * B}
    return Case(inputs, outputs=("o",), label=w.id, meta=meta)


def fuzz(seed: int, device) -> Case:
    """A random valid call: B 0..3, S_kv 0..70 (up to 1500 on a GPU, where small grids then split the keys),
    S_q 1..S_kv (causal / RoPE) or any, G 1..8 with 1-2 KV heads, D 16..128 incl. 80, f16 / bf16 (GPU) /
    fp8 -> f16, causal or not, windows, softcap, sm_scale, RoPE (both layouts, partial)."""
    from attnops.kernel_utils import runtime
    from attnops.kernel_utils.reliability import random_choice, random_int

    gen = testing.generator(seed)
    rows = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
    kinds = ["llama-8b-4k/f16", "llama-8b-4k/f16", "prefill-scaled/fp8e4m3/f16"]
    if not runtime.interpreting():
        kinds.append("llama-8b-4k/bf16")
    w = rows[random_choice(gen, kinds)]
    max_kv = 70 if runtime.interpreting() else 1500
    s_kv = random_choice(gen, [0, 1, random_int(gen, 2, 20), random_int(gen, 1, max_kv)])
    causal = random_choice(gen, [True, True, False])
    rope = random_choice(gen, [False, False, True])
    if causal or rope:
        s_q = random_choice(gen, [1, 1, random_int(gen, 1, max(s_kv, 1))]) if s_kv else 0
    else:
        s_q = random_choice(gen, [1, random_int(gen, 1, 40)])
    kv_heads, group = random_int(gen, 1, 2), random_choice(gen, [1, 2, 3, 4, 5, 8])
    d = random_choice(gen, [16, 32, 64, 64, 80, 128])
    params = cases.fuzz_params(gen, d, causal, rope)
    if rope and s_kv == 0:
        params["pos_encoding_mode"], params["rotary_dim"] = "none", None
    case = make_case(w, device, False, seed, batch=random_int(gen, 0, 3), s_q=s_q, s_kv=s_kv,
                     heads=(kv_heads * group, kv_heads), head_dim=d, **params)
    case.label = f"fuzz-{seed}"
    return case


def cost(case: Case) -> Cost:
    a = case.inputs
    q = a["q"]
    H, D = q.shape[2], q.shape[3]
    sc = rw = 0
    for q_len, kv_len in zip(case.meta["q_lens"], case.meta["kv_lens"]):
        s, r = cases.visible_counts(q_len, kv_len, a.get("is_causal", True), a.get("window_size_left", -1),
                                    a.get("window_size_right", -1))
        sc, rw = sc + s, rw + r
    out_dt = a.get("out_dtype") or q.dtype
    out_bytes = q.numel() * torch.empty((), dtype=out_dt).element_size()
    read = sum(nbytes(a.get(n)) for n in ("q", "k", "v", "q_scale", "k_scale", "v_scale", "rope_cos", "rope_sin"))
    return Cost(
        flops=attention_flops(H, sc, rw, D, D, bool(a.get("softcap"))),
        bytes=read + out_bytes,
        roof=roof_for(q.dtype),
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    cases.compare_dual(out, ref, case, gqa_dense_fwd_ref)


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=gqa_dense_fwd,
    reference=gqa_dense_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=lambda seed, device: fuzz(seed, device),
)
