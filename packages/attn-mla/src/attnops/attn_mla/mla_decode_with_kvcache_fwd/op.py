"""MLADecodeWithKVCacheFwd: checks, split planning, launch, torch custom-op registration."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from attnops.kernel_utils import checks, runtime, testing
from attnops.kernel_utils.split_combine import combine_splits

from . import ws_launch
from .kernel import mla_decode_kernel

_ACTIVATIONS = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634
# A KV split covers at least this many keys. 128: on the H200 (2026-12-01 21:20,
# benchmarks/results/h200/20261201-2120-tune-mla.json) the 4096-key rows with 1-2 head blocks ran 32 splits of 128
# keys 15-17 % faster than the 16 of 256 that a 256-key floor allowed (mla-tp-b1 22.9 -> 18.9 us, b2 23.7 -> 20.2,
# ds-v3-single-request 22.6 -> 18.9); 64-key splits were slower again.
MIN_SPLIT_KEYS = 128
# What one more program costs beyond its keys (loading its queries, its epilogue, its partial's write and read in
# the combine), in keys: a second wave of half-length splits loses to one wave. H200, Triton kernel
# (20261202-0733-tune-latent-alt.json): ds-v3-32k 32 splits (two waves) 0.141 ms, 16 (one) 0.122; ds-v3-serving-batch
# 11 (two) 0.094, 5 (one) 0.084; the other rows' planned counts were already the fastest and stay (any value in
# 128-512 changes only these two rows).
PROGRAM_OVERHEAD_KEYS = 256


@dataclass(frozen=True)
class MLAConfig:
    block_h: int  # query heads per program (all share the latent key rows)
    block_n: int  # keys per step
    num_warps: int
    num_stages: int


# Every config the op can pick; tests run each (GPU: full-size rows; CPU: shrunk rows).
CONFIGS = {
    # 64 heads × 64 keys, 2 stages: acc 64×512 fp32 = 128 regs/thread over 2 warpgroups; q (72 KB) in shared
    # memory beside 2 × 72 KB key tiles (224 KB). Score dots [4, 2] (each warpgroup 32 of the 64 keys:
    # 36 wgmma m64n32k16 per step, none repeated), P·V 4 × m64n256k16. sm_90 compile: 255 / 250 (split)
    # regs, no spills, no C7515 (v3: the split variant's loop has no zero-trip path; v2 split was 240 regs
    # with every wgmma serialized; v1 was 64 × 32, 3 stages, 72 m64n16k16 per 32 keys: both warpgroups
    # computed every score).
    "h200": MLAConfig(block_h=64, block_n=64, num_warps=8, num_stages=2),
    "interpreter": MLAConfig(block_h=16, block_n=16, num_warps=4, num_stages=1),
}


def pick_config() -> MLAConfig:
    return CONFIGS["interpreter" if runtime.interpreting() else "h200"]


# The warp-specialized kernel (``ws_launch``, its alternating config) by default where it serves the call and the
# KV groups fill its 64-head blocks: checked on the H200 and 1.10-1.34x faster than the Triton kernel on every
# seed row, the batch-1 latency rows included (docs/perf/attn-mla.md, 2026-12-02).
WS_DEFAULT = True


def default_config(q, q_pe, k, k_pe) -> MLAConfig | ws_launch.WsConfig:
    """The config a call runs by default: ``WS_CONFIGS[0]`` under ``WS_DEFAULT`` for whole 64-head blocks on a
    call the Gluon kernel serves, else the Triton kernel's ``pick_config()``."""
    group = q.shape[1] // max(k.shape[2], 1)
    if WS_DEFAULT and group % ws_launch.WS_CONFIGS[0].block_h == 0 and ws_launch.applies(q, q_pe, k, k_pe):
        return ws_launch.WS_CONFIGS[0]
    return pick_config()


def block_h_for(group_size: int, config: MLAConfig) -> int:
    return min(config.block_h, max(16, triton.next_power_of_2(group_size)))


def plan_splits(batch: int, head_blocks: int, n_kv: int, block_n: int) -> int:
    """KV splits per request: the fewest that minimize waves x (keys per split + PROGRAM_OVERHEAD_KEYS), never
    splitting below MIN_SPLIT_KEYS keys."""
    base = batch * head_blocks
    sms = runtime.num_sms()
    most = max(1, min(n_kv // MIN_SPLIT_KEYS, (2 * sms) // max(base, 1)))
    best, best_cost = 1, math.inf
    for s in range(1, most + 1):
        cost = math.ceil(base * s / sms) * (n_kv / s + PROGRAM_OVERHEAD_KEYS)
        if cost < best_cost - 1e-9:
            best, best_cost = s, cost
    split_len = triton.cdiv(triton.cdiv(n_kv, best), block_n) * block_n
    return triton.cdiv(n_kv, split_len)


# Split requests merged by their last split in the decode kernel instead of a combine launch. Off: on the H200
# (2026-12-01, 8-32 splits) it ran 54-114 us against 19-33 for the combine launch (docs/perf/attn-mla.md).
# ``with_config(..., fused_combine=True)`` in tests and sweeps.
FUSED_COMBINE_DEFAULT = False


def launch(q, q_pe, k, k_pe, out, config: MLAConfig | ws_launch.WsConfig, num_splits: int | None = None,
           fused_combine: bool | None = None) -> torch.Tensor:
    """Fill ``out`` ([B, H, D]); inputs already checked. ``num_splits`` overrides the planner (tests);
    ``fused_combine`` where splits are merged (default ``FUSED_COMBINE_DEFAULT``; the warp-specialized kernel,
    a ``ws_launch.WsConfig``, always merges in the combine launch)."""
    b, h, d = q.shape
    n_kv, h_kv = k.shape[1], k.shape[2]
    pe = q_pe.shape[2]
    if b == 0 or h == 0:
        return out
    if n_kv == 0:
        return out.zero_()  # no visible key: exact zeros (spec: empty rows)
    group = h // h_kv
    ws = isinstance(config, ws_launch.WsConfig)
    refused = ws_launch.refusal(q, q_pe, k, k_pe) if ws else None
    if ws and (config.persistent or config.split_free):
        refused = "it has no persistent or split-free form (DSA configs)"
    if refused:
        raise ValueError(f"config {config.name}: the warp-specialized kernel cannot serve this call: {refused}")
    block_h = config.block_h if ws else block_h_for(group, config)
    head_blocks_per_kv = triton.cdiv(group, block_h)
    head_blocks = h_kv * head_blocks_per_kv
    splits = num_splits if num_splits is not None else plan_splits(b, head_blocks, n_kv, config.block_n)
    split_len = triton.cdiv(triton.cdiv(n_kv, splits), config.block_n) * config.block_n
    splits = triton.cdiv(n_kv, split_len)  # no empty split
    split = splits > 1
    fused = split and not ws and (FUSED_COMBINE_DEFAULT if fused_combine is None else fused_combine)
    part_o = testing.kernel_buffer((b, h, splits, d) if split else (1,), torch.float32, q.device)
    part_lse = testing.kernel_buffer((b, h, splits) if split else (1,), torch.float32, q.device)
    counters = runtime.arrival_counters(q.device, b * head_blocks) if fused else part_lse
    qk_scale = LOG2E / math.sqrt(d + pe)
    if ws:
        ws_launch.run(config, q, q_pe, k, k_pe, out, part_o, part_lse, head_blocks_per_kv, split_len, splits,
                      qk_scale)
    else:
        _launch_triton(q, q_pe, k, k_pe, out, part_o, part_lse, counters, config, group, block_h, head_blocks,
                       head_blocks_per_kv, split_len, splits, split, fused, qk_scale)
    if split and not fused:
        # partials [B, H, splits, D]: row (b, h)'s splits are consecutive workspace rows
        combine_splits(part_o, part_lse, out, rows=b * h, heads=h, num_splits=splits, row_stride=splits,
                       split_stride=1, out_strides=(1, out.stride(0), 0, out.stride(1)))
    return out


def _launch_triton(q, q_pe, k, k_pe, out, part_o, part_lse, counters, config: MLAConfig, group: int, block_h: int,
                   head_blocks: int, head_blocks_per_kv: int, split_len: int, splits: int, split: bool, fused: bool,
                   qk_scale: float) -> None:
    b, h, d = q.shape
    n_kv, pe = k.shape[1], q_pe.shape[2]
    mla_decode_kernel[(head_blocks, splits, b)](
        q, q_pe, k, k_pe, out, part_o, part_lse, counters,
        h, n_kv, group, head_blocks_per_kv, split_len, splits, qk_scale,
        q.stride(0), q.stride(1), q_pe.stride(0), q_pe.stride(1),
        k.stride(0), k.stride(1), k.stride(2), k_pe.stride(0), k_pe.stride(1), k_pe.stride(2),
        out.stride(0), out.stride(1),
        D=d, PE=pe, BLOCK_H=block_h, BLOCK_N=config.block_n, SPLIT=split, NUM_STAGES=config.num_stages,
        FUSED_COMBINE=fused, num_warps=config.num_warps, num_stages=config.num_stages,
    )


@torch.library.custom_op("attnops::mla_decode_with_kvcache_fwd", mutates_args=())
def _mla_decode(q: torch.Tensor, q_pe: torch.Tensor, k: torch.Tensor, k_pe: torch.Tensor) -> torch.Tensor:
    out = testing.kernel_buffer(q.shape, q.dtype, q.device)
    return launch(q, q_pe, k, k_pe, out, default_config(q, q_pe, k, k_pe))


@_mla_decode.register_fake
def _(q, q_pe, k, k_pe):
    return torch.empty_like(q)


def _power_of_two(name: str, what: str, n: int) -> None:
    if n < 16 or n > 1024 or n & (n - 1):
        raise ValueError(f"{name}: {what} must be a power of two in [16, 1024], got {n}")


def check_inputs(q, q_pe, k, k_pe) -> None:
    dev = runtime.device()
    checks.check_tensor("q", q, dtype=_ACTIVATIONS, ndim=3, device=dev, inner_contiguous=1)
    b, h, d = q.shape
    checks.check_tensor("q_pe", q_pe, dtype=q.dtype, shape=(b, h, None), device=dev, inner_contiguous=1)
    pe = q_pe.shape[2]
    checks.check_tensor("k", k, dtype=q.dtype, shape=(b, None, None, d), device=dev, inner_contiguous=1)
    n_kv, h_kv = k.shape[1], k.shape[2]
    checks.check_tensor("k_pe", k_pe, dtype=q.dtype, shape=(b, n_kv, h_kv, pe), device=dev, inner_contiguous=1)
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"k: KV heads H_kv = {h_kv} must divide the query heads H = {h}")
    _power_of_two("q", "the latent width D", d)
    _power_of_two("q_pe", "the rope width PE", pe)


def with_config(config: MLAConfig | ws_launch.WsConfig, poison: bool = False, num_splits: int | None = None,
                fused_combine: bool | None = None):
    """The public function pinned to ``config`` and optionally a split count and merge place (tests and
    tuning); ``poison`` pre-fills the output with NaN so that an unwritten element fails the check."""

    def run(q, q_pe, k, k_pe):
        check_inputs(q, q_pe, k, k_pe)
        out = torch.full_like(q, float("nan")) if poison else torch.empty_like(q)
        return launch(q, q_pe, k, k_pe, out, config, num_splits=num_splits, fused_combine=fused_combine)

    return run


def mla_decode_with_kvcache_fwd(
    q: torch.Tensor, q_pe: torch.Tensor, k: torch.Tensor, k_pe: torch.Tensor
) -> torch.Tensor:
    """Absorbed-MLA decode (DeepSeek-V2/V3): one query token per request over its latent cache.

    ``s_hj = (<q_h, k_j> + <q_pe_h, k_pe_j>) / sqrt(D + PE)``, ``o_h = Σ_j softmax_j(s_hj) · k_j``: the
    values are the latent keys themselves. Every one of the N_kv keys is visible (no mask, no lengths).

    Args:
        q: ``[B, H, D]`` float16 / bfloat16 latent-space query (D = kv_lora_rank = 512); last dim contiguous.
        q_pe: ``[B, H, PE]`` same dtype, rope part (PE = 64).
        k: ``[B, N_kv, H_kv, D]`` same dtype, latent cache c_KV (also the values); any strides but the last.
        k_pe: ``[B, N_kv, H_kv, PE]`` same dtype, rope part of the keys. Query head h reads KV head
            ``h // (H / H_kv)``. D and PE are powers of two in [16, 1024].

    Returns:
        ``[B, H, D]`` in q's dtype (no lse). N_kv = 0 gives zeros.

    Example::

        o = mla_decode_with_kvcache_fwd(q, q_pe, ckv, kpe)  # q [32,128,512], ckv [32,4096,1,512]
    """
    check_inputs(q, q_pe, k, k_pe)
    return _mla_decode(q, q_pe, k, k_pe)
