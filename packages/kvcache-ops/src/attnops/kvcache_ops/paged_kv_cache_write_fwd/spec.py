"""PagedKVCacheWriteFwd: seed workloads, shrink, cost model, acceptance rule."""

from __future__ import annotations

import torch
import triton

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.cost import Cost
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case, OpSpec
from attnops.kernel_utils.reliability import random_choice, random_int
from attnops.kernel_utils.workloads import Workload, workloads_for

from .op import paged_kv_cache_write_fwd
from .reference import paged_kv_cache_write_fwd_ref

OP = "PagedKVCacheWriteFwd"
PADDING = -1


def random_slots(num_tokens: int, num_pages: int, page_size: int, gen: torch.Generator) -> torch.Tensor:
    """Distinct slots: a decode batch scatters one token per request anywhere in the pool; a prefill
    chunk fills whole shuffled pages in order, as a serving engine allocates them."""
    if num_tokens <= 256:
        return torch.randperm(num_pages * page_size, generator=gen)[:num_tokens]
    pages = torch.randperm(num_pages, generator=gen)[: triton.cdiv(num_tokens, page_size)]
    slots = (pages[:, None] * page_size + torch.arange(page_size)[None, :]).reshape(-1)
    return slots[:num_tokens]


def make_case(
    w: Workload, device, shrink: bool = False, seed: int = 0, *, padding_every: int = 0
) -> Case:
    """Inputs for one row; ``shrink`` caps tokens and pages for the interpreter. ``padding_every=n`` marks
    every n-th token as padding (slot −1)."""
    gen = testing.generator(seed)
    act, pool_dtype = w.dtypes()
    n, h_kv, d = w.shape("k")
    num_pages, page_size = w.shape("k_pages")[:2]
    if shrink:
        n = min(n, 40)
        num_pages = min(num_pages, triton.cdiv(n, page_size) + 3)
    slots = random_slots(n, num_pages, page_size, gen)
    if padding_every:
        slots[::padding_every] = PADDING
    scale_spread = 6.0 if pool_dtype == E4M3 else 1.0  # fp8 rows: some values saturate past ±448
    inputs = {
        "k": testing.randn((n, h_kv, d), act, device, gen, scale=scale_spread),
        "v": testing.randn((n, h_kv, d), act, device, gen, scale=scale_spread),
        "k_pages": testing.poisoned((num_pages, page_size, h_kv, d), pool_dtype, device),
        "v_pages": testing.poisoned((num_pages, page_size, h_kv, d), pool_dtype, device),
        "slot_mapping": slots.to(device),
    }
    if pool_dtype == E4M3:
        inputs["k_scale"] = torch.tensor([0.0137], device=device)
        inputs["v_scale"] = torch.tensor([0.0219], device=device)
    return Case(inputs, outputs=("k_pages", "v_pages"), inplace=True, label=w.id)


def fuzz(seed: int, device) -> Case:
    """A random valid call: odd page sizes, 0..48 tokens, padding slots, head dims that are not powers of
    two, fp8 pools with values past saturation, strided pools and token rows."""
    gen = testing.generator(seed)
    act = random_choice(gen, [torch.float16] if runtime.interpreting() else [torch.float16, torch.bfloat16])
    pool_dtype = random_choice(gen, [act, act, E4M3])
    h_kv, d = random_int(gen, 1, 4), random_choice(gen, [8, 64, 96, 128])
    page_size, num_pages = random_choice(gen, [1, 3, 7, 16, 64]), random_int(gen, 1, 6)
    n = random_int(gen, 0, min(num_pages * page_size, 48))
    slots = torch.randperm(num_pages * page_size, generator=gen)[:n]
    slots[torch.rand(n, generator=gen) < 0.2] = PADDING
    spread = 8.0 if pool_dtype == E4M3 else 1.0
    wide = testing.randn((n, 3 * h_kv, d), act, device, gen, scale=spread)  # k and v as slices of a qkv row
    pools = testing.poisoned((num_pages, 2, page_size, h_kv, d), pool_dtype, device)  # [NP, 2, PS, H, D]
    inputs = {"k": wide[:, h_kv : 2 * h_kv], "v": wide[:, 2 * h_kv :], "k_pages": pools[:, 0],
              "v_pages": pools[:, 1], "slot_mapping": slots.to(device)}
    if pool_dtype == E4M3:
        inputs["k_scale"] = torch.rand(1, generator=gen).to(device) * 0.05 + 0.005
        inputs["v_scale"] = torch.rand(1, generator=gen).to(device) * 0.05 + 0.005
    return Case(inputs, outputs=("k_pages", "v_pages"), inplace=True, label=f"fuzz-{seed}")


def cost(case: Case) -> Cost:
    k, pool = case.inputs["k"], case.inputs["k_pages"]
    n_valid = int((case.inputs["slot_mapping"] >= 0).sum())
    row = k.shape[1] * k.shape[2]
    fp8 = pool.dtype == E4M3
    moved = 2 * n_valid * row * (k.element_size() + pool.element_size())
    scales = 8 if fp8 and n_valid else 0
    return Cost(
        flops=4 * n_valid * row if fp8 else 0,
        bytes=moved + 8 * k.shape[0] + scales,
        roof="cuda_core.fp32",
    )


def compare(out: dict, ref: dict, case: Case) -> None:
    # Bit-exact, fp8 included: the kernel's e4m3 rounding is exact on the interpreter and the GPU.
    for name in case.outputs:
        testing.assert_bitwise(name, out[name], ref[name])


SPEC = OpSpec(
    name=OP,
    family="kvcache-ops",
    fn=paged_kv_cache_write_fwd,
    reference=paged_kv_cache_write_fwd_ref,
    workloads=workloads_for(OP),
    make_case=make_case,
    cost=cost,
    compare=compare,
    # bf16 inputs are bit-copied or converted to fp32 before any arithmetic: the interpreter gets them right.
    interpreter_ok=lambda w: True,
    fuzz=fuzz,
)
