"""MLADecodeWithKVCacheFwd against its reference: every seed row (shrunk on CPU), each launch config, the
split-KV path, grouped KV heads, the fused-cache layout, edge cases, bad input."""

import pytest
import torch
from mla_testlib import every_config, pinned
from mla_testlib import mla_case as _case

from attnops.attn_mla import mla_decode_with_kvcache_fwd
from attnops.attn_mla.mla_decode_with_kvcache_fwd import op as mla_op
from attnops.attn_mla.mla_decode_with_kvcache_fwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.pytest_plugin import row_seed, run_offline_compile, seed_rows

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
F16_ROW = ROWS["ds-v2-4k/f16"]  # H = 128: two head blocks once shrunk


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


@pytest.mark.parametrize("name", sorted(mla_op.CONFIGS))
def test_every_config_shrunk(name):
    """Each launch config (the H200 ones through the interpreter: 64-head blocks, padded)."""
    SPEC.check(make_case(F16_ROW, DEV, shrink=True, seed=3), pinned(mla_op, mla_op.CONFIGS[name]))


@pytest.mark.gpu
@pytest.mark.parametrize("row", ["mla-tp-b1/bf16", "ds-v3-32k/bf16", "mla-b128-4096/f16", "mla-tp-b64/f16"])
def test_every_config_full_size(row):
    """Every config on a single request (many splits), a long context (splits + combine), a full batch (no
    split) and H = 64; one reference per row."""
    SPEC.check_each(make_case(ROWS[row], DEV, shrink=False, seed=5), every_config(mla_op))


@pytest.mark.parametrize("num_splits", [2, 3, 5])
def test_split_kv_and_combine(num_splits):
    """Keys spread over several programs, merged by the combine kernel (uneven last split)."""
    SPEC.check(
        make_case(F16_ROW, DEV, shrink=True, seed=4), pinned(mla_op, mla_op.pick_config(), num_splits=num_splits)
    )


@pytest.mark.parametrize("num_splits", [2, 3, 5])
def test_split_kv_merged_in_the_kernel(num_splits):
    """``fused_combine``: the last split of each (request, head block) merges the partials itself; twice, so
    the second call starts from the arrival counters the first left (back at 0)."""
    case = make_case(F16_ROW, DEV, shrink=True, seed=4)
    fn = pinned(mla_op, mla_op.pick_config(), num_splits=num_splits, fused_combine=True)
    first = SPEC.check(case, fn)
    testing.assert_bitwise("o", first["o"], case.fresh().run(fn)["o"])
    assert not bool(runtime.arrival_counters(DEV, 1).any()), "arrival counters not reset"


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [3, 16, 64])
def test_split_kv_merged_in_the_kernel_gpu(num_splits):
    """The fused merge on the GPU (partials from other SMs): 20 calls, each checked."""
    case = make_case(ROWS["ds-v3-single-request/bf16"], DEV, shrink=False, seed=6)
    expected = case.fresh().run(SPEC.reference)
    fn = pinned(mla_op, mla_op.pick_config(), num_splits=num_splits, fused_combine=True)
    for _ in range(20):
        SPEC.compare(case.fresh().run(fn), expected, case)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [2, 7, 64])
def test_split_kv_and_combine_bf16(num_splits):
    SPEC.check(
        make_case(ROWS["ds-v3-single-request/bf16"], DEV, shrink=False, seed=4),
        pinned(mla_op, mla_op.pick_config(), num_splits=num_splits),
    )


def test_kernels_compile_for_sm90():
    """MLA decode (unsplit, split, split merged in the kernel) through Triton's sm_90 pipeline and ptxas:
    no compile error, no spill and no serialized wgmma on the GPU config."""
    listing = run_offline_compile(__file__, "sm90_compile_attn_mla", "--op", "mla")
    gpu_lines = [ln for ln in listing.splitlines() if " h200 " in ln]
    assert len(gpu_lines) == 6 and not any("SPILL" in ln or "SERIALIZED" in ln or "FAIL" in ln for ln in gpu_lines), \
        listing


def test_grouped_kv_heads():
    """H_kv = 2: heads 0-15 read KV head 0, 16-31 read KV head 1."""
    SPEC.check(_case(h=32, h_kv=2, seed=1))


def test_small_group_is_padded():
    """G = 4 heads per KV head: a 16-row head block with 12 masked rows."""
    SPEC.check(_case(h=8, h_kv=2, n_kv=20, seed=2))


def test_fused_cache_views():
    """k / k_pe as the two parts of one [B, N, 1, 576] cache row (FlashMLA's layout), and a sharper
    softmax (scores ×4) so that a few keys dominate."""
    case = _case(n_kv=33, seed=3)
    cache = testing.randn((2, 33, 1, 576), torch.float16, DEV, testing.generator(8), scale=2.0)
    case.inputs["k"], case.inputs["k_pe"] = cache[..., :512], cache[..., 512:]
    case.inputs["q"] = case.inputs["q"] * 2
    assert case.inputs["k"].stride(1) == 576
    SPEC.check(case, keep_views=True)


@pytest.mark.parametrize("fused", [False, True], ids=["combine-kernel", "merged-in-kernel"])
def test_narrow_latent_split(fused):
    """D = 64 < the fused merge's 128-column chunk, PE = 16, 3 splits: columns past D are neither read nor
    written (the output is NaN-poisoned, its neighbours would be hit first)."""
    fn = pinned(mla_op, mla_op.pick_config(), num_splits=3, fused_combine=fused)
    SPEC.check(_case(d=64, pe=16, n_kv=45, seed=7), fn)


def test_single_key():
    SPEC.check(_case(n_kv=1, seed=5))


def test_no_keys_gives_zeros():
    case = _case(n_kv=0, seed=6)
    out = mla_decode_with_kvcache_fwd(**case.inputs)
    assert bool((out == 0).all())


def _bad(**changes):
    inputs = dict(_case(b=1, h=16, n_kv=8).inputs)
    inputs.update(changes)
    return inputs


_t = lambda *shape, dtype=torch.float16: torch.zeros(shape, dtype=dtype, device=DEV)

BAD_INPUTS = {
    "q dtype": (lambda: _bad(q=_t(1, 16, 512, dtype=torch.float32)), TypeError, "q: expected dtype"),
    "q_pe dtype differs": (
        lambda: _bad(q_pe=_t(1, 16, 64, dtype=torch.bfloat16)),
        TypeError,
        "q_pe: expected dtype float16",
    ),
    "k latent width": (lambda: _bad(k=_t(1, 8, 1, 256)), ValueError, "k: expected shape"),
    "k_pe length": (lambda: _bad(k_pe=_t(1, 9, 1, 64)), ValueError, "k_pe: expected shape"),
    "kv heads do not divide": (
        lambda: _bad(k=_t(1, 8, 3, 512), k_pe=_t(1, 8, 3, 64)),
        ValueError,
        "k: KV heads H_kv = 3 must divide",
    ),
    "latent width not a power of two": (
        lambda: _bad(q=_t(1, 16, 384), k=_t(1, 8, 1, 384)),
        ValueError,
        "q: the latent width D must be a power of two",
    ),
    "k last dim strided": (
        lambda: _bad(k=_t(1, 8, 1, 1024)[..., ::2]),
        ValueError,
        "k: the last 1 dims must be contiguous",
    ),
    "q_pe batch": (lambda: _bad(q_pe=_t(2, 16, 64)), ValueError, "q_pe: expected shape"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        mla_decode_with_kvcache_fwd(**make_inputs())


def test_custom_op_schema_and_fake():
    """torch.ops.attnops.mla_decode_with_kvcache_fwd, on the arguments the public function passes: schema and fake
    implementation agree with the kernel."""
    case = _case(b=1, n_kv=20, seed=10)
    testing.opcheck_as_called(mla_op, "_mla_decode", lambda: case.run(mla_decode_with_kvcache_fwd))


@pytest.mark.parametrize("batch, n_kv, planned", [(4, 32768, 16), (12, 6144, 5), (8, 32768, 8), (16, 4096, 4),
                                                   (1, 4096, 32), (128, 8192, 1)])
def test_split_planner_prefers_one_wave(monkeypatch, batch, n_kv, planned):
    """On 132 SMs with two 64-head blocks a request: one wave of longer splits over two waves of half-length ones
    (ds-v3-32k, ds-v3-serving-batch, measured faster on the H200), the other seed rows' counts unchanged."""
    monkeypatch.setattr(runtime, "num_sms", lambda: 132)
    assert mla_op.plan_splits(batch, 2, n_kv, 32) == planned
