"""GQAPrefillPagedWithKVCacheFwd: checks, planning, launches (append, then paged attention over the cached
rows + the new rows), torch custom-op registration."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from attnops.attn_core.flash_fwd import ws_launch
from attnops.attn_core.flash_fwd.launch import rotate_rows
from attnops.attn_core.gqa_paged_fwd.op import check_head_dim, check_softcap, check_table_values, run_plan
from attnops.attn_core.gqa_paged_fwd.plan import PagedAttentionPlan, plan_paged_attention
from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.attention_fns import window_bounds
from attnops.kernel_utils.fp8 import E4M3

from .kernel import paged_append_kernel, paged_stage_kernel
from .reference import rope_table

_16BIT = (torch.float16, torch.bfloat16)
APPEND_TOKENS = 32  # tokens per append program
STAGE_TOKENS = 32  # rows per step of a staging program
_ROPE_TABLES: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
_IDENTITY_TABLES: dict[tuple, torch.Tensor] = {}


def _rope_table(max_position: int, rotary_dim: int, base: float, dtype, device):
    """The op's internal cos/sin table (README §5 formula, rounded to the compute dtype), built once."""
    key = (max_position, rotary_dim, float(base), dtype, str(device))
    if key not in _ROPE_TABLES:
        cos, sin = rope_table(max_position, rotary_dim, base, dtype, torch.device("cpu"))
        _ROPE_TABLES[key] = (cos.to(device), sin.to(device))
    return _ROPE_TABLES[key]


@dataclass
class PrefillPagedPlan:
    """Plan of ``gqa_prefill_paged_with_kv_cache_fwd`` for one batch layout: the attention schedule, the
    append work list ``[n, 2]`` (request, first token) and ``stage_fp8``: whether fp8 pools are first copied to
    16-bit staging pools (None: when a warp-specialized launch then applies and the staging pools fit in the
    16-bit size of the pools; True: always, which the CPU tests use to run the staging kernels; False: never).
    ``stage_tokens``: the longest request's cached + new tokens when the plan serves one call only (the op's own
    plan), so the staging pools hold that many per request; None (reusable plans, whose cached lengths may grow):
    the block table's capacity."""

    attn: PagedAttentionPlan
    append_items: torch.Tensor
    stage_fp8: bool | None = None
    stage_tokens: int | None = None

    def describe(self) -> str:
        return f"append: {self.append_items.shape[0]} items; {self.attn.describe()}"


def gqa_prefill_paged_plan(cu_seqlens_q, cache_seqlens, num_heads: int, num_kv_heads: int, head_dim: int, *,
                           is_causal: bool = True, num_splits: int | None = None, device=None,
                           stage_fp8: bool | None = None, **tuning) -> PrefillPagedPlan:
    """Schedule one batch layout (host lists or tensors; tensors are read once). Reusable for calls with the
    same query lengths: cached lengths are read from ``cache_seqlens`` at run time."""
    cu = cu_seqlens_q.tolist() if isinstance(cu_seqlens_q, torch.Tensor) else list(cu_seqlens_q)
    lens = cache_seqlens.tolist() if isinstance(cache_seqlens, torch.Tensor) else list(cache_seqlens)
    if device is None and isinstance(cache_seqlens, torch.Tensor):
        device = cache_seqlens.device
    device = torch.device(device) if device is not None else runtime.device()
    q_lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    attn = plan_paged_attention(q_lens, lens, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                is_causal=is_causal, new_keys=True, device=device, num_splits=num_splits,
                                **tuning)
    items = [(b, t0) for b, n in enumerate(q_lens) for t0 in range(0, n, APPEND_TOKENS)]
    return PrefillPagedPlan(attn, torch.tensor(items, dtype=torch.int32).reshape(-1, 2).to(device), stage_fp8)


def _check(q, k_new, v_new, k_pages, v_pages, k_scale, v_scale, cu_seqlens_q, cache_seqlens, block_table,
           page_size, max_seqlen_q, cache_dtype, softcap, fuse_rope, max_position, rotary_dim, out):
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=_16BIT, ndim=3, device=dev, inner_contiguous=1)
    t_q, num_heads, d = q.shape
    check_head_dim("q", d)
    checks.check_tensor("k_new", k_new, dtype=q.dtype, ndim=3, device=dev, inner_contiguous=1)
    num_kv = k_new.shape[1]
    checks.check_tensor("k_new", k_new, shape=(t_q, None, d))
    checks.check_tensor("v_new", v_new, dtype=q.dtype, shape=tuple(k_new.shape), device=dev, inner_contiguous=1)
    if num_kv == 0 or num_heads % num_kv:
        raise ValueError(f"q: {num_heads} query heads is not a multiple of the {num_kv} KV heads of k_new")
    pool_dtype = cache_dtype if cache_dtype is not None else q.dtype
    if pool_dtype not in (q.dtype, E4M3):
        raise ValueError(f"cache_dtype: expected None (q's dtype), {q.dtype} or float8_e4m3fn, got {cache_dtype}")
    checks.check_tensor("k_pages", k_pages, dtype=pool_dtype, shape=(None, num_kv, d), device=dev,
                        inner_contiguous=1)
    checks.check_tensor("v_pages", v_pages, dtype=pool_dtype, shape=tuple(k_pages.shape), device=dev,
                        inner_contiguous=1)
    if not isinstance(page_size, int) or page_size <= 0:
        raise ValueError(f"page_size: must be a positive int, got {page_size!r}")
    if k_pages.shape[0] % page_size:
        raise ValueError(f"k_pages: {k_pages.shape[0]} pool rows is not a whole number of pages of {page_size}")
    if pool_dtype == E4M3:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is None:
                raise ValueError(f"{name}: required ([1] f32) when the pools are float8_e4m3fn")
            checks.check_tensor(name, s, dtype=torch.float32, shape=(1,), device=dev)
    else:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:  # always passed in the seed signature; read only for fp8 pools
                checks.check_tensor(name, s, dtype=torch.float32, shape=(1,), device=dev)
    checks.check_tensor("block_table", block_table, dtype=torch.int32, ndim=2, device=dev, inner_contiguous=1)
    batch = block_table.shape[0]
    checks.check_tensor("cache_seqlens", cache_seqlens, dtype=torch.int32, shape=(batch,), device=dev,
                        inner_contiguous=1)
    checks.check_tensor("cu_seqlens_q", cu_seqlens_q, dtype=torch.int32, shape=(batch + 1,), device=dev,
                        inner_contiguous=1)
    if not isinstance(max_seqlen_q, int) or max_seqlen_q < 0:
        raise ValueError(f"max_seqlen_q: must be an int >= 0, got {max_seqlen_q!r}")
    check_softcap(softcap)
    r = rotary_dim or d
    if fuse_rope:
        if max_position is None or max_position <= 0:
            raise ValueError(f"max_position: required (> 0) with fuse_rope, got {max_position}")
        if r % 2 or r > d or r < 2:
            raise ValueError(f"rotary_dim: must be even and <= head dim {d}, got {rotary_dim}")
    elif rotary_dim is not None:
        raise ValueError("rotary_dim: only with fuse_rope=True")
    if out is not None:
        checks.check_tensor("out", out, dtype=q.dtype, shape=tuple(q.shape), device=dev, inner_contiguous=1)
    if checks.validate_values(cu_seqlens_q, cache_seqlens, block_table):
        checks.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q.cpu(), total=t_q)
        cu = cu_seqlens_q.tolist()
        q_lens = [cu[i + 1] - cu[i] for i in range(batch)]
        lens = cache_seqlens.tolist()
        if lens and min(lens) < 0:
            raise ValueError(f"cache_seqlens: lengths must be >= 0, got {min(lens)}")
        if q_lens and max(q_lens) > max_seqlen_q:
            raise ValueError(f"max_seqlen_q: {max_seqlen_q} is below the longest request ({max(q_lens)} tokens "
                             "in cu_seqlens_q)")
        totals = [c + n if n else c for c, n in zip(lens, q_lens)]
        check_table_values("block_table", block_table.cpu(), totals, page_size, k_pages.shape[0] // page_size,
                           "cached + new tokens")
        if fuse_rope and totals and max(totals) > max_position:
            raise ValueError(f"max_position: {max_position} positions, cache_seqlens + q_len reaches {max(totals)}")
    return num_kv


@torch.library.custom_op("attnops::gqa_prefill_paged_with_kv_cache_fwd",
                         mutates_args=("k_pages", "v_pages", "out"))
def _prefill(
    q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
    k_scale: torch.Tensor | None, v_scale: torch.Tensor | None, cu_seqlens_q: torch.Tensor,
    cache_seqlens: torch.Tensor, block_table: torch.Tensor, out: torch.Tensor, page_size: int, is_causal: bool,
    sm_scale: float, softcap: float, fuse_rope: bool, rope_base: float, max_position: int, rotary_dim: int,
) -> None:
    plan = gqa_prefill_paged_plan(cu_seqlens_q, cache_seqlens, q.shape[1], k_new.shape[1], q.shape[2],
                                  is_causal=is_causal)
    plan.stage_tokens = max((c + n for c, n in zip(plan.attn.kv_lens, plan.attn.q_lens) if n), default=0)
    _run(plan, q, k_new, v_new, k_pages, v_pages, k_scale, v_scale, cu_seqlens_q, cache_seqlens, block_table, out,
         page_size, sm_scale, softcap, fuse_rope, rope_base, max_position, rotary_dim)


@_prefill.register_fake
def _(q, k_new, v_new, k_pages, v_pages, k_scale, v_scale, cu_seqlens_q, cache_seqlens, block_table, out,
      page_size, is_causal, sm_scale, softcap, fuse_rope, rope_base, max_position, rotary_dim) -> None:
    return None


def _identity_table(batch: int, width: int, device) -> torch.Tensor:
    """``[batch, width]`` int32 with entry ``b · width + j``: the staging pools' block table."""
    key = (batch, width, str(device))
    if key not in _IDENTITY_TABLES:
        _IDENTITY_TABLES[key] = torch.arange(batch * width, dtype=torch.int32, device=device).view(batch, width)
    return _IDENTITY_TABLES[key]


def _stage_width(plan: PrefillPagedPlan, q, k_pages, v_pages, block_table, out, page_size: int) -> int:
    """Pages per request of the 16-bit staging pools an fp8 call copies its pools to (0: no staging). The
    warp-specialized kernel reads 16-bit pools only, and on the H200 it runs the D = 256 prefill at ~2.7x the
    Triton tile (qwen35-9b: 16.8 ms on 16-bit pools, 49.1 on fp8), far more than the staging copy costs (~3 bytes
    per cached K / V element). By default the staging pools may take at most what 16-bit pools of the same shape
    would (a wide block table of a reusable plan would ask for more: the Triton tile reads the fp8 pools then)."""
    if k_pages.dtype != E4M3 or plan.stage_fp8 is False:
        return 0
    batch, width = block_table.shape
    if plan.stage_tokens is not None:
        width = min(width, triton.cdiv(plan.stage_tokens, page_size))
    if plan.stage_fp8:
        return width
    if batch * width * page_size > k_pages.shape[0]:
        return 0
    probe = torch.empty((page_size,) + tuple(k_pages.shape[1:]), dtype=q.dtype, device=q.device)
    if any(ln.ws is not None and ln.n_items and ws_launch.paged_applies(ln.ws, q, probe, probe, out, page_size, True)
           for ln in plan.attn.launches):
        return width
    return 0


@runtime.eager_under_compile
def _run(plan: PrefillPagedPlan, q, k_new, v_new, k_pages, v_pages, k_scale, v_scale, cu_seqlens_q, cache_seqlens,
         block_table, out, page_size, sm_scale, softcap, fuse_rope, rope_base, max_position, rotary_dim):
    if q.shape[0] == 0:
        return
    d = q.shape[2]
    num_kv = k_new.shape[1]
    fp8 = k_pages.dtype == E4M3
    batch, width = block_table.shape
    cos = sin = None
    if fuse_rope:
        cos, sin = _rope_table(max_position, rotary_dim, rope_base, q.dtype, q.device)
    dummy = cache_seqlens
    stage_width = _stage_width(plan, q, k_pages, v_pages, block_table, out, page_size)
    stage = stage_width > 0
    # fp8 + warp-specialized: attend over 16-bit copies (cached rows dequantized as the reference rounds them, new
    # rows exact) through an identity table; the fp8 pools still get the quantized append
    ks = vs = dummy
    if stage:
        ks = torch.empty((batch * stage_width * page_size, num_kv, d), dtype=q.dtype, device=q.device)
        vs = torch.empty_like(ks)
        paged_stage_kernel[(batch * stage_width, num_kv)](
            k_pages, v_pages, ks, vs, block_table, cache_seqlens, cu_seqlens_q, k_scale, v_scale,
            k_pages.shape[0] // page_size, stage_width, page_size,
            k_pages.stride(0), k_pages.stride(1), v_pages.stride(0), v_pages.stride(1), ks.stride(0), ks.stride(1),
            block_table.stride(0),
            BLOCK_T=STAGE_TOKENS, BLOCK_D=d, num_warps=4,
        )
    n_append = plan.append_items.shape[0]
    if n_append:
        paged_append_kernel[(n_append * num_kv,)](
            k_new, v_new, k_pages, v_pages, ks, vs, block_table, cache_seqlens, cu_seqlens_q, plan.append_items,
            k_scale if fp8 else dummy, v_scale if fp8 else dummy,
            cos if cos is not None else dummy, sin if sin is not None else dummy,
            k_pages.shape[0] // page_size, width, stage_width, cos.shape[0] if cos is not None else 0, num_kv,
            page_size,
            k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
            k_pages.stride(0), k_pages.stride(1), v_pages.stride(0), v_pages.stride(1),
            ks.stride(0) if stage else 0, ks.stride(1) if stage else 0,
            block_table.stride(0), cos.stride(0) if cos is not None else 0,
            ROPE=fuse_rope, ROTARY_DIM=rotary_dim, QUANT=fp8, STAGE=stage,
            BLOCK_T=APPEND_TOKENS, BLOCK_D=triton.next_power_of_2(d), num_warps=4,
        )
    rope_q = fuse_rope
    if fuse_rope and any(ln.ws is not None for ln in plan.attn.launches):
        # the warp-specialized kernel does not rotate queries: rotate them once here (at c + i), for every launch
        q = rotate_rows(q, cos, sin, rotary_dim, False, batch=cache_seqlens.shape[0], max_rows=max(plan.attn.q_lens),
                        cu=cu_seqlens_q, pos_off=cache_seqlens)
        rope_q = False
    k_pool, v_pool, table = ((ks, vs, _identity_table(batch, stage_width, q.device)) if stage
                             else (k_pages, v_pages, block_table))
    pooled_fp8 = fp8 and not stage
    run_plan(plan.attn, q=q, k_pool=k_pool, v_pool=v_pool, o=out, table=table, cache_lens=cache_seqlens,
             cu_q=cu_seqlens_q,
             pool_strides=(page_size * k_pool.stride(0), k_pool.stride(0), k_pool.stride(1),
                           page_size * v_pool.stride(0), v_pool.stride(0), v_pool.stride(1)),
             page_size=page_size, num_pages=k_pool.shape[0] // page_size, sm_scale=sm_scale, softcap=softcap,
             k_new=k_new, v_new=v_new, k_scale=k_scale if pooled_fp8 else None,
             v_scale=v_scale if pooled_fp8 else None,
             cos=cos, sin=sin, rope_q=rope_q, rope_new_k=fuse_rope, rotary_dim=rotary_dim)


def gqa_prefill_paged_with_kv_cache_fwd(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    *,
    page_size: int,
    max_seqlen_q: int,
    is_causal: bool = True,
    cache_dtype: torch.dtype | None = None,
    sm_scale: float | None = None,
    softcap: float | None = None,
    fuse_rope: bool = False,
    rope_base: float = 10000.0,
    max_position: int | None = None,
    rotary_dim: int | None = None,
    out: torch.Tensor | None = None,
    plan: PrefillPagedPlan | None = None,
) -> torch.Tensor:
    """Chunked prefill over a flat paged pool: append the new tokens' K/V, attend over cache + new tokens.

    Request b (``c = cache_seqlens[b]`` cached tokens **before** the call, ``q_b`` new tokens) has new token
    i at position ``c + i``. With ``fuse_rope``, q and k_new are rotated there (NeoX, first ``rotary_dim``
    channels, table ``angle = pos · rope_base^(−2m/R)`` rounded to q's dtype); cached keys are taken as
    already rotated. Keys: cached rows ``0..c−1`` (fp8 pools dequantized by ``k_scale`` / ``v_scale``), then
    the q_b new rows (exact 16-bit values); causal: every cached key plus new keys ``j <= i``. Then the
    (rotated) new rows are written to their pool rows, ``sat_e4m3(x / scale)`` for fp8 pools; the attention
    sees the pre-call pool.

    Args:
        q: ``[T_q, H, D]`` f16 / bf16, packed by ``cu_seqlens_q``; last dim contiguous; D a power of two <= 256.
        k_new, v_new: ``[T_q, H_kv, D]`` q's dtype.
        k_pages, v_pages: flat pools ``[PT, H_kv, D]``, ``PT = NP · page_size``, of ``cache_dtype`` (default
            q's dtype; or float8_e4m3fn); mutated in place (rows of positions ``c .. c + q_b − 1``).
        k_scale, v_scale: ``[1]`` f32; required for fp8 pools, otherwise unused.
        cu_seqlens_q: ``[B+1]`` int32; cache_seqlens: ``[B]`` int32 (excludes the new tokens).
        block_table: ``[B, W]`` int32 covering ``c + q_b`` tokens of each request.
        page_size: tokens per page (any positive int). max_seqlen_q: bound on every q_b (checked).
        is_causal: bottom-right causal mask. sm_scale: default ``1/sqrt(D)``. softcap: None / 0 = off.
        fuse_rope, rope_base, max_position (table rows, required with fuse_rope, >= c + q_b), rotary_dim.
        out: optional ``[T_q, H, D]`` output buffer.
        plan: from ``gqa_prefill_paged_plan`` (skips planning: no host sync, graph-safe).

    Returns:
        o: ``[T_q, H, D]`` in q's dtype (``out`` when given).

    Example::

        o = gqa_prefill_paged_with_kv_cache_fwd(q, k, v, k_pool, v_pool, k_scale, v_scale, cu_q, cache_lens,
                                                block_table, page_size=64, max_seqlen_q=512)
    """
    _check(q, k_new, v_new, k_pages, v_pages, k_scale, v_scale, cu_seqlens_q, cache_seqlens, block_table, page_size,
           max_seqlen_q, cache_dtype, softcap, fuse_rope, max_position, rotary_dim, out)
    d = q.shape[2]
    scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(d)
    if out is None:
        out = testing.kernel_buffer(q.shape, q.dtype, q.device)
    args = (q, k_new, v_new, k_pages, v_pages, k_scale, v_scale, cu_seqlens_q, cache_seqlens, block_table, out,
            page_size)
    tail = (scale, float(softcap or 0.0), bool(fuse_rope), float(rope_base), int(max_position or 0),
            int(rotary_dim or d))
    if plan is None:
        _prefill(*args, bool(is_causal), *tail)
        return out
    q_lens = None
    if checks.validate_values(cu_seqlens_q):
        cu = cu_seqlens_q.tolist()
        q_lens = [cu[i + 1] - cu[i] for i in range(len(cu) - 1)]
    plan.attn.check_matches(q_lens, q.shape[1], k_new.shape[1], d, window_bounds(is_causal, -1, -1), True)
    _run(plan, *args, *tail)
    return out
