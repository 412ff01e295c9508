"""NSATopKVarlenFwd against its float64 reference: every seed row (shrunk on CPU), forced-block / tie / padding
edge cases, the multi-tile merge, every launch config, bad input."""

import pytest
import torch
from nsa_testlib import DEV, check_with_config, config_params, f16, i32, run_bad_input

from attnops.attn_nsa import nsa_topk_varlen_fwd
from attnops.attn_nsa.nsa_topk_varlen_fwd import op
from attnops.attn_nsa.nsa_topk_varlen_fwd.reference import nsa_topk_importance
from attnops.attn_nsa.nsa_topk_varlen_fwd.spec import SPEC, build_case, make_case
from attnops.kernel_utils import testing
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

SMALL = [c for c in op.CONFIGS if c.kwargs["BC"] == 32][0]  # BC 32 forces the multi-tile merge below


@pytest.mark.parametrize("w", seed_rows(SPEC), ids=lambda w: w.id)
def test_seed_row_shrunk(w):
    """Kernel path per seed row (<= 3 sequences of <= 5 blocks + ragged tail, S <= 4); bf16 on the GPU."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


def _layout_ok(idx: torch.Tensor, case):
    """Our own output form: min(S, cur + 1) selected ids first, then −1."""
    idx = idx.cpu().long()
    pos = case.inputs["token_indices"][:, 1].cpu().long()
    cur = pos // case.inputs["bs"]
    s = idx.shape[-1]
    valid = idx >= 0
    n_valid = valid.sum(-1)
    assert torch.equal(n_valid, torch.minimum(cur + 1, torch.tensor(s))[:, None].expand_as(n_valid))
    assert bool((valid[..., :-1] | ~valid[..., 1:]).all()), "a -1 precedes a selected id"


@pytest.mark.parametrize(
    "lengths,h,h_kv,d,selected,bs,scale",
    [
        # zero-length sequences, shorter than bs, exactly bs, ragged tails; S = 3 (the forced blocks)
        ([0, 31, 32, 0, 100, 0], 16, 1, 64, 3, 32, 0.125),
        # S = 1 and 2: the forced blocks (importance G each) tie with each other
        ([130], 16, 1, 64, 1, 32, 0.125),
        ([130], 16, 1, 64, 2, 32, 0.125),
        # S not a power of two, GQA 32:2, bs 64
        ([300, 200], 64, 2, 64, 5, 64, 0.125),
        # scale 1: peaked softmax, many importances underflow to exactly 0 (still candidates, not -1)
        ([200], 16, 1, 64, 6, 16, 1.0),
        # G = 4 (16 tokens per tile, several sequences per tile), G not a power of two (masked heads)
        ([7, 0, 90, 3, 60], 8, 2, 32, 4, 16, 0.2),
        ([70, 45], 6, 2, 48, 4, 16, 0.2),
    ],
    ids=["empty-short-s3", "s1-forced-ties", "s2-forced-ties", "s5-gqa32-bs64", "scale1-underflow", "g4", "g3-d48"],
)
def test_edge_shapes(lengths, h, h_kv, d, selected, bs, scale):
    case = build_case(lengths, h, h_kv, d, torch.float16, scale, selected, bs, DEV, seed=len(lengths) + selected)
    out = SPEC.check(case)
    _layout_ok(out["block_indices"], case)


@pytest.mark.parametrize("lengths", [[], [0, 0]], ids=["no-sequences", "empty-sequences"])
def test_no_tokens(lengths):
    """T_q = 0: an empty block_indices, no launch. Regression (fuzz NSATopKVarlenFwd-1513008): the acceptance
    check itself crashed on zero rows (``assert_selection`` reshaped an empty tensor with ``-1``)."""
    SPEC.check(build_case(lengths, 16, 1, 64, torch.float16, 0.125, 4, 32, DEV))


def test_all_candidates_fit():
    """S >= every token's candidate count: each token lists chunks 0..cur, no score is needed."""
    case = build_case([31, 64, 150], 16, 1, 64, torch.float16, 0.125, 16, 32, DEV, seed=2)
    out = SPEC.check(case)
    _layout_ok(out["block_indices"], case)


def test_exact_ties_between_chunks():
    """Identical compressed keys inside a sequence: every non-forced chunk has the same importance; any
    choice among them is accepted (the spec leaves tie-breaking open); ours takes the smaller ids."""
    case = build_case([200], 16, 1, 64, torch.float16, 0.125, 5, 16, DEV, seed=3)
    k = case.inputs["k_cmp"]
    case.inputs["k_cmp"] = k[:1].expand_as(k).contiguous()
    out = SPEC.check(case)
    _layout_ok(out["block_indices"], case)


def test_multi_tile_merge():
    """38 chunks with BC = 32: two score tiles per token merged into the running top-8 (S = 6)."""
    case = build_case([600, 40], 16, 1, 64, torch.float16, 0.125, 6, 16, DEV, seed=4)
    out = check_with_config(SPEC, op._run, case, SMALL)
    _layout_ok(out["block_indices"], case)


def test_importance_reference_matches_naive_rule():
    """The float64 importance of one token written out from the spec's formulas, head by head."""
    case = build_case([0, 97], 32, 2, 32, torch.float16, 0.3, 4, 16, DEV, seed=5)
    a = case.inputs
    imp = nsa_topk_importance(a["q"], a["k_cmp"], a["offsets"], a["chunk_offsets"], a["scale"], a["bs"])
    t, g = 80, 16  # token 80 (bs 16): closed chunks 0..4, current chunk 5
    for kv in range(2):
        expect = torch.zeros(6, dtype=torch.float64, device=imp.device)
        for hh in range(kv * g, (kv + 1) * g):
            qs = (a["q"][t, hh].float() * a["scale"]).half().double()
            s = torch.stack([qs @ a["k_cmp"][c, kv].double() for c in range(6)])
            lse = torch.logsumexp(s[:5], 0)
            expect += torch.exp(s - lse)
        expect[[0, 4, 5]] = g
        torch.testing.assert_close(imp[t, kv, :6], expect, rtol=1e-9, atol=1e-9)
        assert bool(torch.isinf(imp[t, kv, 6:]).all())


@pytest.mark.parametrize("config", config_params(op.CONFIGS))
def test_every_config_small(config):
    """Each autotune config (constexpr path): 41 chunks exceed BC 32, S 6 pads to SP 8."""
    case = build_case([19, 330], 16, 1, 64, torch.float16, 0.125, 6, 8, DEV, seed=6)
    check_with_config(SPEC, op._run, case, config)


@pytest.mark.gpu
@pytest.mark.parametrize("config", config_params(op.CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_every_config_gpu(config, dtype):
    case = build_case([31, 1025, 4097, 2000], 32, 2, 128, dtype, 128**-0.5, 16, 32, DEV, seed=8)
    check_with_config(SPEC, op._run, case, config)


@pytest.mark.gpu
@pytest.mark.parametrize("config", config_params(op.CONFIGS))
def test_every_config_gpu_long(config):
    """bs 64, S 32 (the long-context row's shape class) with 4 score tiles per late token."""
    case = build_case([9000, 77], 32, 2, 128, torch.float16, 128**-0.5, 32, 64, DEV, seed=9)
    check_with_config(SPEC, op._run, case, config)


def _bad(**changes):
    case = build_case([40, 70], 32, 2, 64, torch.float16, 0.125, 4, 32, DEV, seed=1)
    case.inputs.update(changes)
    return case.inputs


BAD_INPUTS = {
    "q dtype": (lambda: _bad(q=f16((110, 32, 64)).float()), TypeError, "q: expected dtype float16 or bfloat16"),
    "k_cmp dtype": (lambda: _bad(k_cmp=f16((5, 2, 64)).bfloat16()), TypeError, "k_cmp: expected dtype float16"),
    "k_cmp head dim": (lambda: _bad(k_cmp=f16((5, 2, 32))), ValueError, r"k_cmp: expected shape .*got \(5, 2, 32\)"),
    "heads not divisible": (lambda: _bad(k_cmp=f16((5, 3, 64))), ValueError, "k_cmp: 3 KV heads must divide"),
    "selected zero": (lambda: _bad(selected_block_num=0), ValueError, r"selected_block_num: must lie in \[1, 64\]"),
    "selected too many": (lambda: _bad(selected_block_num=65), ValueError, "selected_block_num: must lie in"),
    "chunk_offsets inconsistent": (lambda: _bad(chunk_offsets=i32([0, 2, 4])), ValueError,
                                   "chunk_offsets: must be the prefix sums"),
    "k_cmp rows vs chunk_offsets": (lambda: _bad(k_cmp=f16((9, 2, 64))), ValueError,
                                    r"k_cmp: has 9 compressed rows, but chunk_offsets\[N\] = 5"),
    "offsets not starting at 0": (lambda: _bad(offsets=i32([1, 40, 110])), ValueError, "offsets: must start at 0"),
    "token_indices dtype": (lambda: _bad(token_indices=torch.zeros(110, 2, dtype=torch.int64, device=DEV)),
                            TypeError, "token_indices: expected dtype int32"),
    "token_indices sequence id out of range": (
        lambda: _bad(token_indices=torch.tensor([[0, i] for i in range(40)] + [[5, i] for i in range(70)],
                                                dtype=torch.int32, device=DEV)),
        ValueError, r"token_indices: row 40 is \(5, 0\)"),
    "scale nan": (lambda: _bad(scale=float("nan")), ValueError, "scale: must be finite and > 0"),
    "bs negative": (lambda: _bad(bs=-32), ValueError, "bs: must lie in"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors
    make_inputs, error, message = BAD_INPUTS[name]
    run_bad_input(nsa_topk_varlen_fwd, make_inputs(), error, message)


@pytest.mark.parametrize("bd, gp, s, want", [(128, 16, 16, (64, 32, 4)), (128, 16, 32, (64, 32, 4)),
                                             (64, 32, 8, (32, 32, 2)), (128, 16, 64, (64, 64, 4))])
def test_gpu_default_is_the_sweep_winner(monkeypatch, bd, gp, s, want):
    """On the GPU the default rule names the H200 sweep's winners: BC 32 (or the selection's width), BM 64 /
    4 warps at D 128, BM 32 / 2 warps at D 64 (the seed rows' shapes, and S 64 that needs BC 64)."""
    monkeypatch.setattr(op.runtime, "interpreting", lambda: False)
    args = {"GP": gp, "SP": s, "BD": bd}
    c = op._default(op._TUNED.valid_configs(args), args)
    assert (c.kwargs["BM"], c.kwargs["BC"], c.num_warps) == want


def test_custom_op_schema_and_fake():
    """attnops::nsa_topk_varlen_fwd as the public function calls it: no argument written, and a fake impl whose
    block_indices match the kernel's in shape, dtype and strides."""
    case = build_case([60, 33], 8, 2, 64, torch.float16, 0.125, 3, 16, DEV, seed=26)
    testing.opcheck_as_called(op, "_nsa_topk", lambda: case.run(nsa_topk_varlen_fwd))
