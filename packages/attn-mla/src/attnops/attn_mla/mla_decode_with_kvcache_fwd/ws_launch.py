"""Host side of the Gluon warp-specialized MLA decode (``ws_kernel.py``): its configs, which calls it serves,
TMA descriptors (2-D row views of q / q_pe / k_pe, a 3-D per-request view of k), the launch. ``op.launch`` runs
it when the config it is given is a ``WsConfig`` (tests and sweeps: ``op.with_config(WS_CONFIGS[i])``), and by default
(``op.default_config``, ``WS_DEFAULT``: ``WS_CONFIGS[0]``, the alternating consumer) on the calls it serves whose
KV groups fill 64-head blocks: on the H200 it ran every seed row faster than the Triton kernel."""

from __future__ import annotations

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from attnops.attn_mla.latent_ws import CONFIGS, FORCED_CONFIGS, HALF, HEADS, WsConfig
from attnops.kernel_utils import runtime

from .ws_kernel import mla_decode_ws_kernel

__all__ = ["WS_CONFIGS", "WsConfig", "applies", "refusal", "run"]
# the measured configs (the default first), then the forced-only ones (latent_ws.FORCED_CONFIGS)
WS_CONFIGS = CONFIGS + FORCED_CONFIGS
LATENT = 2 * HALF.value  # the latent width the kernel serves (D = kv_lora_rank = 512)
ROPE = 64  # the rope width it serves (PE)


def _row_view(t: torch.Tensor) -> tuple[int, int] | None:
    """``(rows, row stride)`` of ``t`` (``[B, H, W]`` or ``[B, N, H_kv, W]``) as one row of ``H·W`` (or
    ``H_kv·W``) elements per (request, head) or per (request, key); None where no such 2-D view exists or
    TMA cannot read it (last dim strided, heads not packed, stride not 16-byte aligned)."""
    w = t.shape[-1]
    if t.stride(-1) != 1:
        return None
    if t.dim() == 4:
        if t.shape[2] > 1 and t.stride(2) != w:
            return None
        width = t.shape[2] * w
    else:
        width = w
    inner = t.stride(1) if t.shape[1] > 1 else width  # (a size-1 dim's stride can be anything: 0 after expand)
    if t.shape[0] > 1 and t.stride(0) != t.shape[1] * inner:
        return None
    if t.shape[1] > 1 and inner < width:
        return None
    if inner * t.element_size() % 16 or t.data_ptr() % 16:
        return None
    return t.shape[0] * t.shape[1], inner


def refusal(q: torch.Tensor, q_pe: torch.Tensor, k: torch.Tensor, k_pe: torch.Tensor) -> str | None:
    """Why the kernel cannot serve a call, or None: it needs D = 512 and PE = 64, 16-bit tensors (the op
    checked that they share q's dtype), each readable through a 2-D TMA view, on a Hopper GPU (not the
    interpreter)."""
    if q.shape[-1] != LATENT or q_pe.shape[-1] != ROPE:
        return f"needs D = {LATENT} and PE = {ROPE}, got D = {q.shape[-1]}, PE = {q_pe.shape[-1]}"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"needs float16 / bfloat16, got {q.dtype}"
    for name, t in (("q", q), ("q_pe", q_pe), ("k", k), ("k_pe", k_pe)):
        if _row_view(t) is None:
            return f"{name}: strides {tuple(t.stride())} give no 2-D row view TMA can read"
    if runtime.interpreting() or not runtime.is_hopper():
        return "needs a Hopper GPU (TMA, wgmma, warp specialization; not the interpreter)"
    return None


def applies(q: torch.Tensor, q_pe: torch.Tensor, k: torch.Tensor, k_pe: torch.Tensor) -> bool:
    """Whether the kernel serves the call (``refusal`` says why not)."""
    return refusal(q, q_pe, k, k_pe) is None


def _desc(t: torch.Tensor, box: list[int]) -> TensorDescriptor:
    rows, stride = _row_view(t)
    width = t.shape[-1] * (t.shape[2] if t.dim() == 4 else 1)
    dtype = gl.float16 if t.dtype == torch.float16 else gl.bfloat16
    return TensorDescriptor(t, [rows, width], [stride, 1], box, gl.NVMMASharedLayout.get_default_for(box, dtype))


def _key_desc(k: torch.Tensor, cfg: WsConfig) -> TensorDescriptor:
    """The latent keys as ``[B, N_kv, H_kv·512]`` in [1, BLOCK_N, 256] boxes: TMA zero-fills a box's rows past its
    request's N_kv, so a split's last tile holds zeros there (P's zeros then never meet another request's
    keys, which may hold anything) and no consumer zeroes rows in shared memory (docs/perf/attn-mla.md: 2 CTA
    barriers and a branch per block in the loop)."""
    _, stride = _row_view(k)
    b, n = k.shape[:2]
    box = [1, cfg.block_n, HALF.value]
    dtype = gl.float16 if k.dtype == torch.float16 else gl.bfloat16
    return TensorDescriptor(k, [b, n, k.shape[2] * k.shape[3]], [n * stride, stride, 1], box,
                            gl.NVMMASharedLayout.get_default_for(box, dtype))


def run(cfg: WsConfig, q, q_pe, k, k_pe, out, part_o, part_lse, head_blocks_per_kv: int, split_len: int,
        splits: int, qk_scale: float) -> None:
    """Launch over (head blocks, splits, B) for ``applies``-checked inputs; ``part_o`` / ``part_lse`` as
    ``op.launch`` allocates them (used when ``splits > 1``)."""
    b, h, _ = q.shape
    n_kv, h_kv = k.shape[1], k.shape[2]
    grid = (h_kv * head_blocks_per_kv, splits, b)
    mla_decode_ws_kernel[grid](
        _desc(q, [HEADS.value, HALF.value]), _desc(q_pe, [HEADS.value, ROPE]), _key_desc(k, cfg),
        _desc(k_pe, [cfg.block_n, ROPE]), out, part_o, part_lse, h, n_kv, h // h_kv, head_blocks_per_kv, split_len,
        splits, qk_scale, out.stride(0), out.stride(1),
        BLOCK_N=cfg.block_n, STAGES=cfg.stages, SPLIT=splits > 1, ALTERNATING=cfg.alternating,
        HALF_READY=cfg.half_ready, THREAD_RELEASE=cfg.thread_release, LAZY_RESCALE=cfg.lazy_rescale,
        num_warps=4)
