"""attnops inside a real model (a tiny random Llama from transformers; no download): prefill logits through
the registered attention function match transformers' SDPA path, and our paged continuous-batching loop
emits exactly transformers' greedy tokens for every request, reusing freed pages."""

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
    reference_greedy,
    register_transformers_attention,
    serve,
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
