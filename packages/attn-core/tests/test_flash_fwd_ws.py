"""The Gluon warp-specialized flash forward (``flash_fwd/ws_kernel.py``) through the public ops, every config
forced (``launch.forced(config=WsConfig)``; paged ops: ``ws=`` of their plans), against the fp32 reference: D 64 /
128 / 256, fp16 / bf16, softcap and sinks, causal, full, sliding windows (left, and both sides without the causal
mask), GQA ratios 1 / 4 / 8, varlen (ragged lengths, empty requests, q_len > kv_len, tails that are not a multiple
of any tile), dense and paged layouts (GQAPagedFwd, GQAPrefillPagedWithKVCacheFwd: shuffled pages, pages of 16 /
48 / 64 / 128 tokens, NaN-poisoned page tails, the RoPE query pre-pass), persistent and one-program-per-tile
grids. Hopper only (TMA, wgmma, warp specialization: neither the interpreter nor the CPU runs it); outputs start
NaN-filled (``ATTNOPS_POISON``). On CPU: the launches bind every kernel argument (a recording stand-in for the
kernel), the plans' ws work, the fallbacks and refusals."""

import dataclasses
import math

import pytest
import torch

from attnops.attn_core import gqa_dense_fwd, gqa_paged_plan, gqa_prefill_paged_plan, gqa_varlen_fwd
from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd import ws_kernel, ws_launch
from attnops.attn_core.flash_fwd.reference import rope_ref
from attnops.attn_core.gqa_dense_fwd import spec as dense_spec
from attnops.attn_core.gqa_dense_fwd.reference import gqa_dense_fwd_ref
from attnops.attn_core.gqa_paged_fwd import beside, tail_split
from attnops.attn_core.gqa_paged_fwd import plan as paged_plan
from attnops.attn_core.gqa_paged_fwd import spec as paged_spec
from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd import spec as prefill_spec
from attnops.attn_core.gqa_varlen_fwd import spec as varlen_spec
from attnops.attn_core.gqa_varlen_fwd.reference import gqa_varlen_fwd_ref
from attnops.kernel_utils import runtime, testing

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


FP8_VARLEN = next(w for w in varlen_spec.SPEC.workloads if w.name == "llama-8b-fp8-sink")


def _fp8_varlen(layout, d, mask, cfg):
    """fp8 q / k / v with per-[B, H_kv] scales (S on fp8 tensor cores, P·V over V cast to 16 bits), bf16 out,
    against the fp32 reference of the dequantized inputs (spec tolerance of the fp8 rows)."""
    q_lens, kv_lens = LAYOUTS[layout]
    causal, wl, wr = MASKS[mask]
    case = varlen_spec.make_case(FP8_VARLEN, "cuda", seed=d + len(mask), q_lens=q_lens, kv_lens=kv_lens,
                                 heads=(8, 2), head_dim=d, with_sinks=False, is_causal=causal,
                                 window_size_left=wl, window_size_right=wr)
    with fwd.forced(config=cfg):
        varlen_spec.SPEC.check(case)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("dtype", ["f16", "fp8"])
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_config(d, mask, layout, dtype):
    for cfg in ws_launch.CONFIGS[d]:
        if dtype == "fp8":
            _fp8_varlen(layout, d, mask, cfg)
        else:
            _varlen(layout, d, 4, mask, torch.float16, cfg)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
@pytest.mark.parametrize("softcap,sinks", [(30.0, False), (0.0, True), (5.0, True)], ids=["cap", "sink", "cap-sink"])
def test_softcap_and_sinks(d, softcap, sinks):
    """Softcap (a strong cap: 5, scores of sd ~11) and attention sinks (rows with no visible key: 0) on ragged
    varlen requests with a window, every config."""
    q_lens, kv_lens = LAYOUTS["ragged"]
    gen = testing.generator(d)
    q = testing.randn((sum(q_lens), 8, d), torch.float16, "cuda", gen)
    k = testing.randn((sum(kv_lens), 2, d), torch.float16, "cuda", gen)
    v = testing.randn((sum(kv_lens), 2, d), torch.float16, "cuda", gen)
    cu_q, cu_kv = testing.cu_seqlens(q_lens, "cuda"), testing.cu_seqlens(kv_lens, "cuda")
    kw = dict(is_causal=True, window_size_left=200, softcap=softcap or None)
    sink = testing.randn((8,), torch.float32, "cuda", gen, scale=2.0) if sinks else None
    ref = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, sinks=sink, **kw)
    lowp = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, sinks=sink, **kw, compute_dtype=torch.float16)
    for cfg in ws_launch.CONFIGS[d]:
        with fwd.forced(config=cfg):
            out = gqa_varlen_fwd(q, k, v, cu_q, cu_kv, sinks=sink, **kw)
        testing.assert_close_dual(f"ws D{d} softcap={softcap} sinks={sinks} {cfg.name}", out, ref, lowp)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("group", [1, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_group_and_dtype(group, dtype):
    _varlen("ragged", 128, group, "causal", dtype, ws_launch.CONFIGS[128][0], seed=group)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
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
@pytest.mark.parametrize("softcap,sinks,out_dtype", [(0.0, True, torch.bfloat16), (20.0, True, torch.float16),
                                                    (20.0, False, torch.bfloat16)], ids=["sink", "cap-sink-f16", "cap"])
def test_fp8_softcap_sinks_and_dense(softcap, sinks, out_dtype):
    """fp8 with sinks, softcap (the dequant scale folded into the cap's scale) and an f16 output on ragged
    varlen requests, then the dense layout, with the D = 128 default and its one-program-per-tile twin."""
    q_lens, kv_lens = LAYOUTS["ragged"]
    case = varlen_spec.make_case(FP8_VARLEN, "cuda", seed=3, q_lens=q_lens, kv_lens=kv_lens, heads=(8, 2),
                                 with_sinks=sinks, softcap=softcap or None, window_size_left=300,
                                 out_dtype=out_dtype)
    default = ws_launch.CONFIGS[128][0]
    for cfg in (default, dataclasses.replace(default, persistent=False)):
        with fwd.forced(config=cfg):
            varlen_spec.SPEC.check(case.fresh())
    dense_fp8 = next(w for w in dense_spec.SPEC.workloads if w.dtype.startswith("fp8"))
    dense = dense_spec.make_case(dense_fp8, "cuda", seed=4, shrink=True)
    with fwd.forced(config=default):
        dense_spec.SPEC.check(dense)


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
    """A forced warp-specialized config on a call the kernel does not serve (fp8 with RoPE) raises instead of
    running another."""
    q = torch.ones(8, 4, 64, device="cuda").to(torch.float8_e4m3fn)
    cu = testing.cu_seqlens([8], "cuda")
    table = torch.ones(8, 32, dtype=torch.float16, device="cuda")
    scale = torch.ones(1, 1, device="cuda")
    with fwd.forced(config=ws_launch.CONFIGS[64][0]), pytest.raises(ValueError, match="does not serve"):
        gqa_varlen_fwd(q, q[:, :1], q[:, :1], cu, cu, scale, scale, scale, rope_cos=table, rope_sin=table,
                       pos_encoding_mode="rope", out_dtype=torch.float16)


ROPE_VARLEN = next(w for w in varlen_spec.SPEC.workloads if w.name == "llama-8b-rope-partial" and w.dtype == "f16")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("layout,rotary_dim", [("neox", 64), ("interleaved", None), ("neox", None)])
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
def test_rope_prerotated_every_config(d, layout, rotary_dim):
    """16-bit RoPE calls on the warp-specialized kernel (queries and keys rotated in pre-passes): ragged requests,
    an empty one, q_len > kv_len (rows at negative positions), partial rotary dims, both layouts, every config;
    then the dense layout with the default."""
    case = varlen_spec.make_case(ROPE_VARLEN, "cuda", seed=d, rope_layout=layout, rotary_dim=rotary_dim,
                                 q_lens=[130, 0, 300, 200], kv_lens=[300, 9, 1000, 70], heads=(8, 2), head_dim=d)
    for cfg in ws_launch.CONFIGS[d]:
        with fwd.forced(config=cfg):
            varlen_spec.SPEC.check(case.fresh())
    rope_dense = next(w for w in dense_spec.SPEC.workloads if w.name == "prefill-rope" and w.dtype == "f16")
    dense = dense_spec.make_case(rope_dense, "cuda", seed=d, head_dim=d, rope_layout=layout, rotary_dim=rotary_dim)
    with fwd.forced(config=ws_launch.CONFIGS[d][0]):
        dense_spec.SPEC.check(dense)


@pytest.mark.parametrize("dense", [False, True], ids=["varlen", "dense"])
def test_prerotated_queries_and_keys(dense):
    """Runs everywhere (the interpreter on CPU): ``prerotated`` rotates key j of a request at position j and query
    i at kv_len − q_len + i (rows at negative positions unrotated), partial rotary dim, and leaves no RoPE."""
    gen = testing.generator(7)
    dev = runtime.device()
    q_lens, kv_lens = ([5, 0, 9, 4], [12, 3, 9, 2]) if not dense else ([6] * 2, [10] * 2)
    d, r = 32, 16
    q = testing.randn((sum(q_lens), 4, d), torch.float16, dev, gen)
    k = testing.randn((sum(kv_lens), 2, d), torch.float16, dev, gen)
    cos, sin = (testing.randn((16, r // 2), torch.float16, dev, gen) for _ in range(2))
    cu_q, cu_kv = testing.cu_seqlens(q_lens, dev), testing.cu_seqlens(kv_lens, dev)
    if dense:
        p = fwd.Problem(q.view(2, 6, 4, d), k.view(2, 10, 2, d), k.view(2, 10, 2, d), q.view(2, 6, 4, d),
                        varlen=False, batch=2, max_q=6, max_kv=10, rope_cos=cos, rope_sin=sin, rotary_dim=r)
    else:
        p = fwd.Problem(q, k, k, q, varlen=True, batch=4, max_q=9, max_kv=12, cu_q=cu_q, cu_kv=cu_kv, rope_cos=cos,
                        rope_sin=sin, rotary_dim=r)
    got = fwd.prerotated(p)
    assert got.rope_cos is None and got.rope_sin is None
    q_pos = torch.cat([torch.arange(ql, device=dev) + kl - ql for ql, kl in zip(q_lens, kv_lens)])
    k_pos = torch.cat([torch.arange(kl, device=dev) for kl in kv_lens])
    want_q = rope_ref(q.float(), q_pos, cos, sin, r, False).to(torch.float16)
    want_k = rope_ref(k.float(), k_pos, cos, sin, r, False).to(torch.float16)
    torch.testing.assert_close(got.q.reshape(want_q.shape), want_q, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(got.k.reshape(want_k.shape), want_k, atol=2e-3, rtol=2e-3)
    assert bool((got.q.reshape(want_q.shape)[q_pos < 0] == q[q_pos < 0]).all())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal off a GPU (with one, host tensors fail earlier)")
def test_refused_off_hopper():
    """Runs on CPU (the interpreter): the kernel needs a Hopper GPU, and a forced config says so."""
    q = torch.zeros(4, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with fwd.forced(config=ws_launch.CONFIGS[64][0]), pytest.raises(ValueError, match="does not serve"):
        gqa_varlen_fwd(q, q, q, cu, cu)


def _plan_case(spec, case, plan):
    ours = case.fresh()
    ours.inputs["plan"] = plan
    spec.compare(ours.run(spec.fn), case.fresh().run(spec.reference), case)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
@pytest.mark.parametrize("page_size,mask", [(64, m) for m in MASKS] + [(128, "causal"), (16, "causal"),
                                                                      (48, "causal"), (48, "full-w64-w200")])
def test_paged(d, page_size, mask):
    """GQAPagedFwd's large class: ragged keys whose last page ends inside a key tile (the rest of the page is
    NaN: the tail copy must zero it), a 1-token request beside (the Triton small class), shuffled pages; pages
    smaller than or not dividing the key tile (16, 48: copies of gcd(page, tile) rows, none past the keys)."""
    causal, wl, wr = MASKS[mask]
    case = paged_spec.build_case([300, 1, 77, 130], [3000, 1500, 777, 130], 8, 2, d, page_size, torch.float16,
                                 torch.float16, "cuda", seed=d + page_size, is_causal=causal, window_size_left=wl,
                                 window_size_right=wr)
    a = case.inputs
    for cfg in ws_launch.paged_configs(d):
        plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, is_causal=causal,
                              window_size_left=wl, window_size_right=wr, ws=cfg)
        assert [ln.ws for ln in plan.launches if ln.kind == "large"] == [cfg]
        _plan_case(paged_spec.SPEC, case, plan)


CLIMB_CHANNELS = 16  # q / k channels ``testing.climbing_scores`` raises (test_climbing_scores*)


def _climb(q: torch.Tensor, k_rows: torch.Tensor, positions: torch.Tensor) -> None:
    """Scores rising by ~12 (base 2) every 96 keys of a request (``testing.climbing_scores`` on the last
    ``CLIMB_CHANNELS`` channels; ``k_rows`` [keys, H_kv, D], ``positions``: each key's index in its request)."""
    testing.climbing_scores(q[..., -CLIMB_CHANNELS:], k_rows[..., -CLIMB_CHANNELS:], q.shape[-1] ** -0.5,
                            positions=positions)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
@pytest.mark.parametrize("mask", ["causal", "full", "causal-w100"])
def test_climbing_scores(d, mask):
    """Every config on ragged varlen requests whose scores climb along the keys (``_climb``)."""
    q_lens, kv_lens = LAYOUTS["ragged"]
    gen = testing.generator(d + 11)
    q = testing.randn((sum(q_lens), 8, d), torch.float16, "cuda", gen)
    k = testing.randn((sum(kv_lens), 2, d), torch.float16, "cuda", gen)
    v = testing.randn((sum(kv_lens), 2, d), torch.float16, "cuda", gen)
    _climb(q, k, torch.cat([torch.arange(n, device="cuda") for n in kv_lens]))
    cu_q, cu_kv = testing.cu_seqlens(q_lens, "cuda"), testing.cu_seqlens(kv_lens, "cuda")
    causal, wl, wr = MASKS[mask]
    kw = dict(is_causal=causal, window_size_left=wl, window_size_right=wr)
    ref = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, **kw)
    lowp = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, **kw, compute_dtype=torch.float16)
    for cfg in ws_launch.CONFIGS[d]:
        with fwd.forced(config=cfg):
            out = gqa_varlen_fwd(q, k, v, cu_q, cu_kv, **kw)
        testing.assert_close_dual(f"ws climbing D{d} {mask} {cfg.name}", out, ref, lowp)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
@pytest.mark.parametrize("page_size", [48, 64])
def test_paged_climbing_scores(d, page_size):
    """Every paged config (GQAPagedFwd's large class, NaN page tails) on causal requests whose scores climb along
    the keys (``_climb`` through the page table): 64-token pages build the lazy-rescale configs lazy, 48-token
    pages (16-row copies) eager (``ws_launch.lazy_rescale_applies``)."""
    case = paged_spec.build_case([300, 1, 77, 130], [3000, 1500, 777, 130], 8, 2, d, page_size, torch.float16,
                                 torch.float16, "cuda", seed=d + 5, is_causal=True)
    a = case.inputs
    table = a["page_table"]
    for b, n in enumerate(a["cache_seqlens"].tolist()):
        pos = torch.arange(n, device="cuda")
        pages, slots = table[b, pos // page_size].long(), pos % page_size
        rows = a["k_pages"][pages, slots]
        _climb(a["q"], rows, pos)
        a["k_pages"][pages, slots] = rows
    for cfg in ws_launch.paged_configs(d):
        plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, is_causal=True, ws=cfg)
        assert [ln.ws for ln in plan.launches if ln.kind == "large"] == [cfg]
        _plan_case(paged_spec.SPEC, case, plan)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("mask", ["causal", "full", "causal-w100"])
def test_paged_packed_merged(mask):
    """``merge_small=True`` with the packing configs: decode requests of 1 and 3 tokens (4 and 12 rows of a tile),
    an empty one and two prefill requests in one launch, G = 4."""
    causal, wl, wr = MASKS[mask]
    case = paged_spec.build_case([300, 1, 0, 3, 130], [3000, 1500, 0, 777, 130], 8, 2, 128, 64, torch.float16,
                                 torch.float16, "cuda", seed=7, is_causal=causal, window_size_left=wl,
                                 window_size_right=wr)
    a = case.inputs
    for cfg in (c for c in ws_launch.paged_configs(128) if c.pack_gqa):
        plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, 128, is_causal=causal,
                              window_size_left=wl, window_size_right=wr, ws=cfg, merge_small=True)
        (ln,) = plan.launches
        assert ln.ws == cfg and set(ln.ws_items[:, 0].tolist()) == {0, 1, 3, 4}
        _plan_case(paged_spec.SPEC, case, plan)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_prefill_paged(d, dtype, causal):
    """GQAPrefillPagedWithKVCacheFwd's attention from the pool after the append (keys = cache + new tokens):
    cached lengths that end inside a page, an empty cache, a request with no new tokens."""
    case = prefill_spec.build_case([300, 77, 0, 130], [1000, 64, 50, 0], 8, 2, d, 64, dtype, dtype, "cuda",
                                   seed=3, is_causal=causal)
    a = case.inputs
    for cfg in ws_launch.paged_configs(d):
        plan = gqa_prefill_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, is_causal=causal, ws=cfg)
        assert [ln.ws for ln in plan.attn.launches if ln.kind == "large"] == [cfg]
        _plan_case(prefill_spec.SPEC, case, plan)


# (q_lens, cache lens) whose lightest blocks are whole 128-token blocks (ws_tail splits only those): request 0's two
# blocks over ~3 k keys, request 1's three over 444-700, a decode request (the Triton small class), request 3's one
# block over its own 128 keys
TAIL_LAYOUT = ([256, 384, 1, 128], [3000, 700, 1500, 128])


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
@pytest.mark.parametrize("mask,page_size", [("causal", 64), ("full", 16), ("causal-w100", 64)])
def test_paged_tail_splits(d, mask, page_size):
    """Split blocks (``ws_tail=(k, s)``): the lightest k whole blocks in s shares of their key tiles, written as
    partials into a NaN-poisoned workspace and merged by the combine: one block in 2, every block in 7 (shares with
    no key tile: a 128-key block has 1-4 tiles), with every unpacked paged config under the causal mask (persistent
    and one program per tile; the other masks: the default config), and three in 3 with softcap and sinks (the
    sink joins in the combine only) on the default config. (Each config's split build compiles apart: the configs
    are limited so that the file's GPU step stays within its cap.)"""
    causal, wl, wr = MASKS[mask]
    default = ws_launch.PAGED_DEFAULTS[d]
    configs = [c for c in ws_launch.paged_configs(d) if not c.pack_gqa] if mask == "causal" else [default]
    for cfg in configs:
        cases = [((1, 2), {}), ((6, 7), {})] + ([((3, 3), {"softcap": 20.0, "sinks": True})] if cfg == default else [])
        for (k, s), extra in cases:
            case = paged_spec.build_case(*TAIL_LAYOUT, 8, 2, d, page_size, torch.float16, torch.float16, "cuda",
                                         seed=d + k, is_causal=causal, window_size_left=wl, window_size_right=wr,
                                         **extra)
            a = case.inputs
            plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, is_causal=causal,
                                  window_size_left=wl, window_size_right=wr, ws=cfg, ws_tail=(k, s))
            (large,) = [ln for ln in plan.launches if ln.kind == "large"]
            assert large.ws == cfg and large.ws_splits.block_start.shape[0] == k
            _plan_case(paged_spec.SPEC, case, plan)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [128, 256])
def test_prefill_paged_tail_splits(d):
    """GQAPrefillPagedWithKVCacheFwd with split blocks: keys = cache + the appended new tokens (``KV_PLUS_Q``)."""
    case = prefill_spec.build_case([256, 128, 0, 128], [1000, 64, 50, 0], 8, 2, d, 64, torch.float16, torch.float16,
                                   "cuda", seed=5)
    a = case.inputs
    cfg = ws_launch.PAGED_DEFAULTS[d]
    plan = gqa_prefill_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, ws=cfg, ws_tail=(3, 2))
    assert [ln.ws_splits.n_splits for ln in plan.attn.launches if ln.kind == "large"] == [2]
    _plan_case(prefill_spec.SPEC, case, plan)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [64, 128])
def test_paged_small_beside(d):
    """``small_beside``: the decode launch (split over its keys, merged in the kernel) on a side stream beside the
    ws launch on fewer programs: the model's count and forced ones (1, 40 and 131 SMs left), on the caller's stream,
    on a user's stream whose next work reads the output, and captured in a CUDA graph and replayed (the fork and
    the join), against the reference; 1-token and 3-token decodes (the small class) beside a ragged prefill, one
    request empty."""
    case = paged_spec.build_case([700, 1, 3, 0, 1, 260], [4000, 3000, 4096, 10, 77, 1300], 8, 2, d, 64,
                                 torch.float16, torch.float16, "cuda", seed=d + 1)
    a = case.inputs
    expected = case.fresh().run(paged_spec.SPEC.reference)
    for count in (True, 1, 40, 131):
        plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, ws=ws_launch.PAGED_DEFAULTS[d],
                              small_beside=count)
        large, small = plan.launches
        assert small.beside == (large.ws_programs is not None)
        assert count is True or large.ws_programs == runtime.num_sms() - count
        _plan_case(paged_spec.SPEC, case, plan)
    plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, ws=ws_launch.PAGED_DEFAULTS[d],
                          small_beside=40)
    user = torch.cuda.Stream()
    with torch.cuda.stream(user):
        ours = case.fresh()
        ours.inputs["plan"] = plan
        out = ours.run(paged_spec.SPEC.fn)
        read_next = {name: t.clone() for name, t in out.items()}  # ordered after the call on ``user`` only
    user.synchronize()
    paged_spec.SPEC.compare(read_next, expected, case)
    static = case.fresh()
    static.inputs["plan"] = plan
    static.run(paged_spec.SPEC.fn)  # compiled before the capture
    captured = testing.replayed_in_graph(lambda: static.run(paged_spec.SPEC.fn))
    paged_spec.SPEC.compare(captured, expected, case)


@pytest.mark.gpu
@hopper
def test_prefill_paged_small_beside():
    """GQAPrefillPagedWithKVCacheFwd with ``small_beside=40``: its append first, then the ws launch and the decode
    launch beside it (1- and 3-token requests), against the reference."""
    prefill = prefill_spec.build_case([700, 1, 3, 260], [3000, 2999, 4093, 1040], 8, 2, 128, 64, torch.float16,
                                      torch.float16, "cuda", seed=2)
    b = prefill.inputs
    plan = gqa_prefill_paged_plan(b["cu_seqlens_q"], b["cache_seqlens"], 8, 2, 128, ws=ws_launch.PAGED_DEFAULTS[128],
                                  small_beside=40)
    assert [ln.beside for ln in plan.attn.launches] == [False, True]
    _plan_case(prefill_spec.SPEC, prefill, plan)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", sorted(ws_launch.CONFIGS))
def test_paged_softcap_and_sinks(d):
    """The paged layout with softcap and sinks together (48-token pages: chunked copies)."""
    case = paged_spec.build_case([300, 1, 130], [3000, 1500, 130], 8, 2, d, 48, torch.float16, torch.float16, "cuda",
                                 seed=9, softcap=20.0, sinks=True)
    a = case.inputs
    for cfg in ws_launch.paged_configs(d):
        _plan_case(paged_spec.SPEC, case, gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d, ws=cfg))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d,rotary_dim", [(128, 128), (256, 64)])
def test_prefill_paged_rope(d, rotary_dim):
    """With ``fuse_rope`` the queries are rotated once before the launch (the kernel reads keys the append
    rotated into the pool): full and partial rotary dims."""
    case = prefill_spec.build_case([300, 77, 130], [1000, 64, 0], 8, 2, d, 64, torch.float16, torch.float16, "cuda",
                                   seed=5, fuse_rope=True, rotary_dim=rotary_dim)
    a = case.inputs
    for cfg in ws_launch.paged_configs(d):
        _plan_case(prefill_spec.SPEC, case, gqa_prefill_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 8, 2, d,
                                                                   ws=cfg))


def test_prefill_rope_queries_rotated_before_the_launch():
    """Runs everywhere: a plan with ws work and ``fuse_rope`` rotates the queries in a pre-pass (positions after
    each request's cached tokens) and the kernels that run (the Triton ones on CPU) take them as rotated."""
    case = prefill_spec.build_case([20, 0, 9], [40, 7, 0], 4, 2, 64, 16, torch.float16, torch.float16,
                                   runtime.device(), seed=6, fuse_rope=True, rotary_dim=32)
    a = case.inputs
    plan = gqa_prefill_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 4, 2, 64, ws=ws_launch.CONFIGS[64][-1])
    assert any(ln.ws is not None for ln in plan.attn.launches)
    _plan_case(prefill_spec.SPEC, case, plan)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_fused_qkv_views(dtype):
    """q, k and v as views of one fused qkv projection (rows spaced (H + 2·H_kv)·D apart), varlen and dense,
    served as they are (no copy) and right."""
    gen = testing.generator(11)
    q_lens = [300, 0, 130]
    t, h, h_kv, d = sum(q_lens), 8, 2, 128
    qkv = testing.randn((t, (h + 2 * h_kv) * d), dtype, "cuda", gen)
    q = qkv[:, :h * d].view(t, h, d)
    k = qkv[:, h * d:(h + h_kv) * d].view(t, h_kv, d)
    v = qkv[:, (h + h_kv) * d:].view(t, h_kv, d)
    assert ws_launch.token_rows(q) == (t, (h + 2 * h_kv) * d)
    cu = testing.cu_seqlens(q_lens, "cuda")
    with fwd.forced(config=ws_launch.CONFIGS[d][0]):
        out = gqa_varlen_fwd(q, k, v, cu, cu)
    testing.assert_close_dual("ws fused qkv varlen", out, gqa_varlen_fwd_ref(q, k, v, cu, cu),
                              gqa_varlen_fwd_ref(q, k, v, cu, cu, compute_dtype=dtype))
    qd, kd, vd = (x[:300].unflatten(0, (3, 100)) for x in (q, k, v))
    with fwd.forced(config=ws_launch.CONFIGS[d][0]):
        out = gqa_dense_fwd(qd, kd, vd)
    testing.assert_close_dual("ws fused qkv dense", out, gqa_dense_fwd_ref(qd, kd, vd),
                              gqa_dense_fwd_ref(qd, kd, vd, compute_dtype=dtype))


def test_token_rows_views():
    """Runs everywhere: which layouts the TMA descriptors read as one row per token (else the Triton kernel)."""
    x = torch.zeros(10, 12 * 64, dtype=torch.float16)
    assert ws_launch.token_rows(x.view(10, 12, 64)) == (10, 768)
    assert ws_launch.token_rows(x[:, :8 * 64].view(10, 8, 64)) == (10, 768)  # a fused qkv's q
    assert ws_launch.token_rows(x.view(2, 5, 12, 64)) == (10, 768)
    assert ws_launch.token_rows(x.view(10, 12, 64).transpose(0, 1)) is None  # heads not packed in a row
    assert ws_launch.token_rows(x.view(10, 12, 64)[:, ::2]) is None  # every other head
    assert ws_launch.token_rows(x.view(2, 5, 12, 64)[:, :4]) is None  # batch and token axes not one
    assert ws_launch.token_rows(x.view(-1)[:9 * 756].view(9, 756)[:, :8 * 64].view(9, 8, 64)) is None  # 1512 B rows
    assert ws_launch.token_rows(x.view(10, 12, 64)[:1]) == (1, 768)


class _Recorder:
    """Stands in for the kernel: records each launch's grid and arguments."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


def _bound(call) -> set[str]:
    _, args, kwargs = call
    names = ws_kernel.gqa_fwd_ws_kernel.arg_names
    assert not set(names[:len(args)]) & set(kwargs), "an argument passed twice"
    return set(names[:len(args)]) | set(kwargs) - {"num_warps"}


def test_launches_bind_every_kernel_argument(monkeypatch):
    """Runs everywhere: dense, varlen and paged launches pass exactly the kernel's parameters, persistent grids
    of at most one program per SM (TMA descriptors of host tensors; the kernel is a recording stand-in)."""
    rec = _Recorder()
    monkeypatch.setattr(ws_launch, "gqa_fwd_ws_kernel", rec)
    cfg = ws_launch.paged_configs(128)[0]
    q = torch.zeros(2, 300, 8, 128, dtype=torch.float16)
    k = torch.zeros(2, 500, 2, 128, dtype=torch.float16)
    out = torch.empty_like(q)
    ws_launch.launch(fwd.Problem(q, k, k, out, varlen=False, batch=2, max_q=300, max_kv=500, wr=0), cfg)
    varlen = fwd.Problem(q[0], k[0], k[0], out[0], varlen=True, batch=1, max_q=300, max_kv=500,
                         cu_q=torch.tensor([0, 300], dtype=torch.int32),
                         cu_kv=torch.tensor([0, 500], dtype=torch.int32))
    ws_launch.launch(varlen, cfg)
    ragged = fwd.Problem(q[0], k[0], k[0], out[0], varlen=True, batch=2, max_q=200, max_kv=400,
                         cu_q=torch.tensor([0, 100, 300], dtype=torch.int32),
                         cu_kv=torch.tensor([0, 100, 500], dtype=torch.int32))
    ws_launch.launch(ragged, cfg)
    pool = torch.zeros(10, 64, 2, 128, dtype=torch.float16)
    items = torch.tensor([[0, 2], [0, 1], [0, 0]], dtype=torch.int32)
    table = torch.arange(10, dtype=torch.int32)[None]
    ws_launch.launch_paged(cfg, q[0], pool, pool, out[0], torch.tensor([0, 300], dtype=torch.int32),
                           torch.tensor([600], dtype=torch.int32), table, items, 64, 0.1, 1 << 30, 0,
                           kv_plus_q=False)
    assert len(rec.calls) == 4
    for call in rec.calls:
        assert _bound(call) == set(ws_kernel.gqa_fwd_ws_kernel.arg_names)
    grids = [grid for grid, _, _ in rec.calls]
    sms = runtime.num_sms()
    assert grids == [(min(3 * 2 * 8, sms),), (min(3 * 8, sms),), (min(2 * 2 * 8, sms),), (min(3 * 8, sms),)]
    assert [c[2]["LAYOUT"] for c in rec.calls] == [ws_kernel.DENSE.value, ws_kernel.VARLEN.value,
                                                   ws_kernel.VARLEN.value, ws_kernel.PAGED.value]
    assert [c[2]["BLOCK_MAJOR"] for c in rec.calls] == [False] * 4  # the paged default: request-major
    # block-major configs: where every request is as long as the longest (dense; varlen whose totals say so)
    bm = dataclasses.replace(cfg, block_major=True)
    for p in (fwd.Problem(q, k, k, out, varlen=False, batch=2, max_q=300, max_kv=500), varlen, ragged):
        ws_launch.launch(p, bm)
    assert [c[2]["BLOCK_MAJOR"] for c in rec.calls[4:]] == [True, True, False]
    # requests sorted in the kernel: varlen batches of 2+, the scratch for the order sized to the batch
    lpt = dataclasses.replace(cfg, lpt=True)
    ws_launch.launch(ragged, lpt)
    ws_launch.launch(varlen, lpt)
    assert [c[2]["SORT_B"] for c in rec.calls[:7]] == [0] * 7
    assert [c[2]["SORT_B"] for c in rec.calls[7:]] == [2, 0]
    assert rec.calls[7][2]["order_ptr"].shape == (2,) and rec.calls[7][2]["order_ptr"].dtype == torch.int32


def test_fp8_launch_binds_scales_and_a_16_bit_v(monkeypatch):
    """Runs everywhere: an fp8 call passes e4m3 q / k descriptors, a V descriptor over the values cast to the output
    dtype, the three scale tensors and ``FP8``; a 16-bit call passes none of them (``FP8`` False)."""
    rec = _Recorder()
    monkeypatch.setattr(ws_launch, "gqa_fwd_ws_kernel", rec)
    cfg = ws_launch.CONFIGS[128][0]
    dev = runtime.device()  # (V's cast to 16 bits runs a real kernel)
    q = torch.zeros(2, 300, 8, 128, device=dev).to(torch.float8_e4m3fn)
    k = torch.ones(2, 500, 2, 128, device=dev).to(torch.float8_e4m3fn)
    scales = [torch.full((2, 2), s, dtype=torch.float32, device=dev) for s in (0.5, 0.25, 2.0)]
    out = torch.empty(2, 300, 8, 128, dtype=torch.bfloat16, device=dev)
    ws_launch.launch(fwd.Problem(q, k, k, out, varlen=False, batch=2, max_q=300, max_kv=500, wr=0, q_scale=scales[0],
                                 k_scale=scales[1], v_scale=scales[2]), cfg)
    ws_launch.launch(fwd.Problem(out, out[:, :, :2], out[:, :, :2], torch.empty_like(out), varlen=False, batch=2,
                                 max_q=300, max_kv=300, wr=0), cfg)
    (_, args, fp8), (_, _, sixteen) = rec.calls
    assert fp8["FP8"] and not sixteen["FP8"]
    assert [fp8[n] for n in ("q_scale_ptr", "k_scale_ptr", "v_scale_ptr")] == scales
    q_desc, k_desc, v_desc = args[:3]
    assert q_desc.base.dtype == k_desc.base.dtype == torch.float8_e4m3fn
    assert v_desc.base.dtype == torch.bfloat16 and bool((v_desc.base == 1).all())  # raw e4m3 values, cast exactly


def test_packed_gqa_binds_a_3d_q_and_fewer_tiles(monkeypatch):
    """Runs everywhere: a ``pack_gqa`` config launches ``PACK`` = G over q as ``[tokens, H, D]`` in ``[64 / G, G, D]``
    boxes, blocks of 128 / G tokens and H / G tiles per block; without the flag, with G = 1, with G not dividing 64
    or with heads that are not contiguous rows, one query head per tile."""
    rec = _Recorder()
    monkeypatch.setattr(ws_launch, "gqa_fwd_ws_kernel", rec)
    cfg = ws_launch.WsConfig(64, 3, True, persistent=False, pack_gqa=True)
    q = torch.zeros(2, 300, 8, 128, dtype=torch.float16)
    k = torch.zeros(2, 500, 2, 128, dtype=torch.float16)
    ws_launch.launch(fwd.Problem(q, k, k, torch.empty_like(q), varlen=False, batch=2, max_q=300, max_kv=500), cfg)
    grid, args, kwargs = rec.calls[-1]
    assert kwargs["PACK"] == 4 and kwargs["n_m_blocks"] == 10  # 300 tokens in blocks of 32
    assert grid == (10 * 2 * 8 // 4,)
    assert list(args[0].shape) == [600, 8, 128] and list(args[0].block_shape) == [16, 4, 128]
    plain = dataclasses.replace(cfg, pack_gqa=False)
    ws_launch.launch(fwd.Problem(q, k, k, torch.empty_like(q), varlen=False, batch=2, max_q=300, max_kv=500), plain)
    assert rec.calls[-1][2]["PACK"] == 1 and rec.calls[-1][2]["n_m_blocks"] == 3
    assert [ws_launch.heads_per_tile(cfg, g) for g in (1, 2, 8, 64, 71, 128)] == [1, 2, 8, 64, 1, 1]
    assert ws_launch.heads_per_tile(plain, 8) == 1
    wide = torch.zeros(2, 300, 8, 256, dtype=torch.float16)[..., :128]  # heads 256 elements apart
    assert ws_launch.pack(cfg, wide, k) == 1 and ws_launch.pack(cfg, q, k) == 4


def test_packed_gqa_paged_plan_counts_packed_blocks():
    """Runs everywhere: with a ``pack_gqa`` config the plan's ws items are blocks of 128 / G query tokens."""
    cfg = ws_launch.WsConfig(64, 3, True, pack_gqa=True)
    assert cfg in ws_launch.paged_configs(128)
    plan = paged_plan.plan_paged_attention([300, 1, 130], [3000, 1500, 130], num_heads=8, num_kv_heads=2,
                                           head_dim=128, ws=cfg, device="cpu")
    (large,) = [ln for ln in plan.launches if ln.kind == "large"]
    items = large.ws_items.tolist()
    assert sorted(items) == [[0, m] for m in range(10)] + [[2, m] for m in range(5)]  # 300 / 32, 130 / 32 blocks


def test_packed_merged_plan_takes_decode_requests():
    """Runs everywhere: ``merge_small=True`` with a packing config puts the decode requests among the ws items (one
    launch, its Triton fallback over the same requests); an unpacked config keeps them in the small launch."""
    packed = ws_launch.WsConfig(64, 3, True, pack_gqa=True)
    lengths = ([1, 300, 0, 4], [900, 1000, 0, 100])
    plan = paged_plan.plan_paged_attention(*lengths, num_heads=8, num_kv_heads=2, head_dim=128, ws=packed,
                                           merge_small=True, device="cpu")
    (ln,) = plan.launches
    assert ln.ws == packed and sorted(ln.ws_items[:, 0].tolist()) == [0] + [1] * 10 + [3]
    assert set(ln.items[:, 0].tolist()) == {0, 1, 3}
    plain = paged_plan.plan_paged_attention(*lengths, num_heads=8, num_kv_heads=2, head_dim=128,
                                            ws=dataclasses.replace(packed, pack_gqa=False), merge_small=True,
                                            device="cpu")
    kinds = {ln.kind: ln for ln in plain.launches}
    assert sorted(kinds) == ["large", "small"] and set(kinds["large"].ws_items[:, 0].tolist()) == {1}


def test_plan_refuses_a_config_the_paged_layout_does_not_run():
    """Runs everywhere: forcing a non-overlap (or too large) config on a paged plan says so instead of silently
    running the Triton kernel."""
    with pytest.raises(ValueError, match="not a paged config"):
        paged_plan.plan_paged_attention([300], [3000], num_heads=8, num_kv_heads=2, head_dim=128,
                                        ws=ws_launch.WsConfig(128, 2), device="cpu")


def test_plan_ws_work_heaviest_first():
    """Runs everywhere: a plan's ws items are (request, 128-token block) of the large class, heaviest first;
    the small class and 16-row requests get none (the default rule: ``test_paged_plan_default_per_head_dim``)."""
    cfg = ws_launch.paged_configs(128)[0]
    plan = paged_plan.plan_paged_attention([300, 1, 130], [3000, 1500, 130], num_heads=8, num_kv_heads=2,
                                           head_dim=128, ws=cfg, device="cpu")
    large = [ln for ln in plan.launches if ln.kind == "large"][0]
    assert large.ws == cfg
    # costs (keys x rows): (0, 1) 2956·128, (0, 0) 2828·128, (0, 2) 3000·44, (2, 0) 128·128, (2, 1) 130·2
    assert large.ws_items.tolist() == [[0, 1], [0, 0], [0, 2], [2, 0], [2, 1]]
    assert all(ln.ws is None for ln in plan.launches if ln.kind == "small")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback off a GPU (on Hopper the ws kernel runs)")
def test_paged_ws_falls_back_off_hopper():
    """Runs on CPU (the interpreter): a plan with ws work on a call the kernel cannot take runs the Triton kernels
    and matches the reference."""
    case = paged_spec.build_case([70, 1], [200, 90], 4, 1, 64, 64, torch.float16, torch.float16, runtime.device(),
                                 seed=4)
    a = case.inputs
    plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 4, 1, 64, ws=ws_launch.CONFIGS[64][-1])
    assert [ln.ws for ln in plan.launches if ln.kind == "large"] == [ws_launch.CONFIGS[64][-1]]
    _plan_case(paged_spec.SPEC, case, plan)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback off a GPU (on Hopper the ws kernel runs)")
def test_paged_small_beside_falls_back_off_hopper(monkeypatch):
    """Runs on CPU (the interpreter): a ``small_beside`` plan (built as for 8 SMs, 3 left to the decode launch and
    its splits planned for those) on a call the ws kernel cannot take runs its Triton launches one after the other
    and matches the reference."""
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 8)
    case = paged_spec.build_case([70, 1, 1], [200, 90, 333], 4, 1, 64, 64, torch.float16, torch.float16,
                                 runtime.device(), seed=6)
    a = case.inputs
    plan = gqa_paged_plan(a["cu_seqlens_q"], a["cache_seqlens"], 4, 1, 64, ws=ws_launch.PAGED_DEFAULTS[64],
                          small_beside=3)
    large, small = plan.launches
    assert large.ws_programs == 5 and small.beside
    _plan_case(paged_spec.SPEC, case, plan)


def _varlen_problem(d=128, heads=32, batch=8, s=512, window=None, softcap=0.0, dtype=torch.float16, ragged=False):
    """A varlen call of ``batch`` requests of ``s`` queries and keys (``ragged``: the first request's keys one
    longer) (shapes only: the rule reads no data)."""
    q = torch.empty(batch * s, heads, d, dtype=dtype)
    k = torch.empty(batch * s + ragged, 1, d, dtype=dtype)
    return fwd.Problem(q, k, k, q, varlen=True, batch=batch, max_q=s, max_kv=s + ragged, wr=0, softcap=softcap,
                       wl=window if window is not None else 1 << 30)


def test_tail_split_choice():
    """Runs everywhere: ``tail_split.choose`` on qwen35-9b-rope's launch (D 256, 64 blocks of 32.9-33.8 k keys x 32
    heads: 2048 tiles, 15.5 rounds of 132 programs) splits its 3 lightest blocks in 3 (modelled 1.9 % shorter, the
    combine included); nothing where no candidate gains 1 %: 128 equal tiles (one round either way), only 2 blocks
    splittable, falcon-7b's short D = 64 tiles (the combine's read of the workspace costs more than the round it
    saves); nothing past ``MAX_ROUNDS`` rounds or beyond the whole blocks at the end; forced candidates as asked.
    The model's schedule is the kernel's: program p runs tiles p, 2P - 1 - p, 2P + p, ..."""
    keys = sorted((32768 + 128 * (m + 1) for _ in range(8) for m in range(8)), reverse=True)
    assert tail_split.choose(keys, 64, 32, 256, 132, persistent=True) == (3, 3)
    assert tail_split.choose(keys, 64, 32, 256, 132, persistent=False) == (3, 3)
    before = tail_split.launch_seconds(keys, 32, 256, 132, True)
    assert 17e-3 < before < 20e-3  # (measured on the H200: 17.5-18.4 ms)
    assert 0.975 < tail_split.launch_seconds(keys, 32, 256, 132, True, 3, 3) / before < 0.985
    assert tail_split.choose(keys, 2, 32, 256, 132, persistent=True) is None  # 2 blocks in 2-4: under 1 %
    assert tail_split.choose([4500] * 16, 16, 8, 256, 132, persistent=True) is None
    falcon = sorted((1536 + 128 * (m + 1) for _ in range(4) for m in range(4)), reverse=True)
    assert tail_split.choose(falcon, 16, 71, 64, 132, persistent=True) is None
    assert tail_split.choose(keys * 8, 512, 32, 256, 132, persistent=True) is None  # 124 rounds
    assert tail_split.choose(keys, 0, 32, 256, 132, persistent=True) is None
    assert tail_split.choose(keys, 64, 32, 256, 132, persistent=True, forced=(6, 7)) == (6, 7)
    assert tail_split.choose(keys, 5, 32, 256, 132, persistent=True, forced=(6, 2)) is None
    assert [tail_split.round_program(t, 4) for t in range(10)] == [0, 1, 2, 3, 3, 2, 1, 0, 0, 1]
    assert [ws_kernel._round_tile.fn(r, p, 4, True) for r in (0, 1, 2) for p in range(4)] == [0, 1, 2, 3, 7, 6, 5,
                                                                                              4, 8, 9, 10, 11]


def test_plan_tail_items():
    """Runs everywhere: ``ws_tail=(k, s)`` replaces the last k (lightest, whole) blocks of the ws items by s items
    each, ``(b, block, share, split block)``, whole items ``(b, block, 0, -1)``; the split blocks' first query tokens
    and workspace rows ((block, token, head, share)); the default leaves the items as they were; a forced split of a
    partial block, into fewer than 2 shares, or of a packing config is refused, and a ``ws_tail`` that is neither a
    bool nor a pair of ints is a TypeError."""
    cfg = ws_launch.PAGED_DEFAULTS[128]
    plan = paged_plan.plan_paged_attention(*TAIL_LAYOUT, num_heads=8, num_kv_heads=2, head_dim=128, ws=cfg,
                                           ws_tail=(2, 3), device="cpu")
    (large,) = [ln for ln in plan.launches if ln.kind == "large"]
    # heaviest first (keys x rows): (0, 1), (0, 0), (1, 2), (1, 1), (1, 0), (3, 0)
    assert large.ws_items.tolist() == [[0, 1, 0, -1], [0, 0, 0, -1], [1, 2, 0, -1], [1, 1, 0, -1],
                                       [1, 0, 0, 0], [1, 0, 1, 0], [1, 0, 2, 0], [3, 0, 0, 1], [3, 0, 1, 1],
                                       [3, 0, 2, 1]]
    sp = large.ws_splits
    assert sp.n_splits == 3 and sp.block_start.tolist() == [256, 641]
    assert sp.part_o.shape == (2 * 128 * 8 * 3, 128) and sp.part_lse.shape == (2 * 128 * 8 * 3,)
    assert "(2 blocks in 3 splits)" in plan.describe()
    plain = paged_plan.plan_paged_attention(*TAIL_LAYOUT, num_heads=8, num_kv_heads=2, head_dim=128, ws=cfg,
                                            device="cpu")
    (large,) = [ln for ln in plain.launches if ln.kind == "large"]
    assert large.ws_splits is None and large.ws_items.shape == (6, 2)
    with pytest.raises(ValueError, match="k <= 0"):  # (request 0's last block holds 44 tokens)
        paged_plan.plan_paged_attention([300], [3000], num_heads=8, num_kv_heads=2, head_dim=128, ws=cfg,
                                        ws_tail=(1, 2), device="cpu")
    for bad in ("yes", (2, 3, 1), (2.0, 3)):
        with pytest.raises(TypeError, match="ws_tail"):
            paged_plan.plan_paged_attention(*TAIL_LAYOUT, num_heads=8, num_kv_heads=2, head_dim=128, ws=cfg,
                                            ws_tail=bad, device="cpu")
    with pytest.raises(ValueError, match="s >= 2"):
        paged_plan.plan_paged_attention(*TAIL_LAYOUT, num_heads=8, num_kv_heads=2, head_dim=128, ws=cfg,
                                        ws_tail=(1, 1), device="cpu")
    packed = next(c for c in ws_launch.paged_configs(128) if c.pack_gqa)
    with pytest.raises(ValueError, match="packs 4 heads"):
        paged_plan.plan_paged_attention(*TAIL_LAYOUT, num_heads=8, num_kv_heads=2, head_dim=128, ws=packed,
                                        ws_tail=(1, 2), device="cpu")


# llama-8b-serving-step's layout: one 1024-token prefill and 31 decodes over 4096 keys each (H 32, H_kv 8, D 128)
SERVING_STEP = ([1024] + [1] * 30 + [0], [4096] * 32)


def test_small_beside_model():
    """Runs everywhere: ``beside``'s model of serving-step (256 prefill tiles, 31 decodes reading 520 MB): one
    launch after the other ~252 µs (measured 255 on the H200); the prefill on 132 − R programs beside the decodes on
    R SMs is shortest around R = 40-46 (3 rounds of tiles against the reads on R SMs), and 50 SMs cost the prefill a
    fourth round; qwen3-ragged-odd's 7 decodes (117 MB) gain nothing: the prefill needs all 132 programs for 2
    rounds."""
    keys = sorted((3072 + 128 * (m + 1) for m in range(8)), reverse=True)
    tiles = [k for k in keys for _ in range(32)]
    decode_bytes = 31 * 4096 * 8 * 128 * 2 * 2
    after = beside.seconds(tiles, 128, 132, decode_bytes, 0)
    assert 240e-6 < after < 265e-6
    reserved = beside.choose(tiles, 128, 132, decode_bytes)
    assert 36 <= reserved <= 46
    assert beside.seconds(tiles, 128, 132, decode_bytes, reserved) < 0.8 * after
    assert beside.seconds(tiles, 128, 132, decode_bytes, 50) > 0.95 * after  # 82 programs: 4 rounds
    ragged = sorted((3099 + min(128 * (m + 1), 1000) for m in range(8)), reverse=True)
    assert beside.choose([k for k in ragged for _ in range(32)], 128, 132, 7 * 4099 * 8 * 128 * 4) is None
    assert beside.choose(tiles, 128, 132, 0) is None and beside.choose([], 128, 132, decode_bytes) is None


def test_plan_small_beside(monkeypatch):
    """Runs everywhere: ``small_beside`` on serving-step's layout (132 SMs): True leaves the model's SMs to the decode
    launch (the ws launch's persistent grid is the rest, its ``ws_programs``; the decode launch marked ``beside``),
    an int forces the count and the decode launch's splits are planned for those SMs; the default and False keep
    one launch after the other; a count out of range, or where no decode launch runs beside a persistent ws launch
    (none in the batch, a one-program-per-tile config, the decodes merged into a packed launch), is a ValueError,
    any other type a TypeError. The launch passes ``ws_programs`` as the grid (a recording stand-in kernel)."""
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 132)

    def plan(q_lens=SERVING_STEP[0], kv_lens=SERVING_STEP[1], **kw):
        return paged_plan.plan_paged_attention(q_lens, kv_lens, num_heads=32, num_kv_heads=8, head_dim=128,
                                               device="cpu", **kw)

    for knob in ({}, {"small_beside": False}):
        large, small = plan(**knob).launches
        assert large.ws_programs is None and not small.beside
    large, small = plan(small_beside=True).launches
    assert 86 <= large.ws_programs <= 96 and small.beside and not large.beside
    assert f"on {large.ws_programs} programs" in plan(small_beside=True).describe()
    large, small = plan(small_beside=46).launches
    assert large.ws_programs == 86 and small.beside
    # the decode class planned for 46 SMs: 240 programs a split overflow its 92 slots, so the splits fill waves
    assert small.n_items == 30 * paged_plan.wave_splits(30 * 8, paged_plan.SPLIT_PROGRAMS_PER_SM * 46)
    for bad in (0, 132, -3):
        with pytest.raises(ValueError, match="small_beside"):
            plan(small_beside=bad)
    with pytest.raises(ValueError, match="no decode launch"):
        plan([1024], [4096], small_beside=40)
    non_persistent = next(c for c in ws_launch.paged_configs(128) if not c.persistent)
    with pytest.raises(ValueError, match="not persistent"):
        plan(ws=non_persistent, small_beside=40)
    packed = next(c for c in ws_launch.paged_configs(128) if c.pack_gqa)
    with pytest.raises(ValueError, match="no decode launch"):
        plan(ws=packed, merge_small=True, small_beside=40)
    assert plan(ws=packed, merge_small=True, small_beside=True).launches[0].ws_programs is None
    with pytest.raises(TypeError, match="small_beside"):
        plan(small_beside=40.0)
    rec = _Recorder()
    monkeypatch.setattr(ws_launch, "gqa_fwd_ws_kernel", rec)
    pool = torch.zeros(10, 64, 2, 128, dtype=torch.float16)
    q = torch.zeros(300, 8, 128, dtype=torch.float16)
    items = torch.tensor([[0, 2], [0, 1], [0, 0]], dtype=torch.int32)
    for programs in (None, 5):
        ws_launch.launch_paged(large.ws, q, pool, pool, torch.empty_like(q), torch.tensor([0, 300], dtype=torch.int32),
                               torch.tensor([600], dtype=torch.int32), torch.arange(10, dtype=torch.int32)[None],
                               items, 64, 0.1, 1 << 30, 0, kv_plus_q=False, programs=programs)
    assert [grid for grid, _, _ in rec.calls] == [(24,), (5,)]


def _share_keys(q_len, kv_len, m, share, shares, block_n, wl, wr):
    """Keys ``[lo, hi)`` of share ``share`` of query block m (``ws_kernel._round_work``'s arithmetic)."""
    p0 = kv_len - q_len + m * ws_launch.BLOCK_M
    lo, hi = max(p0 - wl, 0), min(p0 + ws_launch.BLOCK_M - 1 + wr + 1, kv_len)
    n_lo = lo // block_n * block_n
    n_hi = hi if hi > lo else n_lo
    per = math.ceil(math.ceil((n_hi - n_lo) / block_n) / shares) * block_n
    start = min(n_lo + share * per, n_hi)
    return start, min(start + per, n_hi)


@pytest.mark.parametrize("shares", [3, 7])
@pytest.mark.parametrize("mask", ["causal", "causal-w100", "full-w64-w200"])
def test_tail_split_merge(mask, shares):
    """Runs everywhere (the combine through the interpreter): partials written as ``ws_kernel._store_partial``
    documents (each share's rows normalized by their own sum, base-2 lse, -inf and zeros where the share has no
    key; at workspace row ((block, token, head), share)) for a plan's split blocks, merged by ``PagedSplits.merge``
    with sinks, equal the reference on those blocks' rows and leave every other row alone. The 64 / 128-key tiles of
    D = 64: 3 shares of 1-6 tiles, 7 shares with empty ones."""
    causal, wl, wr = MASKS[mask]
    wl, wr = paged_plan.window_bounds(causal, wl, wr)
    q_lens, kv_lens = TAIL_LAYOUT
    h, h_kv, d, sm_scale = 2, 1, 64, 0.125
    cfg = ws_launch.PAGED_DEFAULTS[d]
    plan = paged_plan.plan_paged_attention(q_lens, kv_lens, num_heads=h, num_kv_heads=h_kv, head_dim=d, ws=cfg,
                                           ws_tail=(3, shares), is_causal=causal, window_size_left=MASKS[mask][1],
                                           window_size_right=MASKS[mask][2], device=runtime.device())
    (large,) = [ln for ln in plan.launches if ln.kind == "large"]
    sp = large.ws_splits
    gen = testing.generator(11)
    q = torch.randn(sum(q_lens), h, d, generator=gen)
    keys = [torch.randn(n, h_kv, d, generator=gen) for n in kv_lens]
    vals = [torch.randn(n, h_kv, d, generator=gen) for n in kv_lens]
    sinks = torch.randn(h, generator=gen)
    starts = [sum(q_lens[:b]) for b in range(len(q_lens))]
    part_o = torch.full(sp.part_o.shape, float("nan"))
    part_lse = torch.full(sp.part_lse.shape, float("nan"))
    want = torch.full((sum(q_lens), h, d), float("nan"), dtype=torch.float64)
    for b, m, share, blk in large.ws_items.tolist():
        if blk < 0:
            continue
        tokens = torch.arange(m * 128, m * 128 + 128)
        pos = kv_lens[b] - q_lens[b] + tokens
        j = torch.arange(kv_lens[b])
        visible = (j[None] >= pos[:, None] - wl) & (j[None] <= pos[:, None] + wr)
        lo, hi = _share_keys(q_lens[b], kv_lens[b], m, share, shares, cfg.block_n, wl, wr)
        mine = visible & (j[None] >= lo) & (j[None] < hi)
        for head in range(h):
            sc = q[starts[b] + tokens, head] @ keys[b][:, head * h_kv // h].T * sm_scale
            lse = torch.logsumexp(sc.masked_fill(~mine, float("-inf")), dim=1)
            p = torch.exp(sc - torch.where(torch.isinf(lse), 0, lse)[:, None]) * mine
            rows = ((blk * 128 + tokens - m * 128) * h + head) * shares + share
            part_o[rows] = p @ vals[b][:, head * h_kv // h]
            part_lse[rows] = lse / torch.log(torch.tensor(2.0))
            if share == 0:  # the whole block's reference, the sink in its denominator
                full = sc.double().masked_fill(~visible, float("-inf"))
                mx = torch.maximum(full.max(dim=1).values, sinks[head].double())
                w = torch.exp(full - mx[:, None])
                den = w.sum(dim=1) + torch.exp(sinks[head].double() - mx)
                want[starts[b] + tokens, head] = (w @ vals[b][:, head * h_kv // h].double()) / den[:, None]
    dev = runtime.device()
    splits = ws_launch.PagedSplits(shares, sp.block_start, part_o.to(dev), part_lse.to(dev))
    out = torch.full((sum(q_lens), h, d), float("nan"), dtype=torch.float16, device=dev)
    splits.merge(out, sinks.to(dev))
    split_rows = ~torch.isnan(want[:, 0, 0])
    assert int(split_rows.sum()) == 3 * 128
    torch.testing.assert_close(out.cpu().double()[split_rows], want[split_rows], atol=2e-3, rtol=2e-3)
    assert out[~split_rows.to(dev)].isnan().all()


def test_default_rule(monkeypatch):
    """Runs everywhere: dense / varlen calls take the D = 128 default (block-major where requests are equally
    long, sorted requests otherwise) when their query blocks visit >= MIN_BLOCK_KEYS keys and their tiles reach
    7 / 8 of the SMs, the long-block default from LONG_BLOCK_KEYS keys (16-bit); every other call stays on the
    Triton kernel (None)."""
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 132)
    cfg = ws_launch.default_config(_varlen_problem())
    assert cfg == ws_launch.CONFIGS[128][0] and cfg.block_major and cfg.lpt
    assert ws_launch.default_config(_varlen_problem(ragged=True)) == cfg
    # fp8: the same where requests are equally long, the 128-key tile where they are not
    assert ws_launch.default_config(_varlen_problem(dtype=torch.float8_e4m3fn)) == cfg
    assert ws_launch.default_config(_varlen_problem(dtype=torch.float8_e4m3fn, ragged=True)) == \
        ws_launch.FP8_RAGGED_DEFAULT
    assert ws_launch.default_config(_varlen_problem(window=256)) is None  # 384-key blocks
    # 16-bit blocks visiting LONG_BLOCK_KEYS keys or more: the 128-key tile with K freed first; fp8 keeps its rule
    assert ws_launch.default_config(_varlen_problem(s=1024)) == ws_launch.LONG_BLOCK_DEFAULT
    assert ws_launch.default_config(_varlen_problem(s=2048, window=1024)) == ws_launch.LONG_BLOCK_DEFAULT
    assert ws_launch.default_config(_varlen_problem(s=2048, window=512)) == cfg  # 640-key blocks
    assert ws_launch.default_config(_varlen_problem(s=1024, dtype=torch.float8_e4m3fn)) == cfg
    assert ws_launch.default_config(_varlen_problem(d=64)) is None
    assert ws_launch.default_config(_varlen_problem(softcap=30.0)) is None
    # 4 query blocks x heads: 116 tiles reach 7 / 8 of 132 SMs, 112 do not
    assert ws_launch.default_config(_varlen_problem(heads=29, batch=1)) == cfg
    assert ws_launch.default_config(_varlen_problem(heads=28, batch=1)) is None


def test_rope_default_rule(monkeypatch):
    """Runs everywhere: a 16-bit RoPE call the kernel would serve without RoPE runs it after ``prerotated`` when the
    rotation covers the head dim; partial rotary dims, fp8 and ``forced(rope_ws=False)`` keep the Triton kernel."""
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 132)
    monkeypatch.setattr(ws_launch, "_tensors_ok", lambda *_: True)  # (a Hopper GPU's answer, here on any machine)
    table = torch.empty(512, 64)
    full = dataclasses.replace(_varlen_problem(), rope_cos=table, rope_sin=table, rotary_dim=128)
    assert fwd.ws_serves(full) and fwd.ws_default(full) == ws_launch.CONFIGS[128][0]
    assert fwd.ws_default(dataclasses.replace(full, rotary_dim=64)) is None
    with fwd.forced(rope_ws=False):
        assert fwd.ws_default(full) is None
    fp8 = dataclasses.replace(_varlen_problem(dtype=torch.float8_e4m3fn), rope_cos=table, rope_sin=table,
                              rotary_dim=128)
    assert not fwd.ws_serves(fp8)


def test_paged_plan_default_per_head_dim(monkeypatch):
    """Runs everywhere: a paged plan's large class takes its head dim's ``PAGED_DEFAULTS`` config where the tiles
    reach 7 / 8 of the SMs, whatever the blocks' key spans (qwen35-9b-rope's >= 32 k keys a block, a short request
    beside them, a left window); too few tiles, or ``ws=False``, leave it on the Triton kernel."""
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 132)
    for d in (64, 128, 256):
        for q_lens, kv_lens, window in (([512] * 8, [4096] * 8, -1), ([1024] * 8, [33792] * 8, -1),
                                        ([1024] * 7 + [256], [33792] * 7 + [4352], -1),
                                        ([1024] * 8, [33792] * 8, 4096)):
            plan = paged_plan.plan_paged_attention(q_lens, kv_lens, num_heads=32, num_kv_heads=8, head_dim=d,
                                                   window_size_left=window, device="cpu")
            assert [ln.ws for ln in plan.launches if ln.kind == "large"] == [ws_launch.PAGED_DEFAULTS[d]]
    few = paged_plan.plan_paged_attention([256], [4096], num_heads=32, num_kv_heads=8, head_dim=128, device="cpu")
    off = paged_plan.plan_paged_attention([512] * 8, [4096] * 8, num_heads=32, num_kv_heads=8, head_dim=128,
                                          ws=False, device="cpu")
    assert all(ln.ws is None for ln in few.launches + off.launches)


def test_packed_merge_default(monkeypatch):
    """Runs everywhere: on 132 SMs a D = 128 mixed batch whose prefill gives the unpacked config too few tiles
    (llama-8b-noncausal: 64) runs packed with its decode requests in the one ws launch (120 tiles); too few decode
    requests to reach 7 / 8 of the SMs, key spans the Triton plan would split, ``merge_small=False``, D = 64, and
    batches the unpacked rule already takes keep their earlier plans."""
    monkeypatch.setattr(ws_launch.runtime, "num_sms", lambda: 132)

    def plan(q_lens, kv_lens, heads=(32, 8, 128), **kw):
        return paged_plan.plan_paged_attention(q_lens, kv_lens, num_heads=heads[0], num_kv_heads=heads[1],
                                               head_dim=heads[2], is_causal=False, device="cpu", **kw)

    (ln,) = plan([256] + [1] * 7, [512] * 8).launches
    assert ln.ws == paged_plan.PACKED_MERGE_DEFAULTS[128]
    assert sorted(ln.ws_items[:, 0].tolist()) == [0] * 8 + list(range(1, 8))  # 256 / 32 blocks, one per decode
    assert set(ln.items[:, 0].tolist()) == set(range(8))  # (the Triton fallback: the same requests, one launch)
    assert all(ln.ws is None for ln in plan([256] + [1] * 3, [512] * 4).launches)  # 88 tiles
    assert all(ln.ws is None for ln in plan([256] + [1] * 7, [2048] * 8).launches)  # keys the Triton plan splits
    assert all(ln.ws is None for ln in plan([256] + [1] * 7, [512] * 8, merge_small=False).launches)
    assert all(ln.ws is None for ln in plan([256] + [1] * 7, [512] * 8, heads=(32, 8, 64)).launches)
    mixed = plan([1024] + [1] * 7, [4096] * 8).launches  # serving-step-like: the unpacked default, two launches
    assert [ln.ws for ln in mixed] == [ws_launch.PAGED_DEFAULTS[128], None]


def test_config_knobs_that_need_the_overlap():
    """Runs everywhere: the pingpong turns, the early K release and the lazy rescale exist only in the overlap
    consumer; a config asking for them without it is refused when it is made, not at compile time."""
    for knob in ("pingpong", "early_k_release", "lazy_rescale"):
        with pytest.raises(ValueError, match="overlap"):
            ws_launch.WsConfig(64, 2, **{knob: True})
    assert ws_launch.WsConfig(64, 2, True, early_k_release=True).name == "ws-n64s2-ov-kr"
    assert ws_launch.WsConfig(128, 2, True, early_k_release=True, lazy_rescale=True).name == "ws-n128s2-ov-kr-l"


def test_q_in_registers_binds_its_columns(monkeypatch):
    """Runs everywhere: a ``q_registers`` config passes its columns as ``Q_REGS`` on a 16-bit call (D = 128: all of
    Q; D = 256: its first 128 columns) and 0 on an fp8 call (Q stays in shared memory); a count that is not a
    multiple of 64 columns is refused when the config is made."""
    rec = _Recorder()
    monkeypatch.setattr(ws_launch, "gqa_fwd_ws_kernel", rec)
    dev = runtime.device()
    for d, cfg in ((128, next(c for c in ws_launch.CONFIGS[128] if c.q_registers)),
                   (256, next(c for c in ws_launch.CONFIGS[256] if c.q_registers))):
        q = torch.zeros(2, 300, 8, d, dtype=torch.bfloat16, device=dev)
        k = torch.zeros(2, 500, 2, d, dtype=torch.bfloat16, device=dev)
        ws_launch.launch(fwd.Problem(q, k, k, torch.empty_like(q), varlen=False, batch=2, max_q=300, max_kv=500,
                                     wr=0), cfg)
        assert rec.calls[-1][2]["Q_REGS"] == 128 and cfg.name.endswith("-qr128")
        scales = [torch.ones((2, 2), dtype=torch.float32, device=dev) for _ in range(3)]
        ws_launch.launch(fwd.Problem(q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn),
                                     torch.empty_like(q), varlen=False, batch=2, max_q=300, max_kv=500, wr=0,
                                     q_scale=scales[0], k_scale=scales[1], v_scale=scales[2]), cfg)
        assert rec.calls[-1][2]["Q_REGS"] == 0
    with pytest.raises(ValueError, match="multiple of 64"):
        ws_launch.WsConfig(32, 4, True, q_registers=96)


def test_lazy_rescale_only_over_copies_of_64_rows_or_more(monkeypatch):
    """Runs everywhere: the lazy-rescale configs (the D = 128 paged and long-block defaults among them) build it on
    dense / varlen calls and over paged key tiles copied in pieces of 64 rows or more (pages of 64, 128, 256
    tokens), the eager rescale over smaller copies (pages of 16, 48 tokens: slower lazy on the H100); the eager
    configs never."""
    assert ws_launch.PAGED_DEFAULTS[128].lazy_rescale and ws_launch.LONG_BLOCK_DEFAULT.lazy_rescale
    rec = _Recorder()
    monkeypatch.setattr(ws_launch, "gqa_fwd_ws_kernel", rec)
    q = torch.zeros(300, 8, 128, dtype=torch.float16)
    items = torch.tensor([[0, 2], [0, 1], [0, 0]], dtype=torch.int32)
    for cfg in (ws_launch.PAGED_DEFAULTS[128], ws_launch.WsConfig(128, 2, True, early_k_release=True)):
        ws_launch.launch(fwd.Problem(q, q[:, :2], q[:, :2], torch.empty_like(q), varlen=True, batch=1, max_q=300,
                                     max_kv=300, cu_q=torch.tensor([0, 300], dtype=torch.int32),
                                     cu_kv=torch.tensor([0, 300], dtype=torch.int32)), cfg)
        lazy = [rec.calls[-1][2]["LAZY_RESCALE"]]
        for page in (16, 48, 64, 128, 256):
            pool = torch.zeros(-(-640 // page), page, 2, 128, dtype=torch.float16)
            table = torch.arange(pool.shape[0], dtype=torch.int32)[None]
            ws_launch.launch_paged(cfg, q, pool, pool, torch.empty_like(q), torch.tensor([0, 300], dtype=torch.int32),
                                   torch.tensor([600], dtype=torch.int32), table, items, page, 0.1, 1 << 30, 0,
                                   kv_plus_q=False)
            lazy.append(rec.calls[-1][2]["LAZY_RESCALE"])
        assert lazy == ([True, False, False, True, True, True] if cfg.lazy_rescale else [False] * 6), cfg.name


def test_last_v_zeroed_in_place_only_where_its_buffers_do_not_fit():
    """Runs everywhere: every paged config fits in shared memory with its way of zeroing the last V tile's rows
    past the keys; the D = 64 default keeps the per-consumer buffers, the D = 128 / 256 defaults (128 / 64-key tiles)
    zero in place (their rings leave no room for the buffers)."""
    for d in ws_launch.CONFIGS:
        for cfg in ws_launch.paged_configs(d):
            in_place = ws_launch.tail_in_place(cfg, d)
            assert ws_launch.smem_bytes(cfg, d, not in_place) <= ws_launch.SMEM_LIMIT, (d, cfg.name)
    assert {d: ws_launch.tail_in_place(cfg, d) for d, cfg in ws_launch.PAGED_DEFAULTS.items()} == {
        64: False, 128: True, 256: True}
    wide = ws_launch.WsConfig(64, 2, True)
    assert wide in ws_launch.paged_configs(256) and ws_launch.tail_in_place(wide, 256)
