"""DSADecodeWithKVCacheFwd against its reference: every seed row (shrunk on CPU), each launch config,
slot validity (padding, −1, future rows, repeats), empty rows, strides, groups, bad input."""

import pytest
import torch
from mla_testlib import dsa_case as _case
from mla_testlib import every_config, pinned

from attnops.attn_mla import dsa_decode_with_kvcache_fwd
from attnops.attn_mla.dsa_decode_with_kvcache_fwd import op as dsa_op
from attnops.attn_mla.dsa_decode_with_kvcache_fwd.spec import SPEC, make_case, torch_sparse_attention
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
F16_ROW = ROWS["ds-v32-kv2k/f16"]


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path per seed row (bf16 rows: GPU only, the interpreter rounds bf16 wrongly)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("name", sorted(dsa_op.CONFIGS))
def test_every_config_shrunk(name):
    SPEC.check(make_case(F16_ROW, DEV, shrink=True, seed=3), pinned(dsa_op, dsa_op.CONFIGS[name]))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "row", ["ds-v32-kv4k/f16", "ds-v32-kv2k/bf16", "mla-d576-h128-kv32k/bf16", "mla-d512-h64-kv8k/bf16"]
)
def test_every_config_full_size(row):
    """Every config on 576- and 512-wide rows, H = 128 (two head blocks) and H = 64, mostly-padded index
    rows (kv4k); one reference per row."""
    SPEC.check_each(make_case(ROWS[row], DEV, shrink=False, seed=5), every_config(dsa_op))


def test_slot_validity_and_repeats():
    """Per query row (Q_s = 40 + s, S_kv = 48): the pad S_kv, −1, far out of range, future rows (j > Q_s)
    and repeated slots; the last row selects only invalid slots and must be zeros."""
    rows = [
        [3, 48, 7, 3, -1, 41, 40, 3, 0, 1000],
        [41, 41, 0, 5, 48, 48, 48, 48, 9, 2],
        [47, 46, 45, 44, 43, 42, -5, 48, 12, 12],
        [48, -1, 47, 46, 45, 44, 48, 100, -7, 49],
    ]
    case = _case([[[r] for r in rows]], seed=1)
    out = SPEC.check(case)["o"]
    assert bool((out[0, 3] == 0).all())


def test_not_causal_keeps_future_rows():
    """is_causal=False: every in-range slot counts, future or not (FlashMLA sparse convention)."""
    rows = [[47, 46, 0, 48, -1, 30, 30, 1], [45, 44, 43, 2, 3, 4, 5, 6]]
    SPEC.check(_case([[[r] for r in rows]], q_start=10, is_causal=False, seed=2))


def test_compressed_kv_rows():
    """stride_kv = 4: row j covers tokens [4j, 4j + 4), visible once 4j + 3 <= Q_s (Q_s = 40, 41)."""
    rows = [[9, 10, 11, 0, 3, 48, 9, 8], [10, 9, 1, 2, 7, 6, 5, 11]]
    SPEC.check(_case([[[r] for r in rows]], q_start=40, stride=4, seed=3))


def test_grouped_kv_heads_small_groups():
    """H_kv = 2, G = 4: each KV head has its own index list; 16-row head blocks with 12 masked rows."""
    gen = testing.generator(4)
    idx = torch.randint(-2, 50, (2, 3, 2, 24), generator=gen)
    SPEC.check(_case(idx, h=8, h_kv=2, seed=4))


def test_512_wide_rows_without_tail_f16():
    """dim_tail = 0 (the 512-wide rows are bf16 on the page: this is their kernel path on the CPU)."""
    gen = testing.generator(5)
    idx = torch.randint(0, 60, (1, 2, 1, 40), generator=gen)
    SPEC.check(_case(idx, s_kv=64, d=512, tail=0, q_start=62, seed=5))


def test_query_start_zero_and_explicit_scale():
    """q_start_index_s = 0 (allowed with stride 1): row 0 sees only key 0; sm_scale given explicitly."""
    rows = [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 5, 5]]
    SPEC.check(_case([[[r] for r in rows]], q_start=0, sm_scale=0.3, seed=6))


def test_batch_of_two_with_strided_kv():
    """B = 2; kv a view into a wider per-token buffer (row pitch larger than the width)."""
    gen = testing.generator(7)
    case = _case(torch.randint(0, 48, (2, 2, 1, 16), generator=gen), seed=7)
    wide = testing.randn((2, 48, 1, 160), torch.float16, DEV, gen)
    case.inputs["kv"] = wide[..., :80]
    assert case.inputs["kv"].stride(1) == 160
    SPEC.check(case, keep_views=True)


def _bad(**changes):
    inputs = dict(_case([[[[0, 1, 2, 3]]]]).inputs)
    inputs.update(changes)
    return inputs


_t = lambda *shape, dtype=torch.float16: torch.zeros(shape, dtype=dtype, device=DEV)
_i = lambda *shape: torch.zeros(shape, dtype=torch.int32, device=DEV)

BAD_INPUTS = {
    "q dtype": (lambda: _bad(q=_t(1, 1, 16, 80, dtype=torch.float32)), TypeError, "q: expected dtype"),
    "kv width": (lambda: _bad(kv=_t(1, 48, 1, 96)), ValueError, "kv: expected shape"),
    "kv dtype differs": (lambda: _bad(kv=_t(1, 48, 1, 80, dtype=torch.bfloat16)), TypeError, "kv: expected dtype"),
    "indices dtype": (lambda: _bad(indices=_i(1, 1, 1, 4).long()), TypeError, "indices: expected dtype int32"),
    "indices kv heads": (lambda: _bad(indices=_i(1, 1, 2, 4)), ValueError, "indices: expected shape"),
    "kv heads do not divide": (
        lambda: _bad(kv=_t(1, 48, 3, 80), indices=_i(1, 1, 3, 4)),
        ValueError,
        "kv: KV heads H_kv = 3 must divide",
    ),
    "no slots": (lambda: _bad(indices=_i(1, 1, 1, 0)), ValueError, "indices: the number of slots K"),
    "value width": (lambda: _bad(dim_tail=32), ValueError, "dim_tail: q width 80"),
    "q_start rule": (lambda: _bad(q_start_index_s=1), ValueError, "q_start_index_s: must exceed stride_kv"),
    "stride": (lambda: _bad(stride_kv=0), ValueError, "stride_kv: must be >= 1"),
    "q_start type": (lambda: _bad(q_start_index_s=40.0), TypeError, "q_start_index_s: expected an int"),
    "scale": (lambda: _bad(sm_scale=-1.0), ValueError, "sm_scale: expected a positive finite float"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        dsa_decode_with_kvcache_fwd(**make_inputs())


def test_torch_sdpa_form_of_the_torch_peer():
    """``torch_sparse_attention(sdpa=True)`` (the benchmark's torch-sdpa peer: one 4-D SDPA call over the gathered
    slots) against the fp32 reference: B = 2, H_kv = 2, invalid and repeated slots, one row with no valid slot
    (zeros, not NaN)."""
    gen = testing.generator(12)
    idx = torch.randint(-2, 50, (2, 3, 2, 24), generator=gen)
    idx[1, 2] = -1
    case = _case(idx, h=8, h_kv=2, seed=12)
    got = torch_sparse_attention(**case.inputs, rows_per_chunk=1 << 30, sdpa=True)
    ref = case.fresh().run(SPEC.reference)["o"]
    testing.assert_close_dual("o", got, ref, torch_sparse_attention(**case.inputs))
    assert not bool(got[1, 2].any()), "a row with no valid slot must be zeros"


def test_custom_op_schema_and_fake():
    """torch.ops.attnops.dsa_decode_with_kvcache_fwd, on the arguments the public function passes: schema and fake
    implementation agree with the kernel."""
    case = _case([[[[3, 1, 2, 48]]]], seed=10)
    testing.opcheck_as_called(dsa_op, "_dsa_decode", lambda: case.run(dsa_decode_with_kvcache_fwd))
