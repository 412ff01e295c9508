"""GQABwd: seed workloads, shrink, cost model, acceptance rule.

Every seed row is causal (spec attn-core.md: the page's TFLOP/s only match the halved count); the rows
carry no ``is_causal`` param, so ``make_case`` sets ``is_causal=True`` unless overridden.
"""

from __future__ import annotations

import torch

from attnops.kernel_utils import testing
from attnops.kernel_utils.cost import Cost, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import gqa_bwd
from .reference import attention_ref, gqa_bwd_ref

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


def compare(out: dict, ref: dict, case: Case) -> None:
    """dq, dk, dv each within 2× the error of torch's low-precision autograd on the same inputs (+ 1e-3)."""
    if "lowp" not in case.meta:
        lowp = gqa_bwd_ref(**case.inputs, compute_dtype=case.inputs["q"].dtype)
        case.meta["lowp"] = dict(zip(case.outputs, lowp))
    for name in case.outputs:
        testing.assert_close_dual(name, out[name], ref[name], case.meta["lowp"][name])


SPEC = OpSpec(
    name=OP,
    family="attn-core",
    fn=gqa_bwd,
    reference=gqa_bwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
)
