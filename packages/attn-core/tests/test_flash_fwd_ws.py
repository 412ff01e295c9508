"""The Gluon warp-specialized flash forward (``flash_fwd/ws_kernel.py``) through the public ops, every config
forced (``launch.forced(config=WsConfig)``), against the fp32 reference: D 64 / 128, fp16 / bf16, causal, full,
sliding windows (left, and both sides without the causal mask), GQA ratios 1 / 4 / 8, varlen (ragged lengths,
empty requests, q_len > kv_len, tails that are not a multiple of any tile) and dense layouts, persistent and
one-program-per-tile grids. Hopper only (TMA, wgmma, warp specialization: neither the interpreter nor the CPU
runs it); outputs start NaN-filled (``ATTNOPS_POISON``)."""

import dataclasses

import pytest
import torch

from attnops.attn_core import gqa_dense_fwd, gqa_varlen_fwd
from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd import ws_launch
from attnops.attn_core.gqa_dense_fwd.reference import gqa_dense_fwd_ref
from attnops.attn_core.gqa_varlen_fwd.reference import gqa_varlen_fwd_ref
from attnops.kernel_utils import testing

hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                            reason="needs a Hopper GPU")

# (q_lens, kv_lens): one request per layout class
LAYOUTS = {
    "ragged": ([130, 0, 7, 256, 64], [300, 9, 0, 1000, 64]),
    "q-gt-kv": ([200, 65], [70, 1]),
    "long": ([512, 512], [1024, 2048]),
}
# (is_causal, window_size_left, window_size_right)
MASKS = {"causal": (True, -1, -1), "full": (False, -1, -1), "causal-w100": (True, 100, -1),
         "full-w64-w200": (False, 64, 200)}


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("ATTNOPS_POISON", "1")


def _varlen(layout, d, group, mask, dtype, cfg, seed=0):
    q_lens, kv_lens = LAYOUTS[layout]
    gen = testing.generator(seed)
    h_kv = 2
    q = testing.randn((sum(q_lens), h_kv * group, d), dtype, "cuda", gen)
    k = testing.randn((sum(kv_lens), h_kv, d), dtype, "cuda", gen)
    v = testing.randn((sum(kv_lens), h_kv, d), dtype, "cuda", gen)
    cu_q, cu_kv = testing.cu_seqlens(q_lens, "cuda"), testing.cu_seqlens(kv_lens, "cuda")
    causal, wl, wr = MASKS[mask]
    kw = dict(is_causal=causal, window_size_left=wl, window_size_right=wr)
    with fwd.forced(config=cfg):
        out = gqa_varlen_fwd(q, k, v, cu_q, cu_kv, **kw)
    ref = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, **kw)
    lowp = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, **kw, compute_dtype=dtype)
    testing.assert_close_dual(f"ws {layout} D{d} G{group} {mask} {cfg.name}", out, ref, lowp)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_config(d, mask, layout):
    for cfg in ws_launch.CONFIGS[d]:
        _varlen(layout, d, 4, mask, torch.float16, cfg)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("group", [1, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_group_and_dtype(group, dtype):
    _varlen("ragged", 128, group, "causal", dtype, ws_launch.CONFIGS[128][0], seed=group)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("s_q,s_kv,mask", [(300, 300, "causal"), (300, 300, "full"), (130, 517, "causal"),
                                           (130, 517, "causal-w100"), (200, 260, "full-w64-w200"), (257, 64, "full")])
def test_dense(d, s_q, s_kv, mask):  # (the op allows S_q > S_kv only without the causal mask)
    gen = testing.generator(s_q + d)
    q = testing.randn((3, s_q, 8, d), torch.bfloat16, "cuda", gen)
    k = testing.randn((3, s_kv, 2, d), torch.bfloat16, "cuda", gen)
    v = testing.randn((3, s_kv, 2, d), torch.bfloat16, "cuda", gen)
    causal, wl, wr = MASKS[mask]
    kw = dict(is_causal=causal, window_size_left=wl, window_size_right=wr)
    default = ws_launch.CONFIGS[d][0]
    for cfg in (default, dataclasses.replace(default, persistent=False)):  # and its one-program-per-tile twin
        with fwd.forced(config=cfg):
            out = gqa_dense_fwd(q, k, v, **kw)
        ref = gqa_dense_fwd_ref(q, k, v, **kw)
        lowp = gqa_dense_fwd_ref(q, k, v, **kw, compute_dtype=torch.bfloat16)
        testing.assert_close_dual(f"ws dense {s_q}x{s_kv} D{d} {mask} {cfg.name}", out, ref, lowp)


@pytest.mark.gpu
@hopper
def test_no_keys_and_no_queries():
    cfg = ws_launch.CONFIGS[64][0]
    q = torch.ones(5, 4, 64, dtype=torch.float16, device="cuda")
    k = torch.ones(0, 1, 64, dtype=torch.float16, device="cuda")
    with fwd.forced(config=cfg):
        out = gqa_varlen_fwd(q, k, k, testing.cu_seqlens([5], "cuda"), testing.cu_seqlens([0], "cuda"),
                             is_causal=False)
        assert bool((out == 0).all())
        kv = q[:3, :1].contiguous()
        assert gqa_varlen_fwd(q[:0], kv, kv, testing.cu_seqlens([0], "cuda"), testing.cu_seqlens([3], "cuda")
                              ).shape == q[:0].shape


@pytest.mark.gpu
@hopper
def test_calls_it_does_not_serve_are_refused():
    """A forced warp-specialized config on a call the kernel does not serve raises instead of running another."""
    q = torch.ones(8, 4, 64, dtype=torch.float16, device="cuda")
    cu = testing.cu_seqlens([8], "cuda")
    with fwd.forced(config=ws_launch.CONFIGS[64][0]), pytest.raises(ValueError, match="does not serve"):
        gqa_varlen_fwd(q, q[:, :1], q[:, :1], cu, cu, softcap=30.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal off a GPU (with one, host tensors fail earlier)")
def test_refused_off_hopper():
    """Runs on CPU (the interpreter): the kernel needs a Hopper GPU, and a forced config says so."""
    q = torch.zeros(4, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with fwd.forced(config=ws_launch.CONFIGS[64][0]), pytest.raises(ValueError, match="does not serve"):
        gqa_varlen_fwd(q, q, q, cu, cu)
