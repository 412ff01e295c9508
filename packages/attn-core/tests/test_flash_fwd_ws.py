"""The experimental Gluon warp-specialized flash forward (``flash_fwd/ws_kernel.py``) against the GQAVarlenFwd
reference: every config, both masks, D 64 / 128, fp16 / bf16, GQA ratios 1 / 4 / 8, ragged lengths with empty
requests, q_len > kv_len and tails that are not a multiple of any tile. Hopper only (TMA, wgmma, warp
specialization: neither the interpreter nor the CPU runs it); outputs start NaN-filled."""

import pytest
import torch

from attnops.attn_core.flash_fwd import ws_launch
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


def _run(layout, d, group, causal, dtype, cfg, seed=0):
    q_lens, kv_lens = LAYOUTS[layout]
    gen = testing.generator(seed)
    h_kv = 2
    q = testing.randn((sum(q_lens), h_kv * group, d), dtype, "cuda", gen)
    k = testing.randn((sum(kv_lens), h_kv, d), dtype, "cuda", gen)
    v = testing.randn((sum(kv_lens), h_kv, d), dtype, "cuda", gen)
    cu_q, cu_kv = testing.cu_seqlens(q_lens, "cuda"), testing.cu_seqlens(kv_lens, "cuda")
    out = testing.poisoned(q.shape, dtype, "cuda")
    ws_launch.gqa_fwd_ws(q, k, v, cu_q, cu_kv, max(q_lens), is_causal=causal, config=cfg, out=out)
    ref = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, is_causal=causal)
    lowp = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, is_causal=causal, compute_dtype=dtype)
    testing.assert_close_dual(f"ws {layout} D{d} G{group} causal={causal} {cfg.name}", out, ref, lowp)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_config(d, causal, layout):
    for cfg in ws_launch.CONFIGS[d]:
        _run(layout, d, 4, causal, torch.float16, cfg)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("group", [1, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_group_and_dtype(group, dtype):
    _run("ragged", 128, group, True, dtype, ws_launch.CONFIGS[128][0], seed=group)


@pytest.mark.gpu
@hopper
def test_no_keys_and_no_queries():
    q = torch.ones(5, 4, 64, dtype=torch.float16, device="cuda")
    k = torch.ones(0, 1, 64, dtype=torch.float16, device="cuda")
    out = ws_launch.gqa_fwd_ws(q, k, k, testing.cu_seqlens([5], "cuda"), testing.cu_seqlens([0], "cuda"), 5,
                               out=testing.poisoned(q.shape, q.dtype, "cuda"))
    assert bool((out == 0).all())
    empty = q[:0]
    kv = q[:3, :1].contiguous()
    assert ws_launch.gqa_fwd_ws(empty, kv, kv, testing.cu_seqlens([0], "cuda"),
                                testing.cu_seqlens([3], "cuda"), 0).shape == empty.shape


def test_host_tensors_rejected():
    """Runs everywhere: the kernel needs CUDA tensors, and says so before any launch."""
    q = torch.zeros(4, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="q: expected a tensor on cuda"):
        ws_launch.gqa_fwd_ws(q, q, q, cu, cu, 4)


def _bad_cases():
    def t(*shape, dtype=torch.float16):
        return torch.zeros(*shape, dtype=dtype, device="cuda")
    q, kv, cu = t(4, 4, 64), t(6, 2, 64), testing.cu_seqlens([4], "cuda")
    return {
        "head dim 96": ((t(4, 4, 96), t(6, 2, 96), t(6, 2, 96), cu, cu), {}),
        "k: expected dtype": ((q, kv.bfloat16(), kv, cu, cu), {}),
        "v: expected shape": ((q, kv, t(5, 2, 64), cu, cu), {}),
        "not a multiple": ((q, t(6, 3, 64), t(6, 3, 64), cu, cu), {}),
        "q: expected 3 dims": ((q[None], kv, kv, cu, cu), {}),
        "q: the last 3 dims must be contiguous": ((t(4, 8, 64)[:, ::2], kv, kv, cu, cu), {}),
        "cu_seqlens_q: expected dtype": ((q, kv, kv, cu.long(), cu), {}),
        "cu_seqlens_kv: expected shape": ((q, kv, kv, cu, testing.cu_seqlens([3, 3], "cuda")), {}),
        "out: expected shape": ((q, kv, kv, cu, cu), {"out": t(4, 4, 32)}),
    }


@pytest.mark.gpu
@hopper
def test_bad_input():
    """Each bad argument is named in the error, raised before any launch."""
    for expected, (args, kwargs) in _bad_cases().items():
        with pytest.raises((ValueError, TypeError), match=expected):
            ws_launch.gqa_fwd_ws(*args, 4, **kwargs)
