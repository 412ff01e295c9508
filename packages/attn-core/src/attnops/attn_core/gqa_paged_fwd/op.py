"""GQAPagedFwd: checks, planning, launch, torch custom-op registration.

``run_plan`` (the launch of a plan's kernels) is shared with MHADecodePagedWithKVCacheFwd and
GQAPrefillPagedWithKVCacheFwd.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import triton

from attnops.attn_core.flash_fwd import ws_launch
from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.attention_fns import LOG2E, window_bounds
from attnops.kernel_utils.fp8 import E4M3

from . import rope_pools
from .kernel import paged_attention_combine_kernel, paged_attention_kernel
from .plan import PagedAttentionPlan, TileConfig, decode_residency, plan_paged_attention

_16BIT = (torch.float16, torch.bfloat16)
MIN_HEAD_DIM_FP8_ROPE = 32  # RoPE applied to fp8 pool keys: smaller head dims are refused (see _check)


# --------------------------------------------------------------------------------------------------
# Shared by the three paged ops


def check_head_dim(name: str, d: int):
    if d < 16 or d > 256 or d & (d - 1):
        raise ValueError(f"{name}: head dim must be a power of two in [16, 256], got {d}")


def check_softcap(softcap):
    if softcap is not None and softcap < 0:
        raise ValueError(f"softcap: must be None, 0 (off) or positive, got {softcap}")


def check_window(name: str, w: int):
    if not isinstance(w, int) or w < -1:
        raise ValueError(f"{name}: must be an int >= -1 (-1 = unbounded), got {w!r}")


def check_table_values(name: str, table: torch.Tensor, lengths: list[int], page_size: int, num_pages: int,
                       what: str = "tokens"):
    """The table is wide enough for every length, and the entries the lengths reach name existing pages."""
    width = table.shape[1]
    for b, n in enumerate(lengths):
        need = -(-n // page_size)
        if need > width:
            raise ValueError(f"{name}: too narrow: request {b} has {n} {what} = {need} pages of {page_size}, "
                             f"the table has {width} columns")
        if need:
            row = table[b, :need]
            bad = row[(row < 0) | (row >= num_pages)]
            if bad.numel():
                raise ValueError(f"{name}: entry of request {b} names page {int(bad[0])}, the pool has pages "
                                 f"[0, {num_pages})")


def scale_strides(t: torch.Tensor | None) -> tuple[int, int]:
    if t is None or t.numel() == 1:
        return 0, 0
    return t.stride(0), t.stride(1)


# Configs that did not fit (OutOfResources, raised before anything runs) and what replaced them:
# {(kind, BM, BN, warps, stages, constexpr flags): TileConfig}. Tests on the GPU assert it stays empty for
# the shipped table; a fallback keeps BLOCK_M (the plan's workspace depends on it).
FALLBACKS: dict[tuple, TileConfig] = {}
COMBINE_ROWS = 16  # rows per combine program


def _smaller(cfg: TileConfig) -> TileConfig | None:
    if cfg.num_stages > 1:
        return dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
    if cfg.block_n > 16:
        return dataclasses.replace(cfg, block_n=cfg.block_n // 2, num_stages=2)
    return None


def _launch(cfg: TileConfig, key: tuple, launch):
    """``launch(cfg)``, falling back to fewer stages / narrower key tiles while the GPU reports
    OutOfResources; the config that worked is remembered for this key."""
    cfg = FALLBACKS.get(key, cfg)
    while True:
        try:
            launch(cfg)
            return
        except triton.runtime.errors.OutOfResources:
            nxt = _smaller(cfg)
            if nxt is None:
                raise
            cfg = FALLBACKS[key] = nxt


def _rope_copy_pays(plan, q, k_pool, v_pool, o, table, cu_q, q_uniform, q_scale, k_scale, k_new,
                    page_size) -> bool:
    """Whether a RoPE call runs on rotated copies of its pages (``rope_pools``): every launch with work is a
    warp-specialized one the call would get without RoPE, 16-bit queries and 4-D pools without scales, and a copy
    that pays: of at most ``rope_pools.MAX_COPY_BYTES`` and a table at most ``rope_pools.MAX_TABLE_SLACK`` times
    wider than the pages the plan's KV lengths need (the copy takes every slot of the table: serving engines size
    tables for the longest possible request)."""
    if not rope_pools.ROPE_POOL_COPY_DEFAULT or k_new is not None or k_pool.dim() != 4:
        return False
    if cu_q is None or q_uniform or q_scale is not None or k_scale is not None:
        return False
    work = [ln for ln in plan.launches if ln.n_items > 0]
    needed = sum(triton.cdiv(kv, page_size) for kv in plan.kv_lens)
    return (bool(work) and all(ln.ws is not None and ws_launch.paged_applies(ln.ws, q, k_pool, v_pool, o, page_size,
                                                                               True) for ln in work)
            and table.numel() <= rope_pools.MAX_TABLE_SLACK * needed
            and rope_pools.copy_bytes(k_pool, table) <= rope_pools.MAX_COPY_BYTES)


def run_plan(plan: PagedAttentionPlan, *, q, k_pool, v_pool, o, table, cache_lens, cu_q, pool_strides,
             page_size: int, num_pages: int, sm_scale: float, softcap=None, k_new=None, v_new=None, q_scale=None,
             k_scale=None, v_scale=None, sinks=None, cos=None, sin=None, q_uniform: int = 0, rope_q=False,
             rope_pool_k=False, rope_new_k=False, rotary_dim: int = 0, interleaved: bool = False):
    """Launch the attention (and combine) kernels of every launch of ``plan``. No host sync."""
    num_heads, d = q.shape[-2], q.shape[-1]
    num_kv = plan.num_kv_heads
    group = num_heads // num_kv
    kp, kt, kh, vp, vt, vh = pool_strides
    wl, wr = plan.window
    dummy = cache_lens
    kn = k_new if k_new is not None else k_pool
    vn = v_new if v_new is not None else v_pool
    ks_b, ks_h = scale_strides(k_scale)
    cap = float(softcap) if softcap else 0.0
    flags = dict(
        HAS_NEW=k_new is not None,
        Q_FP8=q.dtype == E4M3, KV_FP8=k_pool.dtype == E4M3, ROPE_Q=rope_q, ROPE_POOL_K=rope_pool_k,
        ROPE_NEW_K=rope_new_k, ROTARY_DIM=rotary_dim or d, INTERLEAVED=interleaved,
        SOFTCAP=bool(cap), HAS_SINKS=sinks is not None, BLOCK_D=d,
        EXACT_DOT=runtime.interpreting(),  # fp32 dots on the interpreter: same products, BLAS speed
    )
    # the warp-specialized kernel takes packed 16-bit queries without scales or RoPE of queries or cached keys; it
    # reads every key from the pool (the prefill op appended the new rows first, rotated when rope_new_k)
    plain = (cu_q is not None and not q_uniform and q_scale is None and k_scale is None
             and not (rope_q or rope_pool_k))
    if rope_q and rope_pool_k and _rope_copy_pays(plan, q, k_pool, v_pool, o, table, cu_q, q_uniform, q_scale,
                                                  k_scale, k_new, page_size):
        q, k_pool, v_pool, table = rope_pools.rotated_pools(q, k_pool, v_pool, table, cache_lens, cu_q, cos, sin,
                                                            rotary_dim, interleaved, max(plan.q_lens))
        plain = True
    ws_runs = [ln.n_items > 0 and ln.ws is not None
               and ws_launch.paged_applies(ln.ws, q, k_pool, v_pool, o, page_size, plain) for ln in plan.launches]
    # a decode launch beside the persistent ws launch (``plan.SMALL_BESIDE_DEFAULT``): forked before the ws launch is
    # queued (the side stream must not wait for it), queued after it (its programs would otherwise take every SM
    # first), joined before returning
    page_shift = page_size.bit_length() - 1 if plan.pow2_pages and page_size & (page_size - 1) == 0 else -1
    beside = any(ws_runs) and any(ln.beside and ln.n_items for ln in plan.launches)
    with runtime.side_stream(q.device, beside) as side:
        for ln, ws_run in zip(plan.launches, ws_runs):
            if ln.n_items == 0:
                continue
            if ws_run:
                ws_launch.launch_paged(ln.ws, q, k_pool, v_pool, o, cu_q, cache_lens, table, ln.ws_items, page_size,
                                       sm_scale, wl, wr, kv_plus_q=k_new is not None, softcap=cap, sinks=sinks,
                                       splits=ln.ws_splits, programs=ln.ws_programs)
                continue

            def launch(cfg, ln=ln):
                paged_attention_kernel[(ln.n_items * num_kv,)](
                    q, k_pool, v_pool, kn, vn, o,
                    table, cache_lens, cu_q if cu_q is not None else dummy, ln.items, ln.part_o, ln.part_lse,
                    ln.counters if ln.counters is not None else dummy,
                    q_scale if q_scale is not None else dummy, k_scale if k_scale is not None else dummy,
                    v_scale if v_scale is not None else dummy, sinks if sinks is not None else dummy,
                    cos if cos is not None else dummy, sin if sin is not None else dummy,
                    sm_scale * LOG2E, sm_scale / cap if cap else 0.0, cap * LOG2E, wl, wr, num_pages, table.shape[1],
                    cos.shape[0] if cos is not None else 0, num_kv,
                    group, page_size, q_uniform, q.stride(-3), q.stride(-2), o.stride(-3), o.stride(-2),
                    kp, kt, kh, vp, vt, vh,
                    kn.stride(0), kn.stride(1), vn.stride(0), vn.stride(1),
                    table.stride(0), cos.stride(0) if cos is not None else 0,
                    q_scale.stride(0) if q_scale is not None else 0, ks_b, ks_h,
                    **flags, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, FUSED_COMBINE=ln.counters is not None,
                    TILE_IN_PAGE=ln.tile_in_page and page_size % cfg.block_n == 0,
                    PAGE_SHIFT=page_shift,
                    num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                )

            key = (ln.kind, ln.cfg, str(q.dtype), str(k_pool.dtype), *sorted(flags.items()))
            with runtime.on_stream(side if ln.beside else None):
                _launch(ln.cfg, key, launch)
                if ln.n_combine:
                    rows = min(COMBINE_ROWS, ln.cfg.block_m)
                    paged_attention_combine_kernel[(ln.n_combine * num_kv * (ln.cfg.block_m // rows),)](
                        o, cu_q if cu_q is not None else dummy, ln.combine, ln.part_o, ln.part_lse,
                        sinks if sinks is not None else dummy,
                        num_kv, group, q_uniform, o.stride(-3), o.stride(-2), HAS_SINKS=sinks is not None,
                        BLOCK_M=ln.cfg.block_m, BLOCK_R=rows, BLOCK_D=d, num_warps=4,
                    )


# --------------------------------------------------------------------------------------------------
# GQAPagedFwd


def gqa_paged_plan(cu_seqlens_q, cache_seqlens, num_heads: int, num_kv_heads: int, head_dim: int, *,
                   is_causal: bool = True, window_size_left: int = -1, window_size_right: int = -1,
                   num_splits: int | None = None, device=None, **tuning) -> PagedAttentionPlan:
    """Schedule ``gqa_paged_fwd`` for one batch layout (host lists or tensors; tensors are read once).

    Reuse the plan across calls whose query lengths are the same (the KV lengths may change: kernels read
    them from ``cache_seqlens`` at run time). ``num_splits`` forces the split-KV count; ``tuning``:
    ``configs`` / ``programs_per_sm`` / ``resident_per_sm`` of ``plan_paged_attention`` (tuning / tests; the
    call without a plan passes ``plan.decode_residency`` of its page size, RoPE and pool dtype)."""
    cu = cu_seqlens_q.tolist() if isinstance(cu_seqlens_q, torch.Tensor) else list(cu_seqlens_q)
    lens = cache_seqlens.tolist() if isinstance(cache_seqlens, torch.Tensor) else list(cache_seqlens)
    if device is None and isinstance(cache_seqlens, torch.Tensor):
        device = cache_seqlens.device
    q_lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    return plan_paged_attention(q_lens, lens, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                is_causal=is_causal, window_size_left=window_size_left,
                                window_size_right=window_size_right, device=device, num_splits=num_splits,
                                **tuning)


def _check(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, q_scale, k_scale, v_scale, rope_cos,
           rope_sin, sinks, window_size_left, window_size_right, softcap, pos_encoding_mode, rotary_dim,
           rope_layout, out_dtype, validate_inputs):
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=(*_16BIT, E4M3), ndim=3, device=dev, inner_contiguous=1)
    t_q, num_heads, d = q.shape
    check_head_dim("q", d)
    kv_dtypes = (E4M3,) if q.dtype == E4M3 else (q.dtype, E4M3)
    checks.check_tensor("k_pages", k_pages, dtype=kv_dtypes, ndim=4, device=dev, inner_contiguous=1)
    num_pages, page_size, num_kv, _ = k_pages.shape
    checks.check_tensor("k_pages", k_pages, shape=(None, None, None, d))
    checks.check_tensor("v_pages", v_pages, dtype=k_pages.dtype, shape=tuple(k_pages.shape), device=dev,
                        inner_contiguous=1)
    if num_kv == 0 or num_heads % num_kv:
        raise ValueError(f"q: {num_heads} query heads is not a multiple of the {num_kv} KV heads of k_pages")
    checks.check_tensor("page_table", page_table, dtype=torch.int32, ndim=2, device=dev, inner_contiguous=1)
    batch = page_table.shape[0]
    checks.check_tensor("cache_seqlens", cache_seqlens, dtype=torch.int32, shape=(batch,), device=dev,
                        inner_contiguous=1)
    checks.check_tensor("cu_seqlens_q", cu_seqlens_q, dtype=torch.int32, shape=(batch + 1,), device=dev,
                        inner_contiguous=1)
    if q.dtype == E4M3:
        if out_dtype not in _16BIT:
            raise ValueError(f"out_dtype: an fp8 q needs float16 or bfloat16, got {out_dtype}")
        if q_scale is None:
            raise ValueError("q_scale: required ([B, H_kv] f32) when q is float8_e4m3fn")
        checks.check_tensor("q_scale", q_scale, dtype=torch.float32, shape=(batch, num_kv), device=dev,
                            inner_contiguous=1)
    else:
        if out_dtype not in (None, q.dtype):
            raise ValueError(f"out_dtype: must be None or q's dtype {q.dtype} for 16-bit q, got {out_dtype}")
        if q_scale is not None:
            raise ValueError("q_scale: only for a float8_e4m3fn q")
    if k_pages.dtype == E4M3:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is None:
                raise ValueError(f"{name}: required ([1] or [B, H_kv] f32) when the pools are float8_e4m3fn")
            checks.check_tensor(name, s, dtype=torch.float32, device=dev)
            if s.numel() != 1:
                checks.check_tensor(name, s, shape=(batch, num_kv), inner_contiguous=1)
        if k_scale.numel() != v_scale.numel():
            raise ValueError(f"k_scale, v_scale: must have the same shape, got {tuple(k_scale.shape)} and "
                             f"{tuple(v_scale.shape)}")
    elif k_scale is not None or v_scale is not None:
        raise ValueError(f"k_scale, v_scale: only for float8_e4m3fn pools, got pools of {k_pages.dtype}")
    out_dtype = out_dtype or q.dtype
    check_window("window_size_left", window_size_left)
    check_window("window_size_right", window_size_right)
    check_softcap(softcap)
    if sinks is not None:
        checks.check_tensor("sinks", sinks, dtype=torch.float32, shape=(num_heads,), device=dev, inner_contiguous=1)
    if pos_encoding_mode not in ("none", "rope"):
        raise ValueError(f"pos_encoding_mode: expected 'none' or 'rope', got {pos_encoding_mode!r}")
    rope = pos_encoding_mode == "rope"
    r = rotary_dim or d
    if rope:
        if r % 2 or r > d or r < 2:
            raise ValueError(f"rotary_dim: must be even and <= head dim {d}, got {rotary_dim}")
        if rope_layout not in ("neox", "interleaved"):
            raise ValueError(f"rope_layout: expected 'neox' or 'interleaved', got {rope_layout!r}")
        for name, t in (("rope_cos", rope_cos), ("rope_sin", rope_sin)):
            if t is None:
                raise ValueError(f"{name}: required ([P, rotary_dim/2] {out_dtype}) with pos_encoding_mode='rope'")
            checks.check_tensor(name, t, dtype=out_dtype, shape=(None, r // 2), device=dev, inner_contiguous=1)
        checks.check_tensor("rope_sin", rope_sin, shape=tuple(rope_cos.shape))
        if k_pages.dtype == E4M3 and d < MIN_HEAD_DIM_FP8_ROPE:
            # Measured on the H200 (2026-12-01): the sm_90 build of the 16-row (decode) tile computed wrong
            # outputs for every such case the fuzzer drew (7 of 7; 16-bit pools, D >= 32 and the interpreter
            # were right). Refused until a fix is verified on the GPU: docs/reliability.md, sixth session.
            raise ValueError(f"k_pages: an fp8 pool with pos_encoding_mode='rope' needs head dim >= "
                             f"{MIN_HEAD_DIM_FP8_ROPE}, got {d} (use a 16-bit pool or pre-rotated keys)")
    elif rope_cos is not None or rope_sin is not None:
        raise ValueError("rope_cos, rope_sin: only with pos_encoding_mode='rope'")
    if validate_inputs or checks.validate_values(page_table, cache_seqlens, cu_seqlens_q):
        checks.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q.cpu(), total=t_q)
        cu = cu_seqlens_q.tolist()
        lens = cache_seqlens.tolist()
        for b, c in enumerate(lens):
            q_len = cu[b + 1] - cu[b]
            if c < q_len:
                raise ValueError(f"cache_seqlens: request {b} has {q_len} query tokens (cu_seqlens_q) but "
                                 f"cache_seqlens[{b}] = {c}; cache_seqlens includes the query tokens")
        check_table_values("page_table", page_table.cpu(), lens, page_size, num_pages)
        if rope and lens and max(lens) > rope_cos.shape[0]:
            raise ValueError(f"rope_cos: {rope_cos.shape[0]} positions, cache_seqlens reaches {max(lens)}")
    return out_dtype


@torch.library.custom_op("attnops::gqa_paged_fwd", mutates_args=())
def _gqa_paged(
    q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, page_table: torch.Tensor,
    cache_seqlens: torch.Tensor, cu_seqlens_q: torch.Tensor, q_scale: torch.Tensor | None,
    k_scale: torch.Tensor | None, v_scale: torch.Tensor | None, rope_cos: torch.Tensor | None,
    rope_sin: torch.Tensor | None, sinks: torch.Tensor | None, is_causal: bool, window_size_left: int,
    window_size_right: int, sm_scale: float, softcap: float, rope: bool, rotary_dim: int, interleaved: bool,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    plan = gqa_paged_plan(cu_seqlens_q, cache_seqlens, q.shape[1], k_pages.shape[2], q.shape[2],
                          is_causal=is_causal, window_size_left=window_size_left,
                          window_size_right=window_size_right,
                          resident_per_sm=decode_residency(q.shape[2], k_pages.shape[1], rope, k_pages.dtype == E4M3))
    return _run(plan, q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, q_scale, k_scale, v_scale,
                rope_cos, rope_sin, sinks, sm_scale, softcap, rope, rotary_dim, interleaved, out_dtype)


@_gqa_paged.register_fake
def _(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, q_scale, k_scale, v_scale, rope_cos, rope_sin,
      sinks, is_causal, window_size_left, window_size_right, sm_scale, softcap, rope, rotary_dim, interleaved,
      out_dtype):
    return q.new_empty(q.shape, dtype=out_dtype)


@runtime.eager_under_compile
def _run(plan, q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, q_scale, k_scale, v_scale, rope_cos,
         rope_sin, sinks, sm_scale, softcap, rope, rotary_dim, interleaved, out_dtype):
    o = testing.kernel_buffer(q.shape, out_dtype, q.device)
    if q.shape[0] == 0:
        return o
    if k_scale is not None:  # the kernel reads both with k_scale's strides (no-op when already dense)
        k_scale, v_scale = k_scale.contiguous(), v_scale.contiguous()
    run_plan(plan, q=q, k_pool=k_pages, v_pool=v_pages, o=o, table=page_table, cache_lens=cache_seqlens,
             cu_q=cu_seqlens_q,
             pool_strides=(k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
                           v_pages.stride(0), v_pages.stride(1), v_pages.stride(2)),
             page_size=k_pages.shape[1], num_pages=k_pages.shape[0], sm_scale=sm_scale, softcap=softcap,
             q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, sinks=sinks, cos=rope_cos, sin=rope_sin,
             rope_q=rope, rope_pool_k=rope, rotary_dim=rotary_dim, interleaved=interleaved)
    return o


def gqa_paged_fwd(
    q: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    page_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    *,
    q_scale: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    rope_cos: torch.Tensor | None = None,
    rope_sin: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    is_causal: bool = True,
    window_size_left: int = -1,
    window_size_right: int = -1,
    sm_scale: float | None = None,
    softcap: float | None = None,
    pos_encoding_mode: str = "none",
    rotary_dim: int | None = None,
    rope_layout: str = "neox",
    out_dtype: torch.dtype | None = None,
    validate_inputs: bool = False,
    plan: PagedAttentionPlan | None = None,
) -> torch.Tensor:
    """Read-only attention of packed queries over a caller-owned 4-D paged KV cache (GQAPagedFwd).

    Request b owns query rows ``[cu_seqlens_q[b], cu_seqlens_q[b+1])``; its keys are logical tokens
    ``0..cache_seqlens[b]−1`` read through ``page_table[b]``; its q query tokens are the last q tokens of
    the cache (query i at position ``c − q + i``, bottom-right causal). Only the first
    ``ceil(c / PS)`` table entries of a request are read.

    Args:
        q: ``[T_q, H, D]`` f16 / bf16 / fp8 e4m3; last dim contiguous. D a power of two in [16, 256].
        k_pages, v_pages: ``[NP, PS, H_kv, D]`` q's dtype (16-bit q) or fp8 e4m3; never written; any page /
            slot / head strides, last dim contiguous. Any page size. RoPE on an fp8 pool needs D >= 32.
        page_table: ``[B, W]`` int32, logical page -> physical page; requests may share pages.
        cache_seqlens: ``[B]`` int32, keys of each request **including** its query tokens (q_b <= c_b).
        cu_seqlens_q: ``[B+1]`` int32 prefix sums of the query lengths (0-length requests allowed).
        q_scale: ``[B, H_kv]`` f32 iff q is fp8. k_scale, v_scale: ``[1]`` or ``[B, H_kv]`` f32 iff the pools
            are fp8 (dequantize = multiply).
        rope_cos, rope_sin: ``[P, R/2]`` in the output dtype, iff ``pos_encoding_mode='rope'``: q and the
            cached keys are rotated as they are read, at their positions (P >= max c).
        sinks: ``[H]`` f32 attention-sink logits (extra denominator term), optional.
        is_causal, window_size_left, window_size_right: bottom-right causal mask and FA3-style windows
            (-1 = unbounded). sm_scale: default ``1/sqrt(D)``. softcap: None / 0 = off.
        rotary_dim: R (even, <= D; default D). rope_layout: 'neox' | 'interleaved'.
        out_dtype: output dtype; required (f16/bf16) for an fp8 q, else None or q's dtype.
        validate_inputs: run the value checks (lengths, page ids) on the host even for GPU tensors (syncs).
        plan: from ``gqa_paged_plan`` for this batch layout: skips planning (no host sync; graph-safe).

    Returns:
        o: ``[T_q, H, D]`` in the output dtype; rows with no visible key are 0.

    Example::

        plan = gqa_paged_plan(cu_seqlens_q, cache_seqlens, 32, 8, 128)      # once per batch layout
        o = gqa_paged_fwd(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, plan=plan)
    """
    out_dtype = _check(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, q_scale, k_scale, v_scale,
                       rope_cos, rope_sin, sinks, window_size_left, window_size_right, softcap, pos_encoding_mode,
                       rotary_dim, rope_layout, out_dtype, validate_inputs)
    d = q.shape[2]
    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(d)
    rope = pos_encoding_mode == "rope"
    args = (q_scale, k_scale, v_scale, rope_cos, rope_sin, sinks)
    if plan is None:
        return _gqa_paged(q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, *args, is_causal,
                          window_size_left, window_size_right, scale, float(softcap or 0.0), rope, rotary_dim or d,
                          rope_layout == "interleaved", out_dtype)
    readable = validate_inputs or checks.validate_values(cu_seqlens_q)
    q_lens = None
    if readable:
        cu = cu_seqlens_q.tolist()
        q_lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    plan.check_matches(q_lens, q.shape[1], k_pages.shape[2], d,
                       window_bounds(is_causal, window_size_left, window_size_right), False)
    return _run(plan, q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q, *args, scale,
                float(softcap or 0.0), rope, rotary_dim or d, rope_layout == "interleaved", out_dtype)
