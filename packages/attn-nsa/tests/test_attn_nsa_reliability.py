"""Reliability of every attn-nsa op: seeded fuzz cases against the reference (a few in CI, more with
ATTNOPS_FUZZ_CASES=n), bitwise determinism of repeated calls, and where a NaN / inf input goes (the contract is
written out in docs/reliability.md, "attn-nsa: NaN and inf inputs")."""

import functools
import math

import pytest
import torch

from attnops.attn_nsa.nsa_compressed_varlen_fwd.reference import nsa_compressed_varlen_fwd_ref
from attnops.attn_nsa.nsa_compressed_varlen_fwd.spec import build_case as compressed_case
from attnops.attn_nsa.nsa_topk_varlen_fwd.spec import build_case as topk_case
from attnops.attn_nsa.nsa_varlen_fwd.reference import nsa_varlen_fwd_ref
from attnops.attn_nsa.nsa_varlen_fwd.spec import build_case as selected_case
from attnops.attn_nsa.specs import NSA_COMPRESSED_VARLEN_FWD, NSA_TOPK_VARLEN_FWD, NSA_VARLEN_FWD, SPECS
from attnops.kernel_utils import reliability, testing

DEV = reliability.runtime.device()
NAN, INF = float("nan"), float("inf")
# numpy (the interpreter's tl.dot) warns about the inf - inf and NaN products these tests ask for
QUIET = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
FUZZ = [(spec, seed) for spec in SPECS for seed in reliability.fuzz_seeds(spec, reliability.fuzz_cases(8))]


@pytest.mark.parametrize("spec,seed", FUZZ, ids=[f"{s.name}-{seed}" for s, seed in FUZZ])
def test_fuzz_case_matches_reference(spec, seed):
    reliability.run_fuzz_case(spec, seed)


def busy_fuzz_case(spec):
    """The first fuzz case with at least two sequences of 24+ tokens (for top-k: more candidates than S)."""

    def busy(case):
        lengths = [n for n in case.meta["seq_lens"] if n >= 24]
        return len(lengths) >= 2 and (spec is not NSA_TOPK_VARLEN_FWD
                                      or max(lengths) > case.inputs.get("bs") * case.inputs["selected_block_num"])

    return reliability.first_fuzz_case(spec, busy)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_repeated_calls_are_bitwise_identical(spec):
    assert spec.deterministic
    reliability.assert_deterministic(spec, busy_fuzz_case(spec))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_compiles_as_one_graph(spec):
    reliability.assert_compiles_whole(spec, spec.fuzz(7, DEV))


# ---------------------------------------------------------------------------------------------------
# NaN / inf inputs. Each case packs sequences of 40 (or 20 / 100), 0, 37 (70) and 50 (9) tokens so that token tiles
# straddle sequences; the poisoned element lies in the third sequence, KV head 1, head-dim column 0. Checks: what
# must become NaN (non-finite for inf) in the kernel and the reference, and what must keep its clean bits.


def poison(case, name, index, value):
    bad = case.fresh()
    bad.inputs[name][index] = value
    return bad


def assert_unchanged(name, got, clean, free):
    """``got`` and ``clean`` agree bit for bit wherever ``free`` (broadcast to their shape) holds."""
    free = free.expand_as(got)
    testing.assert_bitwise(name, torch.where(free, got, 0), torch.where(free, clean, 0))


def assert_hit(name, got, hit, value):
    """NaN everywhere ``hit`` holds (an inf input: not finite, inf or NaN)."""
    hit = hit.expand_as(got)
    bad = got[hit]
    ok = bad.isnan() if math.isnan(value) else ~torch.isfinite(bad)
    assert bool(hit.any()) and bool(ok.all()), f"{name}: {int((~ok).sum())} of {bad.numel()} rows not {value}"


def runs(spec, clean, bad):
    """(kernel, reference) outputs on the poisoned case, and on the clean one."""
    return bad.fresh().run(spec.fn), bad.fresh().run(spec.reference), *clean_runs(spec, clean)


_CLEAN = {}


def clean_runs(spec, case):
    """(kernel, reference) outputs on the clean case, computed once per op (the cases below are cached)."""
    if spec.name not in _CLEAN:
        _CLEAN[spec.name] = (case.fresh().run(spec.fn), case.fresh().run(spec.reference))
    return _CLEAN[spec.name]


@functools.cache
def cmp_case():
    return compressed_case([40, 0, 37, 50], 6, 2, 64, 64, torch.float16, 0.125, 16, DEV, seed=21)


def compressed_sees(case, chunk: int, kv_head: int) -> torch.Tensor:
    """``[T, H, 1]`` bool: (token, head) pairs whose softmax includes k_cmp / v_cmp row ``chunk`` of KV head
    ``kv_head`` (the reference on flat scores and a one-hot v_cmp)."""
    a = case.inputs
    t, h, _ = a["q"].shape
    v = torch.zeros_like(a["v_cmp"][..., :1])
    v[chunk, kv_head] = 1
    o, _ = nsa_compressed_varlen_fwd_ref(a["q"].new_zeros((t, h, 1)), torch.zeros_like(v), v, a["offsets"],
                                         a["chunk_offsets"], a["token_indices"], 1.0, a["bs"])
    return o > 0


@QUIET
@pytest.mark.parametrize("target,value", [("q", NAN), ("k_cmp", NAN), ("k_cmp", INF), ("v_cmp", NAN), ("v_cmp", INF)])
def test_compressed_nan_and_inf(target, value):
    """q: only its (token, head) row of o and lse (none for a token with no closed chunk yet). k_cmp: the o and
    lse rows of the (token, head) pairs that see the chunk (NaN; inf gives +-inf scores, values not asserted). v_cmp:
    column d of o for the pairs that see the chunk; lse untouched; tokens of the same sequence that do not see it
    yet may turn NaN too (0 · NaN in a P·V tile, as in FlashAttention; the reference: the whole sequence)."""
    spec, case = NSA_COMPRESSED_VARLEN_FWD, cmp_case()
    chunk, g, seq = 4, 1, torch.zeros(127, 1, 1, dtype=torch.bool)  # chunk 1 of sequence 2 (tokens 40..76)
    seq[40:77] = True
    group = (torch.arange(6) // 3 == g)[None, :, None]
    if target == "q":
        bad = poison(poison(case, "q", (60, 4, 0), value), "q", (45, 4, 0), value)  # token 45: no closed chunk
        hit = torch.zeros(127, 6, 1, dtype=torch.bool)
        hit[60, 4] = True
    else:
        bad = poison(case, target, (chunk, g, 0), value)
        hit = compressed_sees(case, chunk, g)
    hit = hit.to(DEV)
    out, ref, clean, clean_ref = runs(spec, case, bad)
    if target == "v_cmp":
        column = torch.arange(64, device=DEV) == 0
        for name, got in (("kernel", out), ("reference", ref)):
            assert_hit(f"{name} o", got["o"], hit & column, value)
        free = ~(seq.to(DEV) & group.to(DEV) & column)  # the same sequence, KV head and column: see above
        for name, got, base in (("kernel", out, clean), ("reference", ref, clean_ref)):
            assert_unchanged(f"{name} o", got["o"], base["o"], free)
            testing.assert_bitwise(f"{name} lse", got["lse"], base["lse"])
        return
    for name, got, base in (("kernel", out, clean), ("reference", ref, clean_ref)):
        if not math.isinf(value):
            assert_hit(f"{name} o", got["o"], hit, value)
            assert_hit(f"{name} lse", got["lse"], hit[..., 0], value)
        assert_unchanged(f"{name} o", got["o"], base["o"], ~hit)
        assert_unchanged(f"{name} lse", got["lse"], base["lse"], ~hit[..., 0])


@functools.cache
def sel_case():
    case = selected_case([20, 0, 37, 9], 6, 2, 32, torch.float16, 3, 16, True, 0.125, DEV, seed=22)
    case.inputs["block_counts"][50, 1] = 0  # token 50 (sequence 2): KV head 1 selects nothing
    return case


def selected_sees(case, row: int, kv_head: int) -> torch.Tensor:
    """``[T, H, 1]`` bool: (token, head) pairs that collect key / value row ``row`` of KV head ``kv_head``."""
    a = case.inputs
    t, h, _ = a["q"].shape
    v = torch.zeros_like(a["v"][..., :1])
    v[row, kv_head] = 1
    o = nsa_varlen_fwd_ref(a["q"].new_zeros((t, h, 1)), torch.zeros_like(v), v, a["block_indices"],
                           a["block_counts"], a["offsets"], a["token_indices"], a["is_causal"], 1.0, a["block_size"])
    return o > 0


@QUIET
@pytest.mark.parametrize("target,value", [("q", NAN), ("k", NAN), ("v", NAN), ("v", INF)])
def test_selected_nan_and_inf(target, value):
    """Exact in the kernel: only the (token, head) pairs that collect the poisoned key row (q: only its own pair;
    none for an empty selection) change, in every column (q, k) or in column d (v). The reference agrees for q and k;
    for v it also spreads into column d of its sequence's other tokens (it gathers masked rows and multiplies them
    by p = 0)."""
    spec, case = NSA_VARLEN_FWD, sel_case()
    row, g = 37, 1  # sequence 2, position 17 (block 1)
    if target == "q":
        bad = poison(poison(case, "q", (30, 4, 0), value), "q", (50, 4, 0), value)  # token 50: empty selection
        hit = torch.zeros(66, 6, 1, dtype=torch.bool)
        hit[30, 4] = True
    else:
        bad = poison(case, target, (row, g, 0), value)
        hit = selected_sees(case, row, g)
    hit = hit.to(DEV)
    assert not bool(hit[50].any())
    out, ref, clean, clean_ref = runs(spec, case, bad)
    if target == "v":
        hit = hit & (torch.arange(32, device=DEV) == 0)
    assert_hit("kernel o_slc", out["o_slc"], hit, value)
    assert_hit("reference o_slc", ref["o_slc"], hit, value)
    assert_unchanged("kernel o_slc", out["o_slc"], clean["o_slc"], ~hit)
    if target == "v":
        seq = torch.zeros(66, 1, 1, dtype=torch.bool, device=DEV)
        seq[20:57] = True
        hit = seq & (torch.arange(6, device=DEV) // 3 == g)[None, :, None] & (torch.arange(32, device=DEV) == 0)
    assert_unchanged("reference o_slc", ref["o_slc"], clean_ref["o_slc"], ~hit)


@functools.cache
def topk_nan_case():
    return topk_case([100, 0, 70, 9], 6, 2, 32, torch.float16, 0.125, 3, 16, DEV, seed=23)


def assert_well_formed(name, idx, case, rows):
    """On the (token, KV head) rows whose importances turned NaN / inf the ranking is unspecified, but every entry is
    −1 or a candidate ``0..cur`` and no id repeats."""
    cur = (case.inputs["token_indices"][:, 1].long() // case.inputs["bs"])[:, None, None].expand_as(idx)
    idx, cur = idx[rows].long(), cur[rows]
    assert bool(((idx >= -1) & (idx <= cur)).all()), f"{name}: an id outside [-1, cur]"
    ids = torch.where(idx >= 0, idx, -1 - torch.arange(idx.shape[-1], device=idx.device)).sort(-1).values
    assert not bool((ids[:, 1:] == ids[:, :-1]).any()), f"{name}: a repeated id"


@QUIET
@pytest.mark.parametrize("target,value", [("q", NAN), ("q", INF), ("k_cmp", NAN), ("k_cmp", INF)])
def test_topk_nan_and_inf(target, value):
    """q: only that token's selection for the head's KV head. k_cmp: the selections, for that KV head, of the tokens
    of its sequence for which the chunk is closed (their lse). Those selections stay well formed (ids are
    candidates, no repeats); which ids they hold is unspecified. Every other selection keeps its bits."""
    spec, case = NSA_TOPK_VARLEN_FWD, topk_nan_case()
    rows = torch.zeros(179, 2, dtype=torch.bool, device=DEV)
    if target == "q":
        bad = poison(case, "q", (80, 4, 0), value)  # token 80 of sequence 0: cur 5, non-forced candidates
        rows[80, 1] = True
    else:
        bad = poison(case, "k_cmp", (1, 1, 0), value)  # sequence 0, chunk 1: closed from position 31 on
        rows[31:100, 1] = True
    out, ref, clean, clean_ref = runs(spec, case, bad)
    for name, got, base in (("kernel", out, clean), ("reference", ref, clean_ref)):
        assert_unchanged(f"{name} block_indices", got["block_indices"], base["block_indices"], ~rows[..., None])
        assert_well_formed(f"{name} block_indices", got["block_indices"], case, rows)
