"""attnops inside a real model (a tiny random Llama from transformers; no download): prefill logits through
the registered attention function match transformers' SDPA path, and our paged continuous-batching loop
emits exactly transformers' greedy tokens for every request, reusing freed pages; teacher-forced along
transformers' greedy tokens, its logits match transformers' and pass the dual-reference rule against fp32
(and a perturbed copy of the model does not)."""

import copy
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llama_serving import (  # noqa: E402
    ATTN_NAME,
    PagedEngine,
    Request,
    exact_logits,
    logit_agreement,
    reference_greedy,
    reference_greedy_logits,
    register_transformers_attention,
    serve,
    serve_forced,
    tiny_llama,
)

from attnops.kernel_utils import runtime  # noqa: E402

DEV = runtime.device()


def test_prefill_logits_match_transformers_sdpa():
    register_transformers_attention()
    model = tiny_llama(device=DEV)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1)).to(DEV)
    with torch.no_grad():
        expected = model(ids).logits.float()
        model.set_attn_implementation(ATTN_NAME)
        got = model(ids).logits.float()
    err = (got - expected).norm() / expected.norm()
    assert err < 2e-3, f"logits rel. error {err:.2e}"


def _requests():
    gen = torch.Generator().manual_seed(2)
    spec = [(9, 6, 0), (17, 4, 0), (5, 7, 1), (12, 5, 5)]  # prompt length, new tokens, arrival step
    return [Request(i, torch.randint(0, 256, (n,), generator=gen).tolist(), m, a) for i, (n, m, a) in enumerate(spec)]


@pytest.mark.parametrize("backend", ["attnops", "torch"])
def test_continuous_batching_matches_transformers_greedy(backend):
    model = tiny_llama(device=DEV)
    requests = _requests()
    # 11 pages: the first three requests take them all; the late one must reuse a finished request's pages.
    engine = PagedEngine(model, num_pages=11, page_size=5, backend=backend)
    tokens = serve(engine, requests)
    for r in requests:
        assert tokens[r.rid] == reference_greedy(model, r.prompt, r.max_new_tokens), f"request {r.rid}"
    assert any(len(owners) > 1 for owners in engine.pool.owners.values()), "no page was reused"
    assert sorted(engine.pool.free) == list(range(11)), "pages leaked"


def _teacher_forced(model, backend, ref):
    requests = _requests()
    engine = PagedEngine(model, num_pages=11, page_size=5, backend=backend)
    ours = serve_forced(engine, requests, {rid: tokens for rid, (tokens, _) in ref.items()})
    assert sorted(engine.pool.free) == list(range(11)), "pages leaked"
    return ours


@pytest.fixture(scope="module")
def forced_reference():
    """transformers' greedy tokens and logits (f16 model) and fp32 logits along the same tokens."""
    model, exact_model = tiny_llama(device=DEV), tiny_llama(dtype=torch.float32, device=DEV)
    ref = {r.rid: reference_greedy_logits(model, r.prompt, r.max_new_tokens) for r in _requests()}
    exact = {r.rid: exact_logits(exact_model, r.prompt, ref[r.rid][0]) for r in _requests()}
    return model, ref, exact


@pytest.mark.parametrize("backend", ["attnops", "torch"])
def test_teacher_forced_logits_match_transformers(backend, forced_reference):
    model, ref, exact = forced_reference
    ours = _teacher_forced(model, backend, ref)
    for rid, (tokens, ref_logits) in ref.items():
        assert ours[rid].shape == ref_logits.shape == (len(tokens), 256)
        stats = logit_agreement(ours[rid], ref_logits, exact[rid])
        assert stats["max_rel_err"] < 2e-3, (rid, stats)
        assert stats["argmax_differs"] == 0 and stats["dual_ok"] and stats["ok"], (rid, stats)


def test_teacher_forced_check_fails_on_a_perturbed_layer(forced_reference):
    """Negative control: 5 % noise on one layer's MLP output weights in our copy of the model must fail both
    the tolerance and the dual rule, for every request."""
    model, ref, exact = forced_reference
    bad = copy.deepcopy(model)
    w = bad.model.layers[1].mlp.down_proj.weight
    with torch.no_grad():
        noise = torch.randn(w.shape, generator=torch.Generator().manual_seed(3)).to(w.device)
        w += (0.05 * w.float().std() * noise).to(w.dtype)
    ours = _teacher_forced(bad, "attnops", ref)
    for rid, (_, ref_logits) in ref.items():
        stats = logit_agreement(ours[rid], ref_logits, exact[rid])
        assert stats["max_rel_err"] > 2e-3 and not stats["dual_ok"] and not stats["ok"], (rid, stats)


def test_logit_agreement_flags_an_argmax_change_beyond_the_error_scale():
    """One step whose argmax differs by far more than the other steps' logit error is flagged; a near-tie
    that rounding can flip is not."""
    gen = torch.Generator().manual_seed(4)
    ref = torch.randn(16, 64, generator=gen)
    ref[:, 0] += 5.0  # token 0 wins by a wide margin at every step ...
    ref[3, 1] = ref[3, 0] - 1e-4  # ... except step 3: a near-tie with token 1
    ours = ref + 1e-3 * torch.randn(16, 64, generator=gen)
    ours[3, 1] = ours[3, 0] + 1e-4  # the near-tie flips: not flagged
    stats = logit_agreement(ours, ref)
    assert stats["argmax_differs"] == 1 and stats["argmax_differs_beyond_margin"] == 0 and stats["ok"], stats
    ours[7, 5] = ours[7, 0] + 1.0  # step 7 picks another token although token 0 led by ~5: flagged
    stats = logit_agreement(ours, ref)
    assert stats["argmax_differs"] == 2 and stats["argmax_differs_beyond_margin"] == 1 and not stats["ok"], stats
