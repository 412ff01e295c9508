"""Reliability of every attn-core op (issue 10): seeded fuzz cases against the reference (a few in CI, more with
ATTNOPS_FUZZ_CASES=n), bitwise determinism of repeated calls, and where a NaN / inf in one request's k or v goes
(the contract is written out in docs/reliability.md, "attn-core: NaN and inf inputs").

The forward ops' fuzz and determinism tests live in their own test files (``test_fuzz_case_matches_reference``
and ``test_repeated_calls_are_bitwise_identical`` in ``test_<op>.py``, same seeds and ``ATTNOPS_FUZZ_CASES``);
they are not repeated here. This file adds them for GQABwd, and the NaN / inf checks for every op."""

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.gqa_bwd.spec import make_case as bwd_case
from attnops.attn_core.gqa_dense_fwd.spec import make_case as dense_case
from attnops.attn_core.gqa_paged_fwd.op import gqa_paged_plan
from attnops.attn_core.gqa_paged_fwd.spec import build_case as paged_case
from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.op import gqa_prefill_paged_plan
from attnops.attn_core.gqa_prefill_paged_with_kv_cache_fwd.spec import build_case as prefill_case
from attnops.attn_core.gqa_varlen_fwd.spec import make_case as varlen_case
from attnops.attn_core.mha_decode_paged_with_kv_cache_fwd.op import mha_decode_paged_plan
from attnops.attn_core.mha_decode_paged_with_kv_cache_fwd.spec import build_case as decode_case
from attnops.attn_core.specs import (
    GQA_BWD,
    GQA_DENSE_FWD,
    GQA_PAGED_FWD,
    GQA_PREFILL_PAGED_FWD,
    GQA_VARLEN_FWD,
    MHA_DECODE_PAGED_FWD,
    SPECS,
)
from attnops.kernel_utils import reliability, testing

DEV = reliability.runtime.device()
F16 = torch.float16
NAN, INF = float("nan"), float("inf")
# numpy (the interpreter's tl.dot) warns about the inf - inf and NaN products these tests ask for
QUIET = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

# ---------------------------------------------------------------------------------------------------
# Fuzz and determinism. Ops whose own test file already runs them (same seeds, same ATTNOPS_FUZZ_CASES):
FUZZED_ELSEWHERE = {
    GQA_DENSE_FWD.name: "test_gqa_dense_fwd.py",
    GQA_VARLEN_FWD.name: "test_gqa_varlen_fwd.py",
    GQA_PAGED_FWD.name: "test_gqa_paged_fwd.py",
    MHA_DECODE_PAGED_FWD.name: "test_mha_decode_paged_with_kv_cache_fwd.py",
    GQA_PREFILL_PAGED_FWD.name: "test_gqa_prefill_paged_with_kv_cache_fwd.py",
}
FUZZED_HERE = [spec for spec in SPECS if spec.fuzz is not None and spec.name not in FUZZED_ELSEWHERE]
FUZZ = [(spec, seed) for spec in FUZZED_HERE for seed in reliability.fuzz_seeds(spec, reliability.fuzz_cases(6))]


def test_every_op_is_fuzzed_somewhere():
    """Every op of the family has a fuzzer, and its fuzz / determinism tests run here or in its own file."""
    here = Path(__file__).parent
    for spec in SPECS:
        assert spec.fuzz is not None, f"{spec.name}: no SPEC.fuzz"
        if spec.name in FUZZED_ELSEWHERE:
            text = (here / FUZZED_ELSEWHERE[spec.name]).read_text()
            assert "def test_fuzz_case_matches_reference" in text, spec.name
            assert "def test_repeated_calls_are_bitwise_identical" in text, spec.name
    assert GQA_BWD in FUZZED_HERE


@pytest.mark.parametrize("spec,seed", FUZZ, ids=[f"{s.name}-{seed}" for s, seed in FUZZ])
def test_fuzz_case_matches_reference(spec, seed):
    reliability.run_fuzz_case(spec, seed)


def busy_fuzz_case(spec):
    """The first fuzz case with a batch of 2+, G >= 2 and 40+ keys (several key blocks per program role)."""

    def busy(case):
        q, k = case.inputs["q"], case.inputs["k"]
        return q.shape[0] >= 2 and q.shape[2] > k.shape[2] and k.shape[1] >= 40

    return reliability.first_fuzz_case(spec, busy)


@pytest.mark.parametrize("spec", FUZZED_HERE, ids=[s.name for s in FUZZED_HERE])
def test_repeated_calls_are_bitwise_identical(spec):
    assert spec.deterministic
    reliability.assert_deterministic(spec, busy_fuzz_case(spec))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_compiles_as_one_graph(spec):
    case = spec.fuzz(7, DEV)
    case.inputs.pop("plan", None)  # planned inside the custom op
    reliability.assert_compiles_whole(spec, case)


PLANNED = [GQA_PAGED_FWD, MHA_DECODE_PAGED_FWD, GQA_PREFILL_PAGED_FWD]


@pytest.mark.parametrize("spec", PLANNED, ids=[s.name for s in PLANNED])
def test_planned_call_compiles_with_a_graph_break(spec):
    """A call with a plan is no single custom op (the plan is a host object): under torch.compile its launches run
    eagerly (``runtime.eager_under_compile``), with the eager call's bits."""
    case = reliability.first_fuzz_case(spec, lambda case: case.inputs.get("plan") is not None)
    reliability.assert_compiles_whole(spec, case, fullgraph=False)


# ---------------------------------------------------------------------------------------------------
# NaN / inf inputs (forward ops). Each case has four requests; r0 has q_len = kv_len (its first query sees key 0
# only), r1 is clean, r0, r2 and r3 are poisoned as listed in POISONS. Every request is causal (bottom-right) with
# q_len <= kv_len, so every query row sees key 0 and only the last row sees the last key. Checks, on the kernel and
# on the reference, against their own clean outputs: every element outside the hit regions keeps its bits (the
# other requests, the other KV heads of the same request, the other columns for a v poison, the rows that do not
# see a poisoned k row); inside them NaN (NaN input) or non-finite (inf in v); an inf in k gives +-inf scores, where
# only "the kernel is finite exactly where the reference is" is asserted; a v row that only some rows see leaves
# the column of the others unspecified (0 · NaN in P·V).


@dataclass(frozen=True)
class Poison:
    request: int
    source: str  # "k" or "v"
    key: int  # logical key position; -1: the request's last key
    kv_head: int
    column: int


POISONS = (Poison(0, "k", 0, 0, 0), Poison(2, "v", 0, 1, 3), Poison(2, "k", -1, 0, 0), Poison(3, "k", 0, 1, 2),
           Poison(3, "v", -1, 0, 4))


@dataclass(frozen=True)
class Layout:
    """Where a call keeps things: ``key(case, source, r, j)`` -> (input name, index of the key row), ``rows(case,
    r)`` -> index of request r's output rows (a leading-dims tuple), the output's name and the kernel's context."""

    build: object
    key: object
    rows: object
    out: str = "o"
    splits: int | None = None  # forced split-KV count (dense / varlen; the paged cases carry a plan)


def _cu(case, name):
    return case.inputs[name].tolist()


def _pool_row(table, r, j, page_size):
    return int(table[r, j // page_size]) * page_size + j % page_size


Q_LENS, KV_LENS = [9, 3, 5, 2], [9, 20, 37, 50]  # r0: q_len = kv_len


@functools.cache
def _dense():
    w = next(w for w in GQA_DENSE_FWD.workloads if w.id.endswith("llama-8b-4k/f16"))
    return dense_case(w, DEV, False, 31, batch=4, s_q=24, s_kv=24, heads=(6, 2), head_dim=64, is_causal=True)


@functools.cache
def _varlen():
    w = next(w for w in GQA_VARLEN_FWD.workloads if w.id.endswith("llama-8b-uniform/f16"))
    return varlen_case(w, DEV, False, 32, q_lens=Q_LENS, kv_lens=KV_LENS, heads=(6, 2), head_dim=64,
                       with_sinks=False, is_causal=True)


@functools.cache
def _paged():
    case = paged_case(Q_LENS, KV_LENS, 6, 2, 64, 16, F16, F16, DEV, 33, is_causal=True)
    case.inputs["plan"] = gqa_paged_plan(_cu(case, "cu_seqlens_q"), KV_LENS, 6, 2, 64, is_causal=True, num_splits=3,
                                         device=DEV)
    return case


@functools.cache
def _decode():
    lens = [4, 20, 37, 50]  # S_q = 4 for every request; r0: len = S_q
    case = decode_case(lens, 4, 2, 64, 16, F16, DEV, 34, is_causal=True)
    case.inputs["plan"] = mha_decode_paged_plan(lens, 4, 2, 64, is_causal=True, num_splits=3, device=DEV)
    return case


PREFILL_CACHE = [0, 17, 32, 48]  # r0: no cache (q_len = kv_len); r2's and r3's key 0 in the pool


@functools.cache
def _prefill():
    case = prefill_case(Q_LENS, PREFILL_CACHE, 6, 2, 64, 16, F16, F16, DEV, 35, is_causal=True)
    case.inputs["plan"] = gqa_prefill_paged_plan(_cu(case, "cu_seqlens_q"), PREFILL_CACHE, 6, 2, 64, is_causal=True,
                                                 num_splits=3, device=DEV)
    return case


def _varlen_rows(case, r):
    cu = _cu(case, "cu_seqlens_q")
    return (slice(cu[r], cu[r + 1]),)


def _batch_rows(case, r):
    return (r, slice(0, case.inputs["q"].shape[1]))


def _paged_key(case, source, r, j):
    table = case.inputs["page_table"].cpu()
    page_size = case.inputs["k_pages"].shape[1]
    row = _pool_row(table, r, j, page_size)
    return f"{source}_pages", (row // page_size, row % page_size)


def _decode_key(case, source, r, j):
    return source, (_pool_row(case.inputs["block_table"].cpu(), r, j, case.inputs["page_size"]),)


def _prefill_key(case, source, r, j):
    c = PREFILL_CACHE[r]
    if j < c:
        return f"{source}_pages", (_pool_row(case.inputs["block_table"].cpu(), r, j, case.inputs["page_size"]),)
    return f"{source}_new", (_cu(case, "cu_seqlens_q")[r] + j - c,)


LAYOUTS = {
    GQA_DENSE_FWD.name: Layout(_dense, lambda case, s, r, j: (s, (r, j)), _batch_rows),
    GQA_DENSE_FWD.name + "-split": Layout(_dense, lambda case, s, r, j: (s, (r, j)), _batch_rows, splits=2),
    GQA_VARLEN_FWD.name: Layout(_varlen, lambda case, s, r, j: (s, (_cu(case, "cu_seqlens_kv")[r] + j,)),
                                _varlen_rows),
    GQA_VARLEN_FWD.name + "-split": Layout(_varlen, lambda case, s, r, j: (s, (_cu(case, "cu_seqlens_kv")[r] + j,)),
                                           _varlen_rows, splits=2),
    GQA_PAGED_FWD.name: Layout(_paged, _paged_key, _varlen_rows),
    MHA_DECODE_PAGED_FWD.name: Layout(_decode, _decode_key, _batch_rows),
    GQA_PREFILL_PAGED_FWD.name: Layout(_prefill, _prefill_key, _varlen_rows, out="out"),
}
SPEC_OF = {s.name: s for s in SPECS}


def _kv_len(layout, case, r):
    a = case.inputs
    if layout.build is _dense:
        return a["k"].shape[1]
    if layout.build is _varlen:
        cu = _cu(case, "cu_seqlens_kv")
        return cu[r + 1] - cu[r]
    if layout.build is _paged:
        return KV_LENS[r]
    if layout.build is _decode:
        return int(a["real_seqlen_kv"][r])
    return PREFILL_CACHE[r] + Q_LENS[r]


def poisoned(layout, case, value):
    """A copy of ``case`` with every POISONS entry set to ``value``, and ``[out rows, H, D]`` bool masks: ``hit``
    (NaN / non-finite expected), ``free`` (inf in k: finite exactly where the reference is), ``loose`` (v poisoned at
    a key that some rows of the request do not see: those rows' column is unspecified, see docs/reliability.md)."""
    bad = case.fresh()
    a = bad.inputs
    k_name = next(n for n in ("k", "k_new", "k_pages") if n in a)
    group = a["q"].shape[-2] // a[k_name].shape[-2]
    hit = torch.zeros(a["q"].shape, dtype=torch.bool, device=DEV)
    free, loose = torch.zeros_like(hit), torch.zeros_like(hit)
    for p in POISONS:
        j = _kv_len(layout, case, p.request) - 1 if p.key < 0 else p.key
        name, index = layout.key(case, p.source, p.request, j)
        a[name][index + (p.kv_head, p.column)] = value
        rows = layout.rows(case, p.request)
        heads = slice(p.kv_head * group, (p.kv_head + 1) * group)
        if p.key < 0:  # only the last query row sees the last key
            if p.source == "v":
                loose[rows + (heads, p.column)] = True
            last = rows[-1]
            rows = rows[:-1] + (slice(last.stop - 1, last.stop),)
        if p.source == "v":
            hit[rows + (heads, p.column)] = True
        elif value != value:  # NaN in k: the whole output row of every head of that KV head
            hit[rows + (heads,)] = True
        else:
            free[rows + (heads,)] = True
    return bad, hit, free, loose & ~hit


_CLEAN = {}


def outputs(layout, case, fn):
    with fwd.forced(num_splits=layout.splits) if layout.splits else contextlib.nullcontext():
        return case.fresh().run(fn)


def clean_outputs(name, layout, spec):
    if name not in _CLEAN:
        case = layout.build()
        _CLEAN[name] = (outputs(layout, case, spec.fn), outputs(layout, case, spec.reference))
    return _CLEAN[name]


def assert_unchanged(what, got, clean, keep):
    testing.assert_bitwise(what, torch.where(keep, got, 0), torch.where(keep, clean, 0))


@QUIET
@pytest.mark.parametrize("value", [NAN, INF], ids=["nan", "inf"])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_nan_and_inf_stay_in_their_request(name, value):
    """NaN / inf in one request's k or v (pools included) reach only that request's rows that see the key, and only
    the heads of that KV head (only column d for v). Kernel and reference alike."""
    layout = LAYOUTS[name]
    spec = SPEC_OF[name.removesuffix("-split")]
    case = layout.build()
    bad, hit, free, loose = poisoned(layout, case, value)
    clean, clean_ref = clean_outputs(name, layout, spec)
    got, ref = outputs(layout, bad, spec.fn), outputs(layout, bad, spec.reference)
    keep = ~(hit | free | loose)
    for who, out, base in (("kernel", got, clean), ("reference", ref, clean_ref)):
        o = out[layout.out]
        assert_unchanged(f"{who} {layout.out}", o, base[layout.out], keep)
        bad_vals = o[hit]
        ok = bad_vals.isnan() if value != value else ~torch.isfinite(bad_vals)
        assert bool(ok.all()), f"{who}: {int((~ok).sum())} of {bad_vals.numel()} hit elements not {value}"
    assert torch.equal(torch.isfinite(got[layout.out][free]), torch.isfinite(ref[layout.out][free])), \
        "inf in k: the kernel is not finite exactly where the reference is"
    if spec is GQA_PREFILL_PAGED_FWD:  # the append copies the poisoned new rows as values
        for pool in ("k_pages", "v_pages"):
            # any NaN where the reference has one: the reference writes k_new through an fp32 round trip, and on
            # the GPU f32 -> f16 turns NaN into the canonical 0x7fff while the kernel copies the bits (2 elements
            # differed on the H200, 2026-12-01; equal on the CPU). The contract is NaN.
            testing.assert_bitwise(pool, got[pool], ref[pool], any_nan=True)


@QUIET
@pytest.mark.parametrize("source", ["k", "v"])
def test_backward_nan_stays_in_its_batch_element(source):
    """GQABwd: a NaN in batch element 0's k (v) makes its dq, dk and dv (dq, dk: dv = Pᵀ·dO does not read v) NaN
    somewhere and changes no gradient of batch element 1. Kernel and reference alike."""
    w = next(w for w in GQA_BWD.workloads if w.id.endswith("llama-8b-short/f16"))
    case = bwd_case(w, DEV, False, 36, batch=2, s_q=30, s_kv=45, heads=(6, 2), head_dim=64, is_causal=True)
    bad = case.fresh()
    bad.inputs[source][0, 3, 1, 5] = NAN
    for who, fn in (("kernel", GQA_BWD.fn), ("reference", GQA_BWD.reference)):
        base, got = case.fresh().run(fn), bad.fresh().run(fn)
        for out in case.outputs:
            testing.assert_bitwise(f"{who} {out}[1]", got[out][1], base[out][1])
            if source == "v" and out == "dv":
                testing.assert_bitwise(f"{who} dv[0]", got[out][0], base[out][0])
            else:
                assert bool(got[out][0].isnan().any()), f"{who} {out}[0]: the NaN went nowhere"
