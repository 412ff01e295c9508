"""GQADenseFwd against its reference: every seed row (shrunk on CPU, full size on the GPU), the cost model
against the page, edge cases (GQA ratios, head dims, masks, softcap, RoPE, fp8, split-KV), bad input."""

import pytest
import torch

from attnops.attn_core import gqa_dense_fwd
from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.gqa_dense_fwd.spec import DECLARED_SHAPE_DIFFERS, SPEC, make_case
from attnops.kernel_utils import reliability, runtime, testing
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.pytest_plugin import row_seed, run_offline_compile, seed_rows

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
DECODE = ROWS["llama-8b-4k/f16"]
DECODE_BF16 = ROWS["llama-8b-4k/bf16"]
PREFILL = ROWS["prefill-rope/f16"]
FP8 = ROWS["prefill-scaled/fp8e4m3/f16"]


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path of each seed row at interpreter size (bf16 rows: the interpreter rounds bf16 wrongly)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    """The benchmark's exact inputs (including the split-KV choice at 132 SMs)."""
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_cost_reproduces_the_published_sol(w):
    """FLOPs/bytes at full size (meta tensors) give the page's SOL and bound at the page's TileOPs time;
    the chunked rows are priced at their declared S_q = 128, which the page did not time."""
    t = w.published.tileops_ms * 1e-3
    cost = SPEC.cost(make_case(w, torch.device("meta")))
    if w.name in DECLARED_SHAPE_DIFFERS:
        assert abs(cost.sol(t) - w.published.sol) > 0.05  # declared S_q = 128 ...
        cost = SPEC.cost(make_case(w, torch.device("meta"), s_q=1))  # ... but the page timed S_q = 1
    assert abs(cost.sol(t) - w.published.sol) <= 0.006, (cost.sol(t), w.published.sol)
    assert cost.bound(t) == w.published.bound


def test_cost_worked_example():
    """spec README §8: llama-8b-4k f16 -> 2.169 GFLOP, 537.4 MB."""
    cost = SPEC.cost(make_case(DECODE, torch.device("meta")))
    assert round(cost.flops / 1e9, 3) == 2.169 and round(cost.bytes / 1e6, 1) == 537.4
    assert cost.roof == "tensor_core.fp16"
    assert SPEC.cost(make_case(FP8, torch.device("meta"))).roof == "tensor_core.fp8"


# --- edge cases -------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [(4, 4), (8, 4), (10, 2), (22, 1), (48, 1), (71, 1)],
                         ids=lambda h: f"H{h[0]}-Hkv{h[1]}")
def test_decode_gqa_ratios(heads):
    """GQA ratios 1..71: all G query heads of a KV head are packed into one program's rows."""
    SPEC.check(make_case(DECODE, DEV, shrink=True, seed=1, heads=heads, head_dim=64, s_kv=37))


@pytest.mark.parametrize("head_dim", [64, 128, 256, 512, 80])
def test_prefill_head_dims(head_dim):
    """Causal prefill with S_q < S_kv per head-dim class (80: a non-power-of-two, masked columns)."""
    SPEC.check(make_case(PREFILL, DEV, shrink=True, seed=2, head_dim=head_dim, s_q=9, s_kv=21,
                         pos_encoding_mode="none", rotary_dim=None, heads=(4, 2), batch=1))


@pytest.mark.parametrize("fused", [False, True], ids=["combine-kernel", "merged-in-kernel"])
@pytest.mark.parametrize("heads,num_splits", [((8, 2), 2), ((8, 2), 3), ((8, 2), 8), ((71, 1), 3)],
                         ids=["G4-2", "G4-3", "G4-8", "G71-3"])
def test_decode_split_kv_and_combine(heads, num_splits, fused):
    """Split-KV as chosen for small grids, merged by the combine kernel or by the last split of each block;
    8 splits of 45 keys leaves empty splits; G = 71 spans several m-blocks (one counter each). The combine
    kernel merges each row's splits in one step (3 splits: one padded slot) over 64 columns a program."""
    with fwd.forced(num_splits=num_splits, fused_combine=fused):
        SPEC.check(make_case(DECODE, DEV, shrink=True, seed=3, heads=heads, head_dim=64, s_kv=45))


@pytest.mark.parametrize(
    "params,num_splits",
    [
        ({"is_causal": True, "window_size_left": 5}, 1),
        ({"is_causal": False, "window_size_left": 3, "window_size_right": 2}, 3),
        ({"is_causal": False, "window_size_right": 0}, 1),
        ({"is_causal": True, "window_size_left": 0}, 3),
        ({"is_causal": False, "softcap": 5.0}, 1),
        ({"is_causal": True, "softcap": 0.5, "window_size_left": 9, "sm_scale": 0.3}, 3),
    ],
    ids=["causal-wl5", "wl3-wr2-split3", "wr0", "causal-wl0-split3", "softcap5", "causal-softcap-wl9-scale-split3"],
)
def test_masks_softcap_scale(params, num_splits):
    """Windows (bottom-right), softcap and sm_scale on a prefill with S_q < S_kv, with and without splits."""
    with fwd.forced(num_splits=num_splits):
        SPEC.check(make_case(DECODE, DEV, shrink=True, seed=4, s_q=13, s_kv=30, head_dim=64, **params))


def test_more_queries_than_keys_non_causal():
    """S_q > S_kv is legal without causal / RoPE."""
    SPEC.check(make_case(DECODE, DEV, shrink=True, seed=5, s_q=40, s_kv=11, head_dim=64, is_causal=False))


@pytest.mark.parametrize("layout,rotary_dim", [("neox", None), ("interleaved", None), ("neox", 32),
                                               ("interleaved", 16)])
def test_rope_layouts(layout, rotary_dim):
    SPEC.check(make_case(PREFILL, DEV, shrink=True, seed=6, rope_layout=layout, rotary_dim=rotary_dim,
                         head_dim=64))


@pytest.mark.parametrize(
    "params",
    [{}, {"pos_encoding_mode": "rope", "rotary_dim": 32}, {"softcap": 20.0, "window_size_left": 7},
     {"is_causal": False}],
    ids=["plain", "rope", "softcap-window", "non-causal"],
)
def test_fp8_to_f16(params):
    """fp8 inputs with per-[B, H_kv] scales (varied per request and head), f16 output."""
    SPEC.check(make_case(FP8, DEV, shrink=True, seed=7, batch=2, **params))


def test_fp8_upcast_config_and_decode():
    """The fp8 path without fp8 tensor-core QK (fp8_dot=False) and the decode class with fp8 inputs."""
    cfg = fwd.configs_for(128, 512, fp8=True)[-1]
    assert not cfg.fp8_dot
    with fwd.forced(config=cfg):
        SPEC.check(make_case(FP8, DEV, shrink=True, seed=8))
    with fwd.forced(num_splits=2):
        SPEC.check(make_case(FP8, DEV, shrink=True, seed=9, s_q=1, s_kv=40))


def test_rope_keys_rotated_in_a_prepass():
    """Dense prefill with RoPE (partial rotary dim) and the keys rotated by the pre-pass kernel."""
    with fwd.forced(rope_key_prepass=True):
        SPEC.check(make_case(PREFILL, DEV, shrink=True, seed=21, batch=2, heads=(4, 2)))


@pytest.mark.parametrize("head_dim,decode", [(64, False), (128, False), (64, True), (128, True)])
def test_every_config_interpreter(head_dim, decode):
    """Each tile config of the table (the GPU test repeats this for every class and dtype)."""
    rows = 4 if decode else 512
    for cfg in fwd.configs_for(head_dim, rows):
        with fwd.forced(config=cfg):
            SPEC.check(make_case(DECODE, DEV, shrink=True, seed=10, s_q=1 if decode else 20, s_kv=33,
                                 head_dim=head_dim, heads=(4, 1)))


def test_tile_by_programs_per_sm(monkeypatch):
    """The D = 128 prefill tile: 64x32 (three programs per SM) where the grid has more than two programs per SM,
    64x64 where it has fewer (``FEW_PROGRAMS_CONFIGS``); fp8 keeps its own table either way. Checked at the
    launch: the config ``_launch`` receives for a small and a large grid on a stand-in of 132 SMs."""
    assert fwd.configs_for(128, 512)[0] == fwd.FwdConfig(64, 32, 4, 3)
    assert fwd.configs_for(128, 512, few_programs=True)[0] == fwd.FwdConfig(64, 64, 4, 3)
    assert set(fwd.configs_for(128, 512, few_programs=True)) == set(fwd.configs_for(128, 512))
    assert fwd.configs_for(128, 512, fp8=True, few_programs=True) == fwd.configs_for(128, 512, fp8=True)
    assert fwd.configs_for(64, 512, few_programs=True) == fwd.configs_for(64, 512)
    monkeypatch.setattr(runtime, "num_sms", lambda: 132)
    got = []
    monkeypatch.setattr(fwd, "_launch", lambda p, cfg: got.append(cfg))
    monkeypatch.setattr(fwd, "ws_default", lambda p: None)  # (on a Hopper GPU the large grid would take the ws kernel)
    for s_q, heads in ((128, (4, 1)), (1024, (32, 8))):  # blocks of 64 packed rows x H_kv: 8 and 512 programs
        q = torch.zeros(1, s_q, heads[0], 128, dtype=torch.float16)
        k = torch.zeros(1, s_q, heads[1], 128, dtype=torch.float16)
        fwd.launch(fwd.Problem(q, k, k, torch.empty_like(q), varlen=False, batch=1, max_q=s_q, max_kv=s_q))
    assert [c.block_n for c in got] == [64, 32]


def test_strided_views():
    """q/k/v as head-sliced views of fused tensors (only the last dim contiguous). The views are built
    after ``fresh()``, whose clone would make them dense."""
    case = make_case(DECODE, DEV, shrink=True, seed=11, s_q=5, s_kv=20, head_dim=64, heads=(4, 2))
    ours = case.fresh()
    a = ours.inputs
    B, S_kv = a["k"].shape[:2]
    kv = testing.randn((B, S_kv, 6, 64), torch.float16, DEV, testing.generator(1))
    qq = testing.randn((B, 5, 7, 64), torch.float16, DEV, testing.generator(2))
    kv[:, :, 0:2], kv[:, :, 3:5], qq[:, :, 1:5] = a["k"], a["v"], a["q"]
    a["k"], a["v"], a["q"] = kv[:, :, 0:2], kv[:, :, 3:5], qq[:, :, 1:5]
    assert not (a["q"].is_contiguous() or a["k"].is_contiguous() or a["v"].is_contiguous())
    SPEC.compare(ours.run(SPEC.fn), case.fresh().run(SPEC.reference), case)


def test_custom_op_schema_and_fake():
    """torch.library.opcheck of attnops::gqa_dense_fwd on the arguments the public function passes: schema (no
    mutation) and the fake (meta) impl (f16: the schema check cannot compare fp8 tensors on the CPU)."""
    from attnops.attn_core.gqa_dense_fwd import op

    case = make_case(DECODE, DEV, shrink=True, seed=14, s_q=3, s_kv=20, heads=(4, 2), head_dim=64,
                     softcap=10.0, pos_encoding_mode="rope", rotary_dim=32)
    testing.opcheck_as_called(op, "_dense", lambda: case.run(gqa_dense_fwd))


def test_empty_batch_and_empty_keys():
    SPEC.check(make_case(DECODE, DEV, shrink=True, seed=12, batch=0, head_dim=64))
    SPEC.check(make_case(DECODE, DEV, shrink=True, seed=12, s_q=3, s_kv=0, head_dim=64, is_causal=False))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_key_gives_nan_rows_in_kernel_and_reference():
    """A NaN in k[b, j, g] makes o NaN for every row of batch element b that sees key j, on the heads of KV head g,
    in the kernel and in the reference (found by test_attn_core_reliability.py: the reference's ``z > 0`` test
    turned a NaN softmax denominator into p = 0, so it returned zeros there)."""
    case = make_case(DECODE, DEV, shrink=True, seed=13, batch=2, s_q=5, s_kv=9, heads=(4, 2), head_dim=64)
    case.inputs["k"][1, 0, 0, 3] = float("nan")  # key 0: seen by every row (bottom-right causal)
    for who, fn in (("kernel", SPEC.fn), ("reference", SPEC.reference)):
        o = case.fresh().run(fn)["o"]
        assert bool(o[1, :, :2].isnan().all()), f"{who}: NaN key did not give NaN rows"
        assert not bool(o[0].isnan().any()) and not bool(o[1, :, 2:].isnan().any()), f"{who}: NaN spread"


GPU_SWEEP = [(dt, d) for dt in ("f16", "fp8") for d in (64, 128, 256, 512)] + [("bf16", 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim", GPU_SWEEP, ids=lambda x: str(x))
def test_every_decode_config_gpu(dtype, head_dim):
    """Every decode-class config on the GPU (mma.sync tiles, fp8 MMA variant), with softcap, a window and
    3 forced splits + combine. The prefill-class configs run in test_gqa_varlen_fwd's GPU sweep (same kernel).
    One compile per config: the sweep stays a few minutes."""
    w = {"f16": DECODE, "bf16": DECODE_BF16, "fp8": FP8}[dtype]
    for cfg in fwd.configs_for(head_dim, 4, fp8=dtype == "fp8"):
        with fwd.forced(config=cfg, num_splits=3):
            case = make_case(w, DEV, seed=13, batch=3, s_q=1, s_kv=1000, heads=(16, 4), head_dim=head_dim,
                             window_size_left=700, softcap=30.0)
            try:
                SPEC.check(case)
            except AssertionError as e:
                raise AssertionError(f"config {cfg.name}: {e}") from None


def test_kernel_compiles_for_sm90_without_spills():
    """The GPU-only paths (wgmma, fp8 MMA, cp.async pipelining, TMA descriptors, the in-kernel split merge, no
    EXACT_DOT) through Triton's real sm_90 pipeline and ptxas, offline: every D = 128 class compiles, fits
    shared memory and does not spill."""
    listing = run_offline_compile(__file__, "sm90_compile", "--dims", "128")
    assert "SPILL" not in listing and "FAIL" not in listing, listing


FUZZ_SEEDS = reliability.fuzz_seeds(SPEC, reliability.fuzz_cases(16))


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_case_matches_reference(seed):
    """Seeded random valid calls (``spec.fuzz``): a few in CI, ATTNOPS_FUZZ_CASES=n for more."""
    reliability.run_fuzz_case(SPEC, seed)


def test_repeated_calls_are_bitwise_identical():
    """No atomics: split partials are merged in a fixed order."""
    assert SPEC.deterministic
    for seed in FUZZ_SEEDS[:3]:
        reliability.assert_deterministic(SPEC, SPEC.fuzz(seed, DEV))
    with fwd.forced(num_splits=3):
        reliability.assert_deterministic(SPEC, SPEC.fuzz(FUZZ_SEEDS[3], DEV))


# --- bad input --------------------------------------------------------------------------------------


def _bad(row=DECODE, **changes):
    case = make_case(row, DEV, shrink=True, s_q=4, s_kv=16, head_dim=64, heads=(4, 2), batch=2)
    case.inputs.update(changes)
    return case.inputs


def _t(shape, dtype=torch.float16):
    return torch.randn(shape, device=DEV).to(dtype)


BAD_INPUTS = {
    "q f32": (lambda: _bad(q=_t((2, 4, 4, 64), torch.float32)), TypeError, "q: expected dtype"),
    "k dtype differs": (lambda: _bad(k=_t((2, 16, 2, 64), torch.bfloat16)), TypeError, "k: expected dtype float16"),
    "k 3 dims": (lambda: _bad(k=_t((16, 2, 64))), ValueError, "k: expected 4 dims"),
    "v shape": (lambda: _bad(v=_t((2, 15, 2, 64))), ValueError, "v: expected shape"),
    "H_kv does not divide H": (lambda: _bad(k=_t((2, 16, 3, 64)), v=_t((2, 16, 3, 64))), ValueError,
                               "k: H_kv=3 must divide"),
    "head dim 8": (lambda: _bad(q=_t((2, 4, 4, 8)), k=_t((2, 16, 2, 8)), v=_t((2, 16, 2, 8))), ValueError,
                   "q: head dim must lie in"),
    "q last dim strided": (lambda: _bad(q=_t((2, 4, 64, 4)).transpose(2, 3)), ValueError,
                           "q: the last 1 dims must be contiguous"),
    "causal S_q > S_kv": (lambda: _bad(q=_t((2, 20, 4, 64))), ValueError, "q: S_q=20 > S_kv=16"),
    "out_dtype for f16": (lambda: _bad(out_dtype=torch.bfloat16), TypeError, "out_dtype: must be None"),
    "scale for f16": (lambda: _bad(q_scale=torch.ones(2, 2, device=DEV)), ValueError, "q_scale: only for float8"),
    "fp8 without scales": (lambda: _bad(FP8, q_scale=None), ValueError, "q_scale: required"),
    "fp8 without out_dtype": (lambda: _bad(FP8, out_dtype=None), TypeError, "out_dtype: fp8 inputs need"),
    "fp8 into fp8": (lambda: _bad(FP8, out_dtype=E4M3), TypeError, "out_dtype: fp8 inputs need"),
    "scale shape": (lambda: _bad(FP8, k_scale=torch.ones(2, device=DEV)), ValueError, "k_scale: expected 2 dims"),
    "scale dtype": (lambda: _bad(FP8, v_scale=torch.ones(1, 1, device=DEV, dtype=torch.float64)), TypeError,
                    "v_scale: expected dtype float32"),
    "rope without tables": (lambda: _bad(pos_encoding_mode="rope"), ValueError, "rope_cos, rope_sin: required"),
    "tables without rope": (lambda: _bad(rope_cos=_t((16, 32)), rope_sin=_t((16, 32))), ValueError,
                            "only with pos_encoding_mode='rope'"),
    "rope table dtype": (lambda: _bad(pos_encoding_mode="rope", rope_cos=_t((16, 32), torch.float32),
                                      rope_sin=_t((16, 32), torch.float32)), TypeError, "rope_cos: expected dtype"),
    "rope table width": (lambda: _bad(pos_encoding_mode="rope", rope_cos=_t((16, 16)), rope_sin=_t((16, 16))),
                         ValueError, "rope_cos: expected shape"),
    "rope table short": (lambda: _bad(pos_encoding_mode="rope", rope_cos=_t((15, 32)), rope_sin=_t((15, 32))),
                         ValueError, "rope_cos: 15 rows cannot cover"),
    "rotary_dim odd": (lambda: _bad(pos_encoding_mode="rope", rotary_dim=31, rope_cos=_t((16, 15)),
                                    rope_sin=_t((16, 15))), ValueError, "rotary_dim: must be even"),
    "rope layout": (lambda: _bad(pos_encoding_mode="rope", rope_layout="gptj", rope_cos=_t((16, 32)),
                                 rope_sin=_t((16, 32))), ValueError, "rope_layout: expected"),
    "pos mode": (lambda: _bad(pos_encoding_mode="alibi"), ValueError, "pos_encoding_mode: expected"),
    "negative softcap": (lambda: _bad(softcap=-1.0), ValueError, "softcap: must be None or >= 0"),
    "window -2": (lambda: _bad(window_size_left=-2), ValueError, "window_size_left: must be an int >= -1"),
    "sm_scale 0": (lambda: _bad(sm_scale=0.0), ValueError, "sm_scale: must be > 0"),
    "q not a tensor": (lambda: _bad(q=[1.0]), TypeError, "q: expected a torch.Tensor"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        gqa_dense_fwd(**make_inputs())
