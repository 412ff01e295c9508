"""PagedKVCacheWriteFwd against its reference: every seed row (shrunk on CPU), edge cases, bad input."""

import pytest
import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows
from attnops.kvcache_ops import paged_kv_cache_write_fwd
from attnops.kvcache_ops.paged_kv_cache_write_fwd.spec import SPEC, make_case

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
FP8_ROW = ROWS["qwen3-235b-fp8/bf16/fp8e4m3"]
F16_ROW = ROWS["odd-tokens-and-page/f16/f16"]


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path per seed row (bf16 rows are bit copies or go through fp32: the interpreter runs them)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("w", [F16_ROW, FP8_ROW], ids=["f16", "fp8"])
def test_padding_slots_write_nothing(w):
    """slot −1 marks padding: those tokens leave the (NaN-poisoned) pool untouched."""
    case = make_case(w, DEV, shrink=True, seed=3, padding_every=3)
    SPEC.check(case)


def test_fp8_saturates_and_rounds_to_nearest_even():
    """Values past ±448·scale saturate; exact ties round to even (248 -> 256, 100 -> 96)."""
    case = make_case(FP8_ROW, DEV, shrink=True, seed=5)
    k = case.inputs["k"]
    scale = float(case.inputs["k_scale"])
    probes = torch.tensor([248.0, 100.0, -1e4, 1e4, 0.0], dtype=torch.float32) * scale
    k.view(-1)[: probes.numel()] = probes.to(k.dtype).to(DEV)
    out = SPEC.check(case)["k_pages"]
    slot = int(case.inputs["slot_mapping"][0])
    stored = out.view(-1, *out.shape[2:])[slot].reshape(-1)[:5].float().cpu()
    expected = (probes.to(k.dtype).float() / scale).clamp(-448, 448).to(E4M3).float()
    assert torch.equal(stored, expected)
    assert stored[2] == -448 and stored[3] == 448


def test_strided_pools_and_tokens():
    """k/v as views of a fused qkv tensor; pools as the two halves of a [NP, 2, PS, H, D] cache."""
    case = make_case(F16_ROW, DEV, shrink=True, seed=11)
    n, h, d = case.inputs["k"].shape
    qkv = testing.randn((n, 3 * h, d), torch.float16, DEV, testing.generator(1))
    case.inputs["k"], case.inputs["v"] = qkv[:, h : 2 * h], qkv[:, 2 * h :]
    pool = testing.poisoned((case.inputs["k_pages"].shape[0], 2, *case.inputs["k_pages"].shape[1:]),
                            torch.float16, DEV)
    case.inputs["k_pages"], case.inputs["v_pages"] = pool[:, 0], pool[:, 1]
    ours = case.fresh()
    fused = pool.clone()
    ours.inputs["k_pages"], ours.inputs["v_pages"] = fused[:, 0], fused[:, 1]
    ours.run(SPEC.fn)
    expected = case.fresh()
    expected.run(SPEC.reference)
    testing.assert_bitwise("k_pages", fused[:, 0], expected.inputs["k_pages"])
    testing.assert_bitwise("v_pages", fused[:, 1], expected.inputs["v_pages"])


def test_zero_tokens_is_a_no_op():
    case = make_case(F16_ROW, DEV, shrink=True)
    for name in ("k", "v", "slot_mapping"):
        case.inputs[name] = case.inputs[name][:0]
    SPEC.check(case)


def _bad(**changes):
    case = make_case(FP8_ROW if "k_scale" in changes or "v_scale" in changes else F16_ROW, DEV, shrink=True)
    case.inputs.update(changes)
    return case.inputs


def _f16(shape):
    return torch.randn(shape, device=DEV).half()


BAD_INPUTS = {
    "k wrong dtype": (lambda: _bad(k=_f16((7, 2, 64)).float()), TypeError, "k: expected dtype"),
    "v wrong shape": (lambda: _bad(v=_f16((7, 2, 32))), ValueError, "v: expected shape"),
    "pool head dim": (lambda: _bad(k_pages=_f16((5, 7, 2, 32))), ValueError, "k_pages: expected shape"),
    "pools differ": (lambda: _bad(v_pages=_f16((6, 7, 2, 64))), ValueError, "v_pages: expected shape"),
    "slot dtype": (lambda: _bad(slot_mapping=torch.arange(7, device=DEV, dtype=torch.int32)), TypeError,
                   "slot_mapping: expected dtype int64"),
    "slot out of range": (lambda: _bad(slot_mapping=torch.arange(7, device=DEV) + 30), ValueError,
                          r"slot_mapping: entries must lie in \[0, 28\), got 36"),
    "k not inner-contiguous": (lambda: _bad(k=_f16((7, 64, 2)).transpose(1, 2)), ValueError,
                               "k: the last 2 dims must be contiguous"),
    "fp8 without scale": (lambda: _bad(k_scale=None), ValueError, "k_scale, v_scale: required"),
    "scale dtype": (lambda: _bad(v_scale=torch.ones(1, device=DEV, dtype=torch.float64)), TypeError,
                    "v_scale: expected dtype float32"),
    "scale for 16-bit pool": (lambda: {**_bad(), "k_scale": torch.ones(1, device=DEV),
                                       "v_scale": torch.ones(1, device=DEV)}, ValueError, "only for float8"),
    "k not a tensor": (lambda: _bad(k=[1, 2, 3]), TypeError, "k: expected a torch.Tensor"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    """Value checks (index ranges, prefix sums) read device memory: on a GPU they run when asked for."""
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")
    make_inputs, error, message = BAD_INPUTS[name]
    inputs = make_inputs()
    before = inputs["k_pages"].clone() if isinstance(inputs.get("k_pages"), torch.Tensor) else None
    with pytest.raises(error, match=message):
        paged_kv_cache_write_fwd(**inputs)
    if before is not None:
        testing.assert_bitwise("k_pages", inputs["k_pages"], before)


def test_custom_op_schema_and_fake():
    """attnops::paged_kv_cache_write_fwd as the public function calls it: it declares the two pools it writes and
    no other argument, and its fake impl agrees (f16: the schema check cannot compare fp8 pools on the CPU)."""
    from attnops.kvcache_ops.paged_kv_cache_write_fwd import op

    case = make_case(F16_ROW, DEV, shrink=True, seed=21)
    testing.opcheck_as_called(op, "_write", lambda: case.run(paged_kv_cache_write_fwd))
