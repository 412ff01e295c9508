"""DSADecodeWithKVCacheFwd: seed workloads, index generation, shrink, cost model, acceptance rule."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import dsa_decode_with_kvcache_fwd
from .reference import dsa_decode_with_kvcache_fwd_ref

OP = "DSADecodeWithKVCacheFwd"
SHRUNK_S, SHRUNK_S_KV = 3, 160


def page_indices(b, s, h_kv, k, s_kv, q_start, stride, device, seed) -> torch.Tensor:
    """The page's rule: for each (b, s, g) a random permutation of keys ``0 .. min(max(1, Q_s // stride),
    S_kv) − 1``, truncated to K and padded with S_kv. Drawn on the device in chunks of query rows (a
    random key per row ranks the candidates; non-candidates rank last and become padding)."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    out = torch.full((b, s, h_kv, k), s_kv, dtype=torch.int32, device=dev)
    take = min(k, s_kv)
    keys = torch.arange(s_kv, device=dev)
    chunk = max(1, (1 << 24) // max(1, s_kv * h_kv * b))
    for s0 in range(0, s, chunk):
        rows = torch.arange(s0, min(s, s0 + chunk), device=dev)
        n = torch.clamp((q_start + rows) // stride, min=1).clamp(max=s_kv)  # candidates per row
        r = torch.rand((b, rows.numel(), h_kv, s_kv), generator=gen, device=dev)
        r = torch.where(keys < n[None, :, None, None], r, -1.0)
        vals, picked = torch.topk(r, take, dim=-1)
        out[:, s0 : s0 + rows.numel(), :, :take] = torch.where(vals >= 0, picked, s_kv).to(torch.int32)
    return out


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row; ``shrink`` keeps 3 query rows, 160 KV rows (q_start and K scaled alike) and a
    quarter of the heads."""
    gen = testing.generator(seed)
    dtype = w.dtypes()[0]
    b, s, h, width = w.shape("q")
    s_kv, h_kv = w.shape("kv")[1:3]
    k = w.shape("indices")[3]
    stride = int(w.params.get("stride_kv", 1))
    q_start = int(w.params["q_start_index_s"])
    if shrink:
        f = SHRUNK_S_KV / s_kv
        s_kv, k = SHRUNK_S_KV, max(8, round(k * f))
        q_start = max(stride + 1, round(q_start * f)) if q_start else 0
        s, h = min(s, SHRUNK_S), max(h_kv, h // 4)
    inputs = {
        "q": testing.randn((b, s, h, width), dtype, device, gen),
        "kv": testing.randn((b, s_kv, h_kv, width), dtype, device, gen),
        "indices": page_indices(b, s, h_kv, k, s_kv, q_start, stride, device, seed),
        "q_start_index_s": q_start,
        "stride_kv": stride,
        "dim_tail": width - 512 if width > 512 else 0,
    }
    return Case(inputs, outputs=("o",), label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-2 requests, 1-4 query rows, 1-2 KV heads of 1-20 query heads, value width
    64 or 512 with a rope tail of 0, 16 or 64, KV stride 1-3, causal or not, slots drawn from
    [−3, S_kv + 3) (pads, −1, out of range, future rows and repeats), f16 (and bf16 on the GPU)."""
    gen = testing.generator(seed)
    dtype = random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])
    b, s, h_kv = random_int(gen, 1, 2), random_int(gen, 1, 4), random_choice(gen, [1, 1, 2])
    group = random_choice(gen, [1, 4, 16, 20])
    d, tail = random_choice(gen, [64, 512]), random_choice(gen, [0, 16, 64])
    s_kv, k = random_int(gen, 1, 100), random_int(gen, 1, 40)
    stride = random_choice(gen, [1, 1, 2, 3])
    if stride == 1 and random_int(gen, 0, 3) == 0:
        q_start = 0  # the only start the rule allows at or below the stride
    else:
        q_start = random_int(gen, stride + 1, stride + 1 + 2 * s_kv)
    indices = torch.randint(-3, s_kv + 3, (b, s, h_kv, k), generator=gen, dtype=torch.int32)
    inputs = {
        "q": testing.randn((b, s, h_kv * group, d + tail), dtype, device, gen),
        "kv": testing.randn((b, s_kv, h_kv, d + tail), dtype, device, gen),
        "indices": indices.to(device),
        "q_start_index_s": q_start,
        "stride_kv": stride,
        "dim_tail": tail,
        "is_causal": bool(random_int(gen, 0, 3)),
    }
    return Case(inputs, outputs=("o",), label=f"fuzz-{seed}")


def selection(indices, s_kv, q_start, stride, is_causal=True):
    """(sorted slots, keep): the valid, distinct selected rows of every (b, s, g), vectorized."""
    idx = indices.long()
    valid = (idx >= 0) & (idx < s_kv)
    if is_causal:
        q_pos = q_start + torch.arange(idx.shape[1], device=idx.device)[None, :, None, None]
        valid &= (idx + 1) * stride - 1 <= q_pos
    ranked = torch.where(valid, idx, s_kv).sort(dim=-1).values
    keep = ranked < s_kv
    keep[..., 1:] &= ranked[..., 1:] != ranked[..., :-1]
    return ranked, keep


def cost(case: Case) -> Cost:
    """FLOPs = (H/H_kv)·Σ_{b,s,g} [|Sel|·(2(D+tail) + 2D + 5) + D·[|Sel| > 0]]; bytes = q, indices, o +
    the distinct selected kv rows per (b, g)."""
    a = case.inputs
    q, kv = a["q"], a["kv"]
    b, s, h, width = q.shape
    s_kv, h_kv = kv.shape[1:3]
    d = width - a.get("dim_tail", 0)
    ranked, keep = selection(a["indices"], s_kv, a["q_start_index_s"], a.get("stride_kv", 1),
                             a.get("is_causal", True))
    sel = keep.sum(-1)
    group = h // h_kv
    flops = group * (int(sel.sum()) * (2 * width + 2 * d + 5) + d * int((sel > 0).sum()))
    distinct = 0
    for bi in range(b):
        for g in range(h_kv):
            distinct += int(torch.unique(ranked[bi, :, g][keep[bi, :, g]]).numel())
    moved = nbytes(q) + nbytes(a["indices"]) + b * s * h * d * q.element_size() + distinct * width * kv.element_size()
    return Cost(flops=flops, bytes=moved, roof=roof_for(q.dtype))


def torch_sparse_attention(q, kv, indices, *, q_start_index_s, stride_kv=1, dim_tail=None, sm_scale=None,
                           is_causal=True, rows_per_chunk=64, sdpa=False) -> torch.Tensor:
    """Eager vectorized torch in the inputs' precision (gather, matmul, masked softmax), query rows in
    chunks: the accuracy yardstick and the torch-ref peer. ``sdpa``: the attention of the gathered rows by
    ``F.scaled_dot_product_attention`` with the slot mask instead (the torch-sdpa peer)."""
    b_, s_, h_, width = q.shape
    s_kv, h_kv = kv.shape[1:3]
    dim_tail = (width - 512 if width > 512 else 0) if dim_tail is None else dim_tail
    d = width - dim_tail
    scale = width**-0.5 if sm_scale is None else sm_scale
    group = h_ // h_kv
    ranked, keep = selection(indices, s_kv, q_start_index_s, stride_kv, is_causal)
    out = torch.empty((b_, s_, h_, d), dtype=q.dtype, device=q.device)
    g_idx = torch.arange(h_kv, device=q.device)[None, None, :, None]
    b_idx = torch.arange(b_, device=q.device)[:, None, None, None]
    for s0 in range(0, s_, rows_per_chunk):
        sl = slice(s0, s0 + rows_per_chunk)
        rows = ranked[:, sl].clamp(max=s_kv - 1)
        keys = kv[b_idx, rows, g_idx]  # [B, s, H_kv, K, width]
        qs = q[:, sl].unflatten(2, (h_kv, group))  # [B, s, H_kv, G, width]
        mask = keep[:, sl, :, None, :]
        if sdpa:  # 4-D (B·s, H_kv, G, ·): SDPA's fused backends take 4-D inputs only (5-D runs its fp32 math path)
            o = F.scaled_dot_product_attention(qs.flatten(0, 1), keys.flatten(0, 1), keys[..., :d].flatten(0, 1),
                                               attn_mask=mask.flatten(0, 1), scale=scale).unflatten(0, qs.shape[:2])
        else:
            scores = torch.matmul(qs, keys.transpose(-1, -2)) * scale  # [B, s, H_kv, G, K]
            o = torch.matmul(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1), keys[..., :d])
        # a row with no valid slot: zeros (its softmax is NaN; SDPA's fused backends on the GPU return finite values
        # there instead, H100 2026-12-06, so the rows are zeroed by their mask, not by their NaNs)
        out[:, sl] = o.masked_fill(~mask.any(-1)[..., None], 0.0).flatten(2, 3)
    return out


def compare(out: dict, ref: dict, case: Case) -> None:
    testing.assert_close_dual("o", out["o"], ref["o"], case.memo("lowp", lambda: torch_sparse_attention(**case.inputs)))


SPEC = OpSpec(
    name=OP,
    family="attn-mla",
    fn=dsa_decode_with_kvcache_fwd,
    reference=dsa_decode_with_kvcache_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
)
