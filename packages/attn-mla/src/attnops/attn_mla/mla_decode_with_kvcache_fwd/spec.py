"""MLADecodeWithKVCacheFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import math

import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost, attention_flops, nbytes, roof_for
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import mla_decode_with_kvcache_fwd
from .reference import mla_decode_with_kvcache_fwd_ref

OP = "MLADecodeWithKVCacheFwd"
SHRUNK_B, SHRUNK_N_KV = 2, 75  # 75 keys: a partial last block at every block size


def make_case(w: Workload, device, shrink: bool = False, seed: int = 0) -> Case:
    """Inputs for one row; ``shrink`` keeps 2 requests of 75 keys and a quarter of the heads (64 → 16,
    128 → 32: two head blocks at the interpreter's 16)."""
    gen = testing.generator(seed)
    dtype = w.dtypes()[0]
    b, h, d = w.shape("q")
    pe = w.shape("q_pe")[2]
    n_kv, h_kv = w.shape("k")[1:3]
    if shrink:
        b, n_kv, h = min(b, SHRUNK_B), min(n_kv, SHRUNK_N_KV), max(h_kv, h // 4)
    inputs = {
        "q": testing.randn((b, h, d), dtype, device, gen),
        "q_pe": testing.randn((b, h, pe), dtype, device, gen),
        "k": testing.randn((b, n_kv, h_kv, d), dtype, device, gen),
        "k_pe": testing.randn((b, n_kv, h_kv, pe), dtype, device, gen),
    }
    return Case(inputs, outputs=("o",), label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: 1-3 requests, 0-150 keys, 1-2 KV heads of 1-20 query heads (partial head
    blocks), latent width 64-512, rope width 16 or 64, f16 (and bf16 on the GPU), sharper or flatter
    softmax."""
    gen = testing.generator(seed)
    dtype = random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])
    b, h_kv, group = random_int(gen, 1, 3), random_choice(gen, [1, 1, 2]), random_choice(gen, [1, 4, 16, 20])
    d, pe = random_choice(gen, [64, 128, 512]), random_choice(gen, [16, 64])
    n_kv = random_choice(gen, [0, 1, random_int(gen, 2, 150)])
    scale = random_choice(gen, [0.5, 1.0, 3.0])
    h = h_kv * group
    inputs = {
        "q": testing.randn((b, h, d), dtype, device, gen, scale=scale),
        "q_pe": testing.randn((b, h, pe), dtype, device, gen, scale=scale),
        "k": testing.randn((b, n_kv, h_kv, d), dtype, device, gen),
        "k_pe": testing.randn((b, n_kv, h_kv, pe), dtype, device, gen),
    }
    return Case(inputs, outputs=("o",), label=f"fuzz-{seed}")


def cost(case: Case) -> Cost:
    """``B·H·(N_kv·(2(D+PE) + 2D + 5) + D)`` (attention_flops with every key visible); bytes = inputs + o."""
    q, k = case.inputs["q"], case.inputs["k"]
    b, h, d = q.shape
    pe, n_kv = case.inputs["q_pe"].shape[2], k.shape[1]
    rows = b if n_kv else 0
    flops = attention_flops(h, scores=b * n_kv, rows=rows, d_qk=d + pe, d_v=d)
    moved = sum(nbytes(t) for t in case.inputs.values()) + nbytes(q)
    return Cost(flops=flops, bytes=moved, roof=roof_for(q.dtype))


def lowp_baseline(q, q_pe, k, k_pe) -> torch.Tensor:
    """Torch in the inputs' own precision (products rounded to it, softmax in it): the error yardstick."""
    b_, h_, d = q.shape
    h_kv = k.shape[2]
    group = h_ // h_kv
    scale = 1.0 / math.sqrt(d + q_pe.shape[2])
    out = torch.zeros_like(q)
    for g in range(h_kv):
        heads = slice(g * group, (g + 1) * group)
        query = torch.cat([q[:, heads], q_pe[:, heads]], dim=-1)  # [B, G, D+PE]
        keys = torch.cat([k[:, :, g], k_pe[:, :, g]], dim=-1)  # [B, N, D+PE]
        p = torch.softmax(torch.bmm(query, keys.transpose(1, 2)) * scale, dim=-1)
        out[:, heads] = torch.bmm(p, k[:, :, g])
    return out


def compare(out: dict, ref: dict, case: Case) -> None:
    lowp = case.memo("lowp", lambda: lowp_baseline(**case.inputs)) if case.inputs["k"].shape[1] else ref["o"]
    testing.assert_close_dual("o", out["o"], ref["o"], lowp)


SPEC = OpSpec(
    name=OP,
    family="attn-mla",
    fn=mla_decode_with_kvcache_fwd,
    reference=mla_decode_with_kvcache_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    fuzz=fuzz,
)
