"""FP8LightningIndexerFwd against its reference: every seed row (shrunk on CPU), each launch config,
windows, groups, strides, bad input."""

import math

import pytest
import torch
from mla_testlib import every_config, pinned

from attnops.attn_mla import fp8_lightning_indexer_fwd
from attnops.attn_mla.fp8_lightning_indexer_fwd import op as indexer_op
from attnops.attn_mla.fp8_lightning_indexer_fwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.fp8 import E4M3
from attnops.kernel_utils.opspec import Case
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

DEV = runtime.device()
ROWS = {w.name + "/" + w.dtype: w for w in SPEC.workloads}
# One row per kernel variant: bf16 D=64, fp8 D=64 with scale, fp8 D=128 with scale, a single query row.
VARIANTS = [
    "chunk-prefill/bf16",
    "chunk-prefill-kscale/fp8e4m3",
    "index-q2048-ctx8192/fp8e4m3",
    "ds-v32-decode-b1/fp8e4m3",
]


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path per seed row (24 query rows, 300 keys, 8 heads; windows scaled from the page's)."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    """Full size on the GPU: fp8 / bf16 tensor-core dots."""
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("name", sorted(indexer_op.CONFIGS))
def test_every_config_shrunk(name):
    """Each launch config (the H200 ones too, through the interpreter) on a shrunk fp8 row with scales."""
    SPEC.check(
        make_case(ROWS["chunk-prefill-kscale/fp8e4m3"], DEV, shrink=True, seed=3),
        pinned(indexer_op, indexer_op.CONFIGS[name]),
    )


def test_tile_rule_follows_the_work(monkeypatch):
    """Runs everywhere (the rule, not a launch): off the interpreter, narrow tiles up to NARROW_MAX_WORK
    multiply-adds and wide ones above; the seed rows the H200 sweep put on either side land there."""
    monkeypatch.setattr(indexer_op.runtime, "interpreting", lambda: False)
    narrow, wide = indexer_op.CONFIGS["h200-narrow"], indexer_op.CONFIGS["h200-wide"]
    assert indexer_op.pick_config(indexer_op.NARROW_MAX_WORK) == narrow
    assert indexer_op.pick_config(indexer_op.NARROW_MAX_WORK + 1) == wide
    for row, config in (("index-q2048-ctx4096/fp8e4m3", narrow), ("index-q2048-ctx131072/fp8e4m3", wide)):
        w = ROWS[row]
        assert indexer_op.pick_config(math.prod(w.shape("index_q")) * w.shape("index_k")[1]) == config, row


@pytest.mark.gpu
@pytest.mark.parametrize("row", VARIANTS)
def test_every_config_full_size(row):
    """Every config on one row per kernel variant; one reference per row."""
    SPEC.check_each(make_case(ROWS[row], DEV, shrink=False, seed=5), every_config(indexer_op))


def _case(b=1, s=20, s_kv=90, h=4, g=1, d=64, dtype=E4M3, ks=None, ke=None, scale=True, seed=0) -> Case:
    gen = testing.generator(seed)
    ks = ks if ks is not None else [0] * s
    ke = ke if ke is not None else [s_kv - s + i + 1 for i in range(s)]
    inputs = {
        "index_q": testing.randn((b, s, h, d), dtype, DEV, gen),
        "index_k": testing.randn((b, s_kv, g, d), dtype, DEV, gen),
        "weights": testing.randn((s, h), torch.float32, DEV, gen),
        "cu_seqlen_ks": torch.tensor(ks, dtype=torch.int32, device=DEV),
        "cu_seqlen_ke": torch.tensor(ke, dtype=torch.int32, device=DEV),
    }
    if scale:
        inputs["index_k_scale"] = (torch.rand((b, s_kv, g), generator=gen) + 0.1).to(DEV)
    return Case(inputs, outputs=("logits",))


def test_windows_empty_clipped_and_disjoint():
    """Rows with no key (ke <= ks), windows past both ends of the key axis, and rows whose windows
    leave whole key tiles untouched (those tiles only write −inf)."""
    ks = [0, 5, 5, -10, 80, 0, 33, 89, 40, 0]
    ke = [0, 5, 3, 7, 200, 90, 34, 90, 41, 1]
    SPEC.check(_case(s=10, ks=ks, ke=ke, seed=1))


def test_batch_and_key_groups_bf16():
    """B = 2 requests sharing weights and windows; G = 2 key groups (heads 0-3 → group 0, 4-7 → 1)."""
    SPEC.check(_case(b=2, s=17, s_kv=70, h=8, g=2, dtype=torch.bfloat16, scale=False, seed=2))


def test_fp8_without_key_scale_d128():
    SPEC.check(_case(d=128, scale=False, seed=3))


def test_unclean_logits_leave_outside_unspecified():
    """clean_logits=False: only in-window entries are defined (and checked)."""
    case = _case(seed=4)
    case.inputs["clean_logits"] = False
    SPEC.check(case)


def test_strided_keys_and_queries():
    """index_k a slice of a wider cache row, index_q a slice of a longer sequence."""
    case = _case(s=12, s_kv=50, h=4, d=64, seed=5)
    gen = testing.generator(6)
    wide_k = testing.randn((1, 50, 1, 128), E4M3, DEV, gen)
    long_q = testing.randn((1, 30, 4, 64), E4M3, DEV, gen)
    case.inputs["index_k"], case.inputs["index_q"] = wide_k[..., 64:], long_q[:, 7:19]
    assert case.inputs["index_k"].stride(1) == 128
    SPEC.check(case, keep_views=True)


def _bad(**changes):
    inputs = dict(_case(s=4, s_kv=16, seed=9).inputs)
    inputs.update(changes)
    return inputs


_f32 = lambda *shape: torch.ones(shape, dtype=torch.float32, device=DEV)
_q = lambda *shape, dtype=E4M3: torch.zeros(shape, device=DEV).to(dtype)

BAD_INPUTS = {
    "q dtype f16": (lambda: _bad(index_q=_q(1, 4, 4, 64, dtype=torch.float16)), TypeError, "index_q: expected dtype"),
    "k dtype differs": (
        lambda: _bad(index_k=_q(1, 16, 1, 64, dtype=torch.bfloat16)),
        TypeError,
        "index_k: expected dtype float8_e4m3fn",
    ),
    "k head dim": (lambda: _bad(index_k=_q(1, 16, 1, 32)), ValueError, "index_k: expected shape"),
    "groups do not divide heads": (
        lambda: _bad(index_k=_q(1, 16, 3, 64), index_k_scale=_f32(1, 16, 3)),
        ValueError,
        "index_k: key groups G = 3 must divide",
    ),
    "head dim not a power of two": (
        lambda: _bad(index_q=_q(1, 4, 4, 48), index_k=_q(1, 16, 1, 48)),
        ValueError,
        "index_q: head dim must be a power of two",
    ),
    "fp8 head dim 16": (
        lambda: _bad(index_q=_q(1, 4, 4, 16), index_k=_q(1, 16, 1, 16)),
        ValueError,
        "index_q: an fp8 head dim must be at least 32",
    ),
    "weights shape": (lambda: _bad(weights=_f32(4, 5)), ValueError, "weights: expected shape"),
    "weights dtype": (lambda: _bad(weights=_f32(4, 4).half()), TypeError, "weights: expected dtype float32"),
    "ks dtype": (
        lambda: _bad(cu_seqlen_ks=torch.zeros(4, dtype=torch.int64, device=DEV)),
        TypeError,
        "cu_seqlen_ks: expected dtype int32",
    ),
    "ke length": (
        lambda: _bad(cu_seqlen_ke=torch.zeros(5, dtype=torch.int32, device=DEV)),
        ValueError,
        "cu_seqlen_ke: expected shape",
    ),
    "scale shape": (lambda: _bad(index_k_scale=_f32(1, 15, 1)), ValueError, "index_k_scale: expected shape"),
    "negative scale": (lambda: _bad(index_k_scale=-_f32(1, 16, 1)), ValueError, "index_k_scale: must be >= 0"),
    "q heads not contiguous": (
        lambda: _bad(index_q=_q(1, 4, 64, 4).transpose(2, 3)),
        ValueError,
        "index_q: the last 2 dims must be contiguous",
    ),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        fp8_lightning_indexer_fwd(**make_inputs())


def test_custom_op_schema_and_fake():
    """torch.ops.attnops.fp8_lightning_indexer_fwd, on the arguments the public function passes: schema and fake
    implementation agree with the kernel."""
    case = _case(s=6, s_kv=40, dtype=torch.bfloat16, seed=10)  # schema check cannot compare fp8 on CPU
    testing.opcheck_as_called(indexer_op, "_indexer", lambda: case.run(fp8_lightning_indexer_fwd))
