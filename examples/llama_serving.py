"""A Llama-architecture transformers model served on attnops: a paged KV cache, continuous batching, greedy
decoding. Two entry points:

* ``register_transformers_attention()`` makes ``attn_implementation="attnops"`` available to transformers
  models (prefill and decode through ``gqa_dense_fwd``, unpadded batches);
* ``PagedEngine`` + ``serve()``: our own serving loop on the model's weights. New requests are prefilled
  together through ``gqa_varlen_fwd``; their keys and values go into a shared page pool with
  ``paged_kv_cache_write_fwd``; every step decodes all running requests with ``gqa_paged_fwd``; pages
  of finished requests return to the free list and are reused.

``backend="torch"`` runs the same loop with plain torch (index writes into the pool, gather + SDPA) as the
baseline the throughput table compares against.

Teacher forcing (``serve_forced``): the same loop, same prefill / paged write / paged decode, except that each
request emits the tokens it is given instead of its argmax, keeping its logits; ``logit_agreement`` compares
them with transformers' logits along the same sequence (``reference_greedy_logits``) and, optionally, with
fp32 logits of the same sequence (``exact_logits``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnops.attn_core import gqa_dense_fwd, gqa_paged_fwd, gqa_varlen_fwd
from attnops.kvcache_ops import paged_kv_cache_write_fwd

ATTN_NAME = "attnops"


def attnops_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function: ``query [B, H, S_q, D]``, ``key/value [B, H_kv, S_kv, D]`` ->
    ``([B, S_q, H, D], None)``. Causal, bottom-right aligned (decode with a cache included); sliding windows
    from ``module.sliding_window``. Padded batches are not supported (the mask is not read)."""
    window = getattr(module, "sliding_window", None)
    out = gqa_dense_fwd(
        query.transpose(1, 2).contiguous(), key.transpose(1, 2).contiguous(), value.transpose(1, 2).contiguous(),
        is_causal=True, sm_scale=scaling, window_size_left=window - 1 if window else -1,
    )
    return out, None


def register_transformers_attention():
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTN_NAME, attnops_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


@dataclass
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    arrival_step: int = 0
    generated: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    cached: int = 0  # tokens whose K/V are in the pool
    forced: list[int] | None = None  # teacher forcing: emit these tokens instead of our argmax
    keep_logits: bool = False  # keep every step's logits row (float32) in ``logits``
    logits: list[torch.Tensor] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.generated) >= self.max_new_tokens


class PagePool:
    """K and V pages for every layer (``[NP, PS, H_kv, D]`` each) and a free list of page ids."""

    def __init__(self, layers, num_pages, page_size, kv_heads, head_dim, dtype, device):
        shape = (num_pages, page_size, kv_heads, head_dim)
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.page_size = page_size
        self.free = list(range(num_pages))
        self.owners: dict[int, set[int]] = {}  # page -> requests that have held it (to show reuse)

    def reserve(self, req: Request, tokens: int):
        while len(req.pages) * self.page_size < tokens:
            if not self.free:
                raise RuntimeError("page pool exhausted")
            page = self.free.pop(0)
            req.pages.append(page)
            self.owners.setdefault(page, set()).add(req.rid)

    def release(self, req: Request):
        self.free.extend(req.pages)
        req.pages = []

    def slots(self, req: Request, start: int, stop: int) -> list[int]:
        return [req.pages[p // self.page_size] * self.page_size + p % self.page_size for p in range(start, stop)]

    def table(self, reqs: list[Request], device) -> torch.Tensor:
        width = max(len(r.pages) for r in reqs)
        return torch.tensor([r.pages + [0] * (width - len(r.pages)) for r in reqs], dtype=torch.int32, device=device)


class PagedEngine:
    """Runs a transformers Llama/Qwen3 model's layers on packed tokens with paged attention."""

    def __init__(self, model, num_pages: int, page_size: int, backend: str = "attnops"):
        cfg = model.config
        self.model = model
        self.backend = backend
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.pool = PagePool(cfg.num_hidden_layers, num_pages, page_size, self.kv_heads, self.head_dim,
                             self.dtype, self.device)

    # --- the model, on packed tokens ---------------------------------------------------------------

    @torch.no_grad()
    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend, last_rows: torch.Tensor):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        body = self.model.model
        h = body.embed_tokens(tokens)
        cos, sin = body.rotary_emb(h[None], positions[None])
        n = tokens.shape[0]
        for i, layer in enumerate(body.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(n, self.heads, self.head_dim)
            k = attn.k_proj(x).view(n, self.kv_heads, self.head_dim)
            v = attn.v_proj(x).view(n, self.kv_heads, self.head_dim)
            if hasattr(attn, "q_norm"):  # Qwen3: per-head RMSNorm before RoPE
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
            q, k = q[0].transpose(0, 1).contiguous(), k[0].transpose(0, 1).contiguous()
            o = attend(i, q, k, v.contiguous(), attn.scaling)
            h = h + attn.o_proj(o.reshape(n, self.heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(body.norm(h[last_rows]))

    # --- cache writes and attention, per backend ----------------------------------------------------

    def _write(self, layer: int, k, v, slots: torch.Tensor):
        if self.backend == "attnops":
            paged_kv_cache_write_fwd(k, v, self.pool.k[layer], self.pool.v[layer], slots)
        else:
            self.pool.k[layer].view(-1, self.kv_heads, self.head_dim).index_copy_(0, slots, k)
            self.pool.v[layer].view(-1, self.kv_heads, self.head_dim).index_copy_(0, slots, v)

    def _torch_attention(self, q, k, v, scale, causal_offset: int):
        """SDPA over one request: q [S_q, H, D], k/v [S_kv, H_kv, D], bottom-right causal."""
        s_q, s_kv = q.shape[0], k.shape[0]
        mask = torch.ones(s_q, s_kv, dtype=torch.bool, device=q.device).tril(causal_offset)
        o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           attn_mask=mask, scale=scale, enable_gqa=True)
        return o.transpose(0, 1)

    @torch.no_grad()
    def prefill(self, reqs: list[Request]):
        """Prompts of the new requests, packed: K/V into the pool, causal attention over themselves."""
        lens = [len(r.prompt) for r in reqs]
        for r in reqs:
            self.pool.reserve(r, len(r.prompt))
        tokens = torch.tensor([t for r in reqs for t in r.prompt], device=self.device)
        positions = torch.cat([torch.arange(n, device=self.device) for n in lens])
        slots = torch.tensor([s for r in reqs for s in self.pool.slots(r, 0, len(r.prompt))], device=self.device)
        cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=self.device)

        def attend(layer, q, k, v, scale):
            self._write(layer, k, v, slots)
            if self.backend == "attnops":
                return gqa_varlen_fwd(q, k, v, cu, cu, is_causal=True, sm_scale=scale,
                                      max_seqlen_q=max(lens), max_seqlen_kv=max(lens))
            return torch.cat([self._torch_attention(q[a:b], k[a:b], v[a:b], scale, 0)
                              for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())])

        logits = self._forward(tokens, positions, attend, cu[1:].long() - 1)
        for r in reqs:
            r.cached = len(r.prompt)
        self._emit(reqs, logits)

    @torch.no_grad()
    def decode(self, reqs: list[Request]):
        """One new token for every running request: its K/V written at its next slot, then paged attention
        over everything it has cached (the new token included)."""
        for r in reqs:
            self.pool.reserve(r, r.cached + 1)
        tokens = torch.tensor([r.generated[-1] for r in reqs], device=self.device)
        positions = torch.tensor([r.cached for r in reqs], device=self.device)
        slots = torch.tensor([self.pool.slots(r, r.cached, r.cached + 1)[0] for r in reqs], device=self.device)
        seqlens = torch.tensor([r.cached + 1 for r in reqs], dtype=torch.int32, device=self.device)
        table = self.pool.table(reqs, self.device)
        cu_q = torch.arange(len(reqs) + 1, dtype=torch.int32, device=self.device)

        def attend(layer, q, k, v, scale):
            self._write(layer, k, v, slots)
            k_pages, v_pages = self.pool.k[layer], self.pool.v[layer]
            if self.backend == "attnops":
                return gqa_paged_fwd(q, k_pages, v_pages, table, seqlens, cu_q, is_causal=True, sm_scale=scale)
            outs = []
            for b, r in enumerate(reqs):
                rows = torch.tensor(self.pool.slots(r, 0, r.cached + 1), device=self.device)
                kb = k_pages.view(-1, self.kv_heads, self.head_dim)[rows]
                vb = v_pages.view(-1, self.kv_heads, self.head_dim)[rows]
                outs.append(self._torch_attention(q[b : b + 1], kb, vb, scale, r.cached))
            return torch.cat(outs)

        logits = self._forward(tokens, positions, attend, torch.arange(len(reqs), device=self.device))
        for r in reqs:
            r.cached += 1
        self._emit(reqs, logits)

    @staticmethod
    def _emit(reqs: list[Request], logits: torch.Tensor):
        """The next token of every request: our argmax, or under teacher forcing the given token."""
        for r, row, tok in zip(reqs, logits, logits.argmax(-1).tolist()):
            if r.keep_logits:
                r.logits.append(row.to(torch.float32, copy=True))
            r.generated.append(tok if r.forced is None else r.forced[len(r.generated)])


def serve(engine: PagedEngine, requests: list[Request]) -> dict[int, list[int]]:
    """Continuous batching: each step admits the requests that have arrived (one packed prefill), decodes
    every request admitted earlier, and retires finished ones, whose pages go back to the pool."""
    waiting = sorted(requests, key=lambda r: r.arrival_step)
    running: list[Request] = []
    step = 0
    while waiting or running:
        arrived = [r for r in waiting if r.arrival_step <= step]
        waiting = [r for r in waiting if r.arrival_step > step]
        if running:
            engine.decode(running)
        if arrived:
            engine.prefill(arrived)
            running += arrived
        for r in [r for r in running if r.done]:
            engine.pool.release(r)
        running = [r for r in running if not r.done]
        step += 1
    return {r.rid: r.generated for r in requests}


def serve_forced(engine: PagedEngine, requests: list[Request], forced: dict[int, list[int]]) -> dict[int, torch.Tensor]:
    """``serve()`` with teacher forcing: request ``rid`` emits ``forced[rid]`` (its ``max_new_tokens`` tokens,
    e.g. transformers' greedy tokens) instead of its argmax, through the same prefill, paged writes and paged
    decode steps. Returns our logits per request, ``[max_new_tokens, vocab]`` float32: row i is the
    prediction after the prompt and ``forced[rid][:i]``."""
    for r in requests:
        if len(forced[r.rid]) != r.max_new_tokens:
            raise ValueError(f"request {r.rid}: {len(forced[r.rid])} forced tokens, {r.max_new_tokens} expected")
        r.forced, r.keep_logits = list(forced[r.rid]), True
    serve(engine, requests)
    return {r.rid: torch.stack(r.logits) for r in requests}


def reference_greedy_logits(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy ``generate``: its tokens and its logits at every step (``[n, vocab]`` float32)."""
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    out = model.generate(ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt) :].tolist(), torch.cat(out.logits).float()


@torch.no_grad()
def exact_logits(model, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    """Logits of ``model`` (pass an fp32 copy) at the positions that predict ``continuation``, in one forward
    over ``prompt + continuation[:-1]``: ``[len(continuation), vocab]`` float32."""
    ids = torch.tensor([prompt + continuation[:-1]], device=next(model.parameters()).device)
    return model(ids, logits_to_keep=len(continuation)).logits[0].float()


def _rel_rows(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    x, ref = x.double(), ref.double()
    return (x - ref).norm(dim=-1) / ref.norm(dim=-1)


def logit_agreement(ours: torch.Tensor, ref: torch.Tensor, exact: torch.Tensor | None = None, *,
                    margin_factor: float = 4.0, factor: float = 2.0, floor: float = 1e-4) -> dict:
    """Teacher-forced comparison of our logits with transformers' (``ref``) along the same sequence, one row
    per step:

    * ``max_rel_err``: max over steps of ||ours − ref|| / ||ref||;
    * ``error_scale``: median over steps of max |ours − ref| (with ``exact``, at least the median of
      max |ref − exact|, transformers' own rounding); ``argmax_differs_beyond_margin`` counts steps where our
      argmax differs from transformers' although its top-2 margin exceeds ``margin_factor`` × that scale;
    * with ``exact`` (fp32 logits of the same sequence), the dual-reference rule per step:
      rel(ours, exact) ≤ ``factor`` × rel(ref, exact) + ``floor``.

    ``ok``: no argmax difference beyond the margin, and the dual rule at every step (when checked)."""
    ours, ref = ours.float(), ref.float()
    abs_err = (ours - ref).abs().amax(-1)
    scale = abs_err.median()
    top2 = ref.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    differs = ours.argmax(-1) != ref.argmax(-1)
    stats = {"steps": ours.shape[0], "max_rel_err": _rel_rows(ours, ref).max().item(),
             "max_abs_err": abs_err.max().item()}
    if exact is not None:
        exact = exact.float()
        scale = torch.maximum(scale, (ref - exact).abs().amax(-1).median())
        e_ours, e_ref = _rel_rows(ours, exact), _rel_rows(ref, exact)
        stats.update(max_rel_err_vs_fp32=e_ours.max().item(), ref_max_rel_err_vs_fp32=e_ref.max().item(),
                     dual_ok=bool((e_ours <= factor * e_ref + floor).all()))
    flagged = differs & (margin > margin_factor * scale)
    stats.update(error_scale=scale.item(), argmax_differs=int(differs.sum()),
                 argmax_differs_beyond_margin=int(flagged.sum()),
                 min_margin_where_argmax_differs=margin[differs].min().item() if bool(differs.any()) else None)
    stats["ok"] = stats["argmax_differs_beyond_margin"] == 0 and stats.get("dual_ok", True) and \
        bool(torch.isfinite(ours).all())
    return stats


def reference_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy ``generate`` (its SDPA attention), the tokens only."""
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    out = model.generate(ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def tiny_llama(seed: int = 0, dtype=torch.float16, device="cpu", **overrides):
    """A small randomly initialised Llama (no download) for tests."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=64, max_position_embeddings=512, attn_implementation="sdpa")
    cfg.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**cfg)).to(device=device, dtype=dtype).eval()


def pages_needed(requests: list[Request], page_size: int) -> int:
    return sum(math.ceil((len(r.prompt) + r.max_new_tokens) / page_size) for r in requests)
