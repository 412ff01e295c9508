"""Peers of GQABwd (dense GQA/MHA backward), imported at the end of ``attn_core.py``.

Only the backward is timed: each adapter builds the peer's autograd graph and runs its forward once in
``prepare`` (outside the timing), then the runner calls ``torch.autograd.grad(o, (q, k, v), do,
retain_graph=True)`` — the peer's backward kernels (and anything its backward launches, e.g. a copy of a
non-contiguous dO) on the graph's saved tensors. The peers recompute their own forward lse; ours consumes
the case's ``o`` and base-2 ``lse``. Outputs are checked against the fp32 reference by ``SPEC.compare``.
"""

from __future__ import annotations

import torch

from attnops.kernel_utils.opspec import Case

from . import Runner, Unsupported, adapter

OP = "GQABwd"


def _shape(case: Case):
    a = case.inputs
    q, k = a["q"], a["k"]
    B, S_q, H, D = q.shape
    S_kv, H_kv = k.shape[1], k.shape[2]
    return B, S_q, S_kv, H, H_kv, D, a.get("is_causal", True), a.get("sm_scale") or D**-0.5


def _grad_runner(out, leaves, grad_out, post, note: str) -> Runner:
    """Time ``autograd.grad`` of a prepared output; ``post`` maps the grads to ``{dq, dk, dv}``."""
    last: dict[str, tuple] = {}

    def run():
        last["g"] = torch.autograd.grad(out, leaves, grad_out, retain_graph=True)

    return Runner(run, lambda: post(last["g"]), note=note)


def _sdpa_bwd(case: Case, backend_name: str) -> Runner:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, S_q, S_kv, H, H_kv, D, causal, scale = _shape(case)
    if causal and S_q != S_kv:
        raise Unsupported("SDPA is_causal is top-left aligned; bottom-right needs S_q == S_kv")
    G = H // H_kv
    a = case.inputs
    backend = getattr(SDPBackend, backend_name)
    # [B, H, S, D] views of the BSHD tensors (no copy); dO in the layout of the output SDPA returns.
    q = a["q"].detach().transpose(1, 2).requires_grad_()
    k = a["k"].detach().transpose(1, 2).requires_grad_()
    v = a["v"].detach().transpose(1, 2).requires_grad_()
    do = a["do"].transpose(1, 2)

    def build(expand: bool):
        kk, vv = (k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)) if expand else (k, v)
        with torch.enable_grad(), sdpa_kernel(backend):
            o = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=scale,
                                                                 enable_gqa=G > 1 and not expand)
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)  # the backward runs on this backend
        return o

    note = "backward only (graph and forward outside the timing)"
    try:
        o = build(expand=False)
    except RuntimeError as e:
        if G == 1:
            raise Unsupported(f"SDPA {backend_name}: {str(e).splitlines()[0][:200]}") from None
        try:
            o = build(expand=True)
        except RuntimeError as e2:
            raise Unsupported(f"SDPA {backend_name}: {str(e2).splitlines()[0][:200]}") from None
        note += "; KV heads expanded in the graph (no enable_gqa on this backend): the timed backward " \
                "includes the expansion's backward (sum over the G heads)"
    if q.is_cuda:
        torch.cuda.synchronize()
    post = lambda g: {"dq": g[0].transpose(1, 2), "dk": g[1].transpose(1, 2), "dv": g[2].transpose(1, 2)}  # noqa: E731
    return _grad_runner(o, (q, k, v), do, post, note)


adapter("sdpa-cudnn", OP)(lambda case: _sdpa_bwd(case, "CUDNN_ATTENTION"))
adapter("sdpa-flash", OP)(lambda case: _sdpa_bwd(case, "FLASH_ATTENTION"))


def _torch_ref(case: Case) -> Runner:
    """Autograd of the eager reference attention (``gqa_bwd/reference.attend``) in the row's dtype, one
    graph per batch element; the forward is built outside the timing."""
    from attnops.attn_core.gqa_bwd.reference import attend

    B, S_q, S_kv, H, H_kv, D, causal, scale = _shape(case)
    a = case.inputs
    dt = a["q"].dtype
    leaves, outs, grads = [], [], []
    with torch.enable_grad():
        for b in range(B):
            qb, kb, vb = (a[n][b].detach().clone().requires_grad_() for n in ("q", "k", "v"))
            ob, _ = attend(qb, kb, vb, is_causal=causal, sm_scale=scale, compute_dtype=dt)
            leaves += [qb, kb, vb]
            outs.append(ob)
            grads.append(a["do"][b])

    def post(g):
        return {"dq": torch.stack(g[0::3]), "dk": torch.stack(g[1::3]), "dv": torch.stack(g[2::3])}

    return _grad_runner(outs, leaves, grads, post, "eager reference autograd in the row dtype, backward only")


adapter("torch-ref", OP)(_torch_ref)
