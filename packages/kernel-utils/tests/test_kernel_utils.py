"""kernel-utils: the shared pieces every op relies on — checks, cost model, workload registry, acceptance
rules and the shared device functions (run through the interpreter on CPU)."""

import math

import pytest
import torch
import triton
from triton_probe_kernels import segment_of_kernel, to_e4m3_kernel

from attnops.kernel_utils import checks, cost, fp8, runtime, testing, workloads
from attnops.kernel_utils.opspec import Case
from attnops.kernel_utils.triton_fns import row_copy_config, segment_block

DEV = runtime.device()


def test_registry_holds_every_seed_row():
    rows = workloads.all_workloads()
    assert len(rows) == 223 and len({w.id for w in rows}) == 223
    assert len(workloads.workloads_for("GQAVarlenFwd")) == 39
    w = workloads.workloads_for("PagedKVCacheWriteFwd")[-1]
    assert w.dtypes() == [torch.float16, torch.float8_e4m3fn]
    assert w.published.best_peer() == ("vllm", 0.0132)
    with pytest.raises(KeyError):
        workloads.workloads_for("NoSuchOp")


def test_attention_flops_hand_counted():
    """Spec §8 formula on a hand-counted case: 2 heads, 3 scores, 2 rows, d = 4:
    2 · (3 · (8 + 8 + 5) + 2 · 4) = 142; softcap adds 3 per score. (Each op's spec test checks its rows
    against the page's published SOL.)"""
    assert cost.attention_flops(2, 3, 2, 4, 4) == 142
    assert cost.attention_flops(2, 3, 2, 4, 4, softcap=True) == 142 + 2 * 3 * 3


def test_sol_and_bound_rule():
    c = cost.Cost(flops=0, bytes=cost.HBM_EFF_BYTES_PER_S * 1e-3, roof="cuda_core.fp32")  # 1 ms at the roof
    assert c.sol(1e-3) == pytest.approx(1.0)
    assert c.bound(2e-3) == "mem"
    tiny = cost.Cost(flops=1e3, bytes=1e3, roof="cuda_core.fp32")
    assert tiny.bound(5e-6) == "lat"
    comp = cost.Cost(flops=cost.ROOF_EFF_FLOPS["tensor_core.bf16"] * 1e-3, bytes=1.0, roof="tensor_core.bf16")
    assert comp.bound(1e-3) == "comp" and comp.sol(2e-3) == pytest.approx(0.5)


def test_check_tensor_names_argument_expected_and_got():
    t = torch.zeros(2, 3, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"q: expected dtype bfloat16, got float16"):
        checks.check_tensor("q", t, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"q: expected shape \(2, 4\), got \(2, 3\)"):
        checks.check_tensor("q", t, shape=(2, 4))
    with pytest.raises(ValueError, match="q: the last 1 dims must be contiguous"):
        checks.check_tensor("q", t.t(), inner_contiguous=1)
    with pytest.raises(ValueError, match="cu: last entry must equal the packed length 5"):
        checks.check_cu_seqlens("cu", torch.tensor([0, 2, 4]), total=5)
    with pytest.raises(ValueError, match=r"idx: entries must lie in \[0, 4\), got 7"):
        checks.check_index_range("idx", torch.tensor([-1, 3, 7]), 0, 4, ignore_below=0)


def test_fp8_quantize_saturates_and_dequantize_multiplies():
    x = torch.tensor([1000.0, -1000.0, 1.0, 0.1])
    q = fp8.quantize_e4m3(x, torch.tensor([0.5]))
    assert q.float().tolist()[:3] == [448.0, -448.0, 2.0]
    assert fp8.dequantize_e4m3(q, 0.5).tolist()[0] == 224.0


def test_to_e4m3_device_function_is_bit_exact():
    """Every representable value, every midpoint (ties to even), saturation, signed zero, subnormals;
    ±inf saturate and NaN stays NaN, as the torch reference's clamp-then-cast does."""
    codes = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (codes[1:] + codes[:-1]) / 2
    gen = testing.generator(0)
    x = torch.cat([codes, mids, -mids, torch.randn(4096, generator=gen) * 100,
                   torch.tensor([0.0, -0.0, 449.0, 465.0, -1e9, 1e-30, math.inf, -math.inf, math.nan])])
    y = torch.empty(x.numel(), dtype=torch.float8_e4m3fn, device=DEV)
    to_e4m3_kernel[(triton.cdiv(x.numel(), 1024),)](x.to(DEV), y, x.numel(), BLOCK=1024)
    testing.assert_bitwise("to_e4m3", y, x.clamp(-448, 448).to(torch.float8_e4m3fn).to(DEV))


@pytest.mark.parametrize(
    "lengths", [[5], [3, 0, 4, 0, 0, 9], [0] * 300 + [7] + [1] * 200], ids=["one", "zeros", "wide"]
)
def test_segment_of_maps_rows_to_requests(lengths):
    """Zero-length requests never own a row; more than one SEGMENT_BLOCK of requests loops."""
    cu = testing.cu_seqlens(lengths, DEV)
    total = sum(lengths)
    out = torch.full((total,), -1, dtype=torch.int32, device=DEV)
    segment_of_kernel[(triton.cdiv(total, 64),)](cu, out, total, len(lengths), BLOCK=64,
                                                 SEGMENT_BLOCK=segment_block(len(lengths)))
    expected = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    assert torch.equal(out.cpu().long(), expected)


def test_row_copy_config_covers_the_sms():
    block_t, block_e, _ = row_copy_config(64, 1024, sms=132)
    assert (block_t, block_e) == (1, 1024)
    block_t, block_e, _ = row_copy_config(1 << 17, 576, sms=132)
    assert block_e == 1024 and block_t == 4


def test_block_table_distinct_pages_and_poisoned_tail():
    gen = testing.generator(1)
    table = testing.block_table([17, 0, 40], 16, 64, 5, gen, "cpu")
    used = torch.cat([table[0, :2], table[2, :3]])
    assert used.unique().numel() == 5 and bool((used >= 0).all())
    assert bool((table[0, 2:] == testing.UNUSED_PAGE).all()) and bool((table[1] == testing.UNUSED_PAGE).all())


def test_random_lengths_sum_and_zeros():
    lens = testing.random_lengths(20, 1000, testing.generator(2), zero_frac=0.3)
    assert sum(lens) == 1000 and len(lens) == 20 and 0 in lens


def test_acceptance_rules_reject_what_they_must():
    ref = torch.randn(64)
    lowp = ref + 1e-3 * torch.randn(64)
    testing.assert_close_dual("o", ref + 1e-3 * torch.randn(64), ref, lowp, floor=1e-4)
    with pytest.raises(AssertionError, match="rel. error"):
        testing.assert_close_dual("o", ref + 0.1, ref, lowp, floor=1e-4)
    nan = ref.clone()
    nan[3] = math.nan
    with pytest.raises(AssertionError):
        testing.assert_close_dual("o", nan, ref, lowp)
    with pytest.raises(AssertionError, match="1 of 64 elements differ"):
        testing.assert_bitwise("o", nan, ref)
    other_nan = nan.clone()
    other_nan[3] = -math.nan  # another sign bit
    testing.assert_bitwise("o", other_nan, nan, any_nan=True)
    with pytest.raises(AssertionError, match="1 of 64 elements differ"):
        testing.assert_bitwise("o", other_nan, nan)
    with pytest.raises(AssertionError, match="1 of 64 elements differ"):  # NaN where the reference is a number
        testing.assert_bitwise("o", nan, ref, any_nan=True)


def test_topk_compare_accepts_ties_and_rejects_duplicates():
    scores = torch.tensor([[0.0, 5.0, 5.0, 1.0, 3.0]])
    ref = torch.tensor([[1, 4]])
    testing.assert_topk_equivalent("idx", torch.tensor([[2, 4]]), ref, scores, pad=5)  # tie: 1 <-> 2
    with pytest.raises(AssertionError, match="duplicate"):
        testing.assert_topk_equivalent("idx", torch.tensor([[1, 1]]), ref, scores, pad=5)
    with pytest.raises(AssertionError, match="beyond ties"):
        testing.assert_topk_equivalent("idx", torch.tensor([[1, 3]]), ref, scores, pad=5)


def test_a_call_may_not_write_its_inputs():
    """``Case.run_untouched`` (what ``OpSpec.check`` runs): an input the call writes fails, the mutated outputs of
    an in-place op may change."""
    def add_into_x(x, y):
        x += 1
        return x + y

    case = Case({"x": torch.zeros(4), "y": torch.ones(4)}, ("z",))
    with pytest.raises(AssertionError, match="input x"):
        case.fresh().run_untouched(add_into_x)
    case.fresh().run_untouched(lambda x, y: x + y)
    inplace = Case({"x": torch.zeros(4), "y": torch.ones(4)}, ("x",), inplace=True)
    assert torch.equal(inplace.fresh().run_untouched(add_into_x)["x"], torch.ones(4))


def test_memo_remakes_after_an_input_changes():
    """``Case.memo`` (the specs' low-precision baselines): made once per state of the inputs; writing an input in
    place or replacing it makes it again."""
    made = []
    case = Case({"x": torch.zeros(4), "n": 3}, ("z",))

    def make():
        made.append(1)
        return case.inputs["x"].sum().item()

    assert case.memo("s", make) == 0 and case.memo("s", make) == 0 and len(made) == 1
    case.inputs["x"] += 1
    assert case.memo("s", make) == 4 and len(made) == 2
    case.inputs["x"] = torch.full((4,), 2.0)
    assert case.memo("s", make) == 8 and len(made) == 3


def test_randn_is_seeded_and_scaled():
    """``testing.randn``: the same generator seed gives the same values; scale and fp8 saturation apply."""
    a = testing.randn((64,), torch.float32, "cpu", testing.generator(5), scale=3.0)
    b = testing.randn((64,), torch.float32, "cpu", testing.generator(5), scale=3.0)
    assert torch.equal(a, b) and 1.0 < float(a.std()) < 6.0
    big = testing.randn((4096,), torch.float8_e4m3fn, "cpu", testing.generator(5), scale=1000.0)
    assert float(big.float().abs().max()) == 448.0


def test_climbing_scores_rise_by_the_step():
    """The lazy-rescale test input: base-2 scores of the chosen channels rise by ~``step`` every ``keys_a_step``
    keys (at the given positions) and stay within the noise between the steps; the other channels are untouched."""
    gen = testing.generator(3)
    q = testing.randn((2, 4, 64), torch.float32, "cpu", gen)
    k = testing.randn((300, 4, 64), torch.float32, "cpu", gen)
    k_before = k.clone()
    positions = torch.arange(300) + 40
    testing.climbing_scores(q[..., -16:], k[..., -16:], 64 ** -0.5, keys_a_step=96, step=12.0, positions=positions)
    assert bool((q[..., -16:] == 1).all()) and torch.equal(k[..., :-16], k_before[..., :-16])
    s2 = torch.einsum("thd,nhd->thn", q, k) * 64 ** -0.5 * 1.4426950408889634
    mean = lambda lo, hi: s2[..., lo - 40:hi - 40].mean().item()  # noqa: E731 (mean score of positions [lo, hi))
    assert abs(mean(100, 190) - mean(40, 90) - 12.0) < 1.0 and abs(mean(200, 280) - mean(100, 190) - 12.0) < 1.0


def test_fuzz_seeds_start_at_the_base(monkeypatch):
    """``ATTNOPS_FUZZ_BASE`` moves a run past the seeds an earlier run covered; an explicit base wins."""
    from types import SimpleNamespace

    from attnops.kernel_utils import reliability

    spec = SimpleNamespace(name="SomeOpFwd")
    monkeypatch.delenv("ATTNOPS_FUZZ_BASE", raising=False)
    first = reliability.fuzz_seeds(spec, 3)
    monkeypatch.setenv("ATTNOPS_FUZZ_BASE", "1200")
    assert reliability.fuzz_seeds(spec, 3) == [s + 1200 for s in first]
    assert reliability.fuzz_seeds(spec, 3, base=0) == first


def test_graph_replay_skips_without_the_caching_allocator(monkeypatch):
    """Under ``PYTORCH_NO_CUDA_MEMORY_CACHING`` (the memcheck lanes) a capture could not allocate: the helper skips
    before it captures anything, so ``run`` is never called."""
    calls = []
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    with pytest.raises(pytest.skip.Exception, match="caching allocator"):
        testing.replayed_in_graph(lambda: calls.append(1))
    assert not calls
