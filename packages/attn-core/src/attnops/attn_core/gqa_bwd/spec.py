"""GQABwd: seed workloads, shrink, cost model, acceptance rule.

Every seed row is causal (spec attn-core.md: the page's TFLOP/s only match the halved count); the rows
carry no ``is_causal`` param, so ``make_case`` sets ``is_causal=True`` unless overridden.
"""

from __future__ import annotations

import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import gqa_bwd
from .reference import attention_ref, gqa_bwd_closed_form, gqa_bwd_ref

OP = "GQABwd"
SHRINK_LEN = 40  # interpreter: sequence length after shrinking (not a multiple of any tile: ragged edges)
SHRINK_KV_HEADS = 2


def _rand(shape, dtype, device, gen) -> torch.Tensor:
    if torch.device(device).type == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    return testing.randn(shape, dtype, device, gen)


def make_case(
    w: Workload, device, shrink: bool = False, seed: int = 0, *, batch: int | None = None, s_q: int | None = None,
    s_kv: int | None = None, heads: tuple[int, int] | None = None, head_dim: int | None = None,
    is_causal: bool = True, sm_scale: float | None = None,
) -> Case:
    """Inputs for one row: fresh q, k, v, dO and the consistent forward ``(o, lse)`` of the fp32 reference
    (o rounded to the row dtype, lse base 2). ``shrink``: B <= 2, S = 40, H_kv <= 2 (same GQA ratio), same
    D. Keyword overrides build edge cases from a row (``s_q != s_kv``, other heads / head dims, non-causal).
    On the ``meta`` device tensors are shape-only (cost checks)."""
    device = torch.device(device)
    gen = testing.generator(seed)
    dt = w.dtypes()[0]
    B, S, H, D = w.shape("q")
    H_kv = w.shape("k")[2]
    if shrink:
        B, S = min(B, 2), min(S, SHRINK_LEN)
        G = H // H_kv
        H_kv = min(H_kv, SHRINK_KV_HEADS)
        H = G * H_kv
    B = batch if batch is not None else B
    S_q = s_q if s_q is not None else S
    S_kv = s_kv if s_kv is not None else S
    H, H_kv = heads if heads is not None else (H, H_kv)
    D = head_dim if head_dim is not None else D
    q = _rand((B, S_q, H, D), dt, device, gen)
    k = _rand((B, S_kv, H_kv, D), dt, device, gen)
    v = _rand((B, S_kv, H_kv, D), dt, device, gen)
    do = _rand((B, S_q, H, D), dt, device, gen)
    if device.type == "meta":
        o, lse = torch.empty_like(q), torch.empty((B, H, S_q), dtype=torch.float32, device=device)
    else:
        o, lse = attention_ref(q, k, v, is_causal=is_causal, sm_scale=sm_scale)
        o, lse = o.to(dt), lse.float()
    inputs = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse, "is_causal": is_causal}
    if sm_scale is not None:
        inputs["sm_scale"] = sm_scale
    return Case(inputs, outputs=("dq", "dk", "dv"), label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call (``make_case`` with overrides): B 1..3, S_kv 1..70 (up to 700 on a GPU: several
    tiles per role) incl. lengths off every tile, S_q 1..S_kv when causal (= S_kv, the page's rows, or
    shorter: bottom-right) or 1..70 (700) when not, G 1..8 incl. 3, 5, 6 with 1-2 KV heads, D 16..256 incl. 80
    and 96, sm_scale, f16 (bf16 too on a GPU)."""
    gen = testing.generator(seed)
    rows = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
    kinds = ["llama-8b-short/f16"] if runtime.interpreting() else ["llama-8b-short/f16", "llama-8b-short/bf16"]
    w = rows[random_choice(gen, kinds)]
    long_len = 70 if runtime.interpreting() else 700
    causal = random_choice(gen, [True, True, False])
    s_kv = random_choice(gen, [1, random_int(gen, 2, 20), random_int(gen, 2, long_len), random_int(gen, 2, long_len),
                               random_int(gen, 2, long_len)])
    if causal:
        s_q = random_choice(gen, [1, s_kv, random_int(gen, 1, s_kv), random_int(gen, 1, s_kv)])
    else:
        s_q = random_choice(gen, [1, random_int(gen, 1, long_len)])
    kv_heads, group = random_int(gen, 1, 2), random_choice(gen, [1, 2, 3, 4, 5, 6, 8])
    d = random_choice(gen, [16, 32, 64, 64, 80, 96, 128, 256])
    case = make_case(w, device, False, seed, batch=random_int(gen, 1, 3), s_q=s_q, s_kv=s_kv,
                     heads=(kv_heads * group, kv_heads), head_dim=d,
                     is_causal=causal, sm_scale=random_choice(gen, [None, None, 0.05, 0.3]))
    case.label = f"fuzz-{seed}"
    return case


def flops(B: int, H: int, S_q: int, S_kv: int, D: int, is_causal: bool) -> int:
    """Five ``S_q×S_kv×D`` contractions (QKᵀ, dO·Vᵀ, Pᵀ·dO, dS·K, dSᵀ·Q), softmax not counted:
    ``10·B·H·S²·D``, integer-halved when causal (spec attn-core.md GQABwd). For ``S_q != S_kv`` (not a
    page row) the causal count is ``10·B·H·D·(visible pairs)``."""
    full = 10 * B * H * S_q * S_kv * D
    if not is_causal:
        return full
    if S_q == S_kv:
        return full // 2
    visible = S_q * (S_kv - S_q) + S_q * (S_q + 1) // 2  # row i sees S_kv − S_q + i + 1 keys (S_q <= S_kv)
    return 10 * B * H * D * visible


def cost(case: Case) -> Cost:
    a = case.inputs
    B, S_q, H, D = a["q"].shape
    S_kv = a["k"].shape[1]
    read = sum(nbytes(a[n]) for n in ("q", "k", "v", "o", "do", "lse"))
    written = nbytes(a["q"]) + nbytes(a["k"]) + nbytes(a["v"])  # dq, dk, dv in the input dtype
    return Cost(flops=flops(B, H, S_q, S_kv, D, a.get("is_causal", True)), bytes=read + written,
                roof=roof_for(a["q"].dtype))


# Bound on |dq|, |dk| where the fp32 reference is exactly 0 (inputs are unit-scale normals, gradients O(1)).
ZERO_GRAD_ATOL = 1e-3


def compare(out: dict, ref: dict, case: Case) -> None:
    """dq, dk, dv each within 2× the error of torch's low-precision autograd on the same inputs (+ 1e-3) of the fp32
    reference, or, failing that, of the exact gradients of the inputs the kernel was given
    (:func:`gqa_bwd_closed_form` in fp32). The second target differs from the first by the rounding of ``o`` to 16
    bits, which the kernel must use (Δ = rowsum(o·dO)) while torch's autograd recomputes the forward: with few keys
    and a peaked softmax dP − Δ cancels and that rounding alone moves dq / dk several times torch's error.

    A gradient whose fp32 reference is exactly 0 everywhere (S_kv = 1: P = 1, so dS = P·(dP − Δ) = 0) has no
    relative error: the kernel's dP and Δ are two fp32 sums of the same products in different orders and leave a
    residue of ~1e-6; it must stay within ``ZERO_GRAD_ATOL`` (a wrong P, Δ or mask gives O(1) values, NaN fails).
    """
    lowp = case.memo("lowp", lambda: dict(zip(case.outputs, gqa_bwd_ref(**case.inputs,
                                                                      compute_dtype=case.inputs["q"].dtype))))
    for name in case.outputs:
        if ref[name].numel() and not bool(ref[name].any()) and out[name].shape == ref[name].shape:
            worst = float(out[name].float().abs().max())
            if not worst <= ZERO_GRAD_ATOL:
                raise AssertionError(f"{name}: max |value| {worst:.3e} > {ZERO_GRAD_ATOL:.0e} where the reference is 0")
            continue
        try:
            testing.assert_close_dual(name, out[name], ref[name], lowp[name])
        except AssertionError as against_reference:
            if "given" not in case.meta:
                case.meta["given"] = dict(zip(case.outputs, gqa_bwd_closed_form(**case.inputs)))
            base = testing.rel_error(lowp[name], ref[name])
            err = testing.rel_error(out[name], case.meta["given"][name])
            if not err <= 2.0 * base + 1e-3:
                raise AssertionError(f"{against_reference}; against the exact gradients of the given o: rel. error "
                                     f"{err:.3e}") from None


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=gqa_bwd,
    reference=gqa_bwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
    deterministic=True,  # no atomics: dK/dV and dQ are each written once
)
