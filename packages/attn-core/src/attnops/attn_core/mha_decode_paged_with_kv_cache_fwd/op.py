"""MHADecodePagedWithKVCacheFwd: checks, planning, launch (the paged attention kernel with G = 1)."""

from __future__ import annotations

import math

import torch

from attnops.attn_core.gqa_paged_fwd.op import check_head_dim, check_table_values, run_plan
from attnops.attn_core.gqa_paged_fwd.plan import PagedAttentionPlan, decode_residency, plan_paged_attention
from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.attention_fns import window_bounds

_16BIT = (torch.float16, torch.bfloat16)


def mha_decode_paged_plan(real_seqlen_kv, s_q: int, num_heads: int, head_dim: int, *, is_causal: bool = False,
                          num_splits: int | None = None, device=None, **tuning) -> PagedAttentionPlan:
    """Schedule ``mha_decode_paged_with_kv_cache_fwd`` for one batch (``real_seqlen_kv``: host list or
    tensor, read once). Reusable while the KV lengths change and B, S_q stay."""
    lens = real_seqlen_kv.tolist() if isinstance(real_seqlen_kv, torch.Tensor) else list(real_seqlen_kv)
    if device is None and isinstance(real_seqlen_kv, torch.Tensor):
        device = real_seqlen_kv.device
    return plan_paged_attention([s_q] * len(lens), lens, num_heads=num_heads, num_kv_heads=num_heads,
                                head_dim=head_dim, is_causal=is_causal, device=device, num_splits=num_splits,
                                **tuning)


def _check(q, k, v, real_seqlen_kv, block_table, page_size):
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=_16BIT, ndim=4, device=dev, inner_contiguous=1)
    batch, s_q, num_heads, d = q.shape
    check_head_dim("q", d)
    checks.check_tensor("k", k, dtype=q.dtype, shape=(None, num_heads, d), device=dev, inner_contiguous=1)
    checks.check_tensor("v", v, dtype=q.dtype, shape=tuple(k.shape), device=dev, inner_contiguous=1)
    if not isinstance(page_size, int) or page_size <= 0:
        raise ValueError(f"page_size: must be a positive int, got {page_size!r}")
    if k.shape[0] % page_size:
        raise ValueError(f"k: {k.shape[0]} pool rows is not a whole number of pages of page_size {page_size}")
    checks.check_tensor("real_seqlen_kv", real_seqlen_kv, dtype=torch.int32, shape=(batch,), device=dev,
                        inner_contiguous=1)
    checks.check_tensor("block_table", block_table, dtype=torch.int32, ndim=2, device=dev, inner_contiguous=1)
    checks.check_tensor("block_table", block_table, shape=(batch, None))
    if checks.validate_values(real_seqlen_kv, block_table):
        lens = real_seqlen_kv.tolist()
        if lens and min(lens) < 0:
            raise ValueError(f"real_seqlen_kv: lengths must be >= 0, got {min(lens)}")
        check_table_values("block_table", block_table.cpu(), lens, page_size, k.shape[0] // page_size, "keys")


@torch.library.custom_op("attnops::mha_decode_paged_with_kv_cache_fwd", mutates_args=())
def _mha_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, real_seqlen_kv: torch.Tensor,
                block_table: torch.Tensor, page_size: int, is_causal: bool) -> torch.Tensor:
    plan = mha_decode_paged_plan(real_seqlen_kv, q.shape[1], q.shape[2], q.shape[3], is_causal=is_causal,
                                 resident_per_sm=decode_residency(q.shape[3], page_size, False, False))
    return _run(plan, q, k, v, real_seqlen_kv, block_table, page_size)


@_mha_decode.register_fake
def _(q, k, v, real_seqlen_kv, block_table, page_size, is_causal):
    return torch.empty_like(q)


@runtime.eager_under_compile
def _run(plan, q, k, v, real_seqlen_kv, block_table, page_size):
    batch, s_q, num_heads, d = q.shape
    o = testing.kernel_buffer(q.shape, q.dtype, q.device)
    if batch * s_q == 0:
        return o
    q3 = q.reshape(batch * s_q, num_heads, d)  # a view for contiguous q (copy otherwise)
    run_plan(plan, q=q3, k_pool=k, v_pool=v, o=o.view(batch * s_q, num_heads, d), table=block_table,
             cache_lens=real_seqlen_kv, cu_q=None,
             pool_strides=(page_size * k.stride(0), k.stride(0), k.stride(1),
                           page_size * v.stride(0), v.stride(0), v.stride(1)),
             page_size=page_size, num_pages=k.shape[0] // page_size, sm_scale=1.0 / math.sqrt(d), q_uniform=s_q)
    return o


def mha_decode_paged_with_kv_cache_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    real_seqlen_kv: torch.Tensor,
    block_table: torch.Tensor,
    page_size: int,
    is_causal: bool = False,
    plan: PagedAttentionPlan | None = None,
) -> torch.Tensor:
    """MHA decode (or a short speculative chunk) over a flat paged KV pool shared by all requests.

    Request b's keys are logical tokens ``0..real_seqlen_kv[b]−1``; token t lives at pool row
    ``block_table[b, t // page_size] · page_size + t % page_size``. Only the first ``ceil(len / page_size)``
    entries of a row are read. Non-causal: every query sees all keys; causal: query i sees keys
    ``<= i + len − S_q`` (the S_q queries are the cache's last tokens). ``len = 0`` rows are zeros.
    Scale fixed at ``1/sqrt(D)``.

    Args:
        q: ``[B, S_q, H, D]`` f16 / bf16; last dim contiguous. D a power of two in [16, 256].
        k, v: ``[N_kv, H, D]`` q's dtype, ``N_kv = NP · page_size``; last dim contiguous; never written.
        real_seqlen_kv: ``[B]`` int32 keys per request (``<= W · page_size``).
        block_table: ``[B, W]`` int32 physical page ids in ``[0, NP)``; requests may share pages.
        page_size: tokens per page (any positive int).
        is_causal: bottom-right causal mask among the S_q queries.
        plan: from ``mha_decode_paged_plan`` (skips planning: no host sync, graph-safe).

    Returns:
        o: ``[B, S_q, H, D]`` in q's dtype.

    Example::

        o = mha_decode_paged_with_kv_cache_fwd(q, k_pool, v_pool, seqlens, block_table, page_size=128)
    """
    _check(q, k, v, real_seqlen_kv, block_table, page_size)
    if plan is None:
        return _mha_decode(q, k, v, real_seqlen_kv, block_table, page_size, bool(is_causal))
    batch, s_q, num_heads, d = q.shape
    plan.check_matches([s_q] * batch, num_heads, num_heads, d, window_bounds(is_causal, -1, -1), False)
    return _run(plan, q, k, v, real_seqlen_kv, block_table, page_size)
