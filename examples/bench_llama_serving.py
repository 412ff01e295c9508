"""On the H200: Llama-3-8B shapes (random weights, bf16), 8 requests of different lengths arriving over
time, 64 new tokens each. Checks that our paged loop's greedy tokens equal transformers' greedy
``generate`` for every request, then reports tokens per second of the loop on attnops against the same
loop on plain torch (index writes + gather + SDPA).

    python examples/bench_llama_serving.py --out /tmp/llama.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_serving import PagedEngine, Request, pages_needed, reference_greedy, serve  # noqa: E402

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192,
                 rope_theta=500000.0, attn_implementation="sdpa")


def build_model(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**{**LLAMA3_8B, "num_hidden_layers": layers})).eval()
    torch.set_default_dtype(torch.float32)
    return model


def make_requests(n: int, new_tokens: int) -> list[Request]:
    gen = torch.Generator().manual_seed(1)
    lens = [1000, 130, 517, 64, 2048, 300, 777, 1500][:n]
    return [Request(i, torch.randint(0, 128256, (lens[i % len(lens)],), generator=gen).tolist(), new_tokens,
                    arrival_step=2 * i) for i in range(n)]


def timed_serve(model, backend: str, n: int, new_tokens: int, page_size: int):
    requests = make_requests(n, new_tokens)
    engine = PagedEngine(model, pages_needed(requests, page_size) + 4, page_size, backend=backend)
    serve(engine, make_requests(2, 4))  # warm-up: compiles kernels, allocates
    torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = serve(engine, requests)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return tokens, seconds, requests


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--out", default="llama-serving.json")
    args = p.parse_args()
    model = build_model(args.layers)
    result = {"config": {**LLAMA3_8B, "num_hidden_layers": args.layers}, "requests": args.requests,
              "new_tokens": args.new_tokens, "page_size": args.page_size, "gpu": torch.cuda.get_device_name()}
    outputs = {}
    for backend in ("attnops", "torch"):
        tokens, seconds, requests = timed_serve(model, backend, args.requests, args.new_tokens, args.page_size)
        generated = sum(len(t) for t in tokens.values())
        outputs[backend] = tokens
        result[backend] = {"seconds": seconds, "tokens": generated, "tokens_per_s": generated / seconds}
        print(f"{backend:8s} {generated} tokens in {seconds:.2f} s = {generated / seconds:.1f} tok/s", flush=True)
    reference = {r.rid: reference_greedy(model, r.prompt, r.max_new_tokens) for r in requests}
    for backend, tokens in outputs.items():
        same = {rid: tokens[rid] == reference[rid] for rid in reference}
        first_diff = {rid: next((i for i, (a, b) in enumerate(zip(tokens[rid], reference[rid])) if a != b), None)
                      for rid in reference}
        result[backend]["greedy_equal"] = same
        result[backend]["first_divergence"] = first_diff
        print(f"{backend:8s} greedy equal to transformers: {sum(same.values())}/{len(same)} "
              f"first divergence {first_diff}", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
