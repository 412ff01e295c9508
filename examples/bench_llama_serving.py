"""On the H200: Llama-3-8B shapes (random weights), 8 requests of different lengths arriving over time,
64 new tokens each, in f16 and in bf16 (one fp32 initialisation, cast). Per dtype and per loop (our paged
loop on attnops; the same loop on plain torch: index writes + gather + SDPA):

* tokens per second of the greedy loop;
* greedy equality with transformers' greedy ``generate``: per request "equal" or the first diverging step;
* teacher forcing: the loop (same prefill, paged writes, paged decode) fed transformers' greedy tokens
  instead of its argmax; its logits at every step against transformers' logits at the same positions
  (max ||ours − ref|| / ||ref||, argmax differences beyond 4× the logit error scale) and, with fp32 logits of
  the same sequence, the dual-reference rule (ours vs fp32 ≤ 2 × transformers vs fp32 + 1e-4 at every step).

    python examples/bench_llama_serving.py --out /tmp/llama.json            # H200, ~3 min
    python examples/bench_llama_serving.py --tiny --out /tmp/llama-tiny.json  # CPU smoke run (interpreter)

The JSON is rewritten after each dtype, so a run cut short keeps the dtypes it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_serving import (  # noqa: E402
    PagedEngine,
    Request,
    exact_logits,
    logit_agreement,
    pages_needed,
    reference_greedy_logits,
    serve,
    serve_forced,
)

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192,
                 rope_theta=500000.0, attn_implementation="sdpa")
LLAMA3_8B_LENS = [1000, 130, 517, 64, 2048, 300, 777, 1500]
TINY = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=512, attn_implementation="sdpa")
TINY_LENS = [9, 17, 5, 12]
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def build_model(cfg: dict, dtype: torch.dtype, device: str):
    """A randomly initialised Llama, built directly on ``device`` in ``dtype`` (seed 0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    finally:
        torch.set_default_dtype(previous)
    return model


def cast_copy(master, cfg: dict, dtype: torch.dtype, device: str):
    """``master``'s weights rounded to ``dtype`` (a fresh model, so the fp32 master stays)."""
    model = build_model(cfg, dtype, device)
    model.load_state_dict(master.state_dict())
    return model


def make_requests(n: int, new_tokens: int, vocab: int, lens: list[int]) -> list[Request]:
    gen = torch.Generator().manual_seed(1)
    return [Request(i, torch.randint(0, vocab, (lens[i % len(lens)],), generator=gen).tolist(), new_tokens,
                    arrival_step=2 * i) for i in range(n)]


def sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def new_engine(model, requests, page_size, backend):
    return PagedEngine(model, pages_needed(requests, page_size) + 4, page_size, backend=backend)


def run_dtype(master, cfg: dict, dtype_name: str, args, lens: list[int], device: str) -> dict:
    t0 = time.perf_counter()
    model = cast_copy(master, cfg, DTYPES[dtype_name], device)
    spec = lambda: make_requests(args.requests, args.new_tokens, cfg["vocab_size"], lens)  # noqa: E731
    out = {"dtype": str(DTYPES[dtype_name])}

    # transformers' greedy tokens and logits, and fp32 logits along the same tokens
    start = time.perf_counter()
    ref = {r.rid: reference_greedy_logits(model, r.prompt, r.max_new_tokens) for r in spec()}
    sync(device)
    out["reference_seconds"] = time.perf_counter() - start
    exact = {r.rid: exact_logits(master, r.prompt, ref[r.rid][0]) for r in spec()}
    out["reference_tokens"] = {rid: tokens for rid, (tokens, _) in ref.items()}

    for backend in ("attnops", "torch"):
        requests = spec()
        engine = new_engine(model, requests, args.page_size, backend)
        serve(engine, make_requests(2, 4, cfg["vocab_size"], lens))  # warm-up: compiles kernels, allocates
        sync(device)
        start = time.perf_counter()
        tokens = serve(engine, requests)
        sync(device)
        seconds = time.perf_counter() - start
        generated = sum(len(t) for t in tokens.values())
        greedy = {}
        for rid, (ref_tokens, _) in ref.items():
            diff = next((i for i, (a, b) in enumerate(zip(tokens[rid], ref_tokens)) if a != b), None)
            greedy[rid] = "equal" if diff is None and len(tokens[rid]) == len(ref_tokens) else diff
        requests = spec()
        forced = serve_forced(new_engine(model, requests, args.page_size, backend), requests,
                              {rid: t for rid, (t, _) in ref.items()})
        tf = {rid: logit_agreement(forced[rid], ref[rid][1], exact[rid]) for rid in ref}
        out[backend] = {
            "seconds": seconds, "tokens": generated, "tokens_per_s": generated / seconds,
            "greedy_first_divergence": greedy,
            "greedy_equal": sum(v == "equal" for v in greedy.values()),
            "teacher_forced": tf,
            "teacher_forced_ok": sum(s["ok"] for s in tf.values()),
            "tokens_out": tokens,
        }
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    out["wall_seconds"] = time.perf_counter() - t0
    return out


def print_table(name: str, run: dict, n: int):
    print(f"\n== {name} ({run['dtype']}), {run['wall_seconds']:.0f} s; transformers generate "
          f"{run['reference_seconds']:.1f} s")
    print(f"{'loop':8s} {'tok/s':>7s} {'greedy=':>7s}  {'TF ok':>5s} {'max rel err':>11s} {'vs fp32':>9s} "
          f"{'tf vs fp32':>10s} {'argmax≠':>7s} {'beyond':>6s}  first divergence")
    for backend in ("attnops", "torch"):
        b = run[backend]
        tf = b["teacher_forced"].values()
        print(f"{backend:8s} {b['tokens_per_s']:7.1f} {b['greedy_equal']:>3d}/{n:<3d}  "
              f"{b['teacher_forced_ok']:>2d}/{n:<2d} {max(s['max_rel_err'] for s in tf):11.2e} "
              f"{max(s['max_rel_err_vs_fp32'] for s in tf):9.2e} {max(s['ref_max_rel_err_vs_fp32'] for s in tf):10.2e} "
              f"{sum(s['argmax_differs'] for s in tf):7d} {sum(s['argmax_differs_beyond_margin'] for s in tf):6d}  "
              f"{list(b['greedy_first_divergence'].values())}", flush=True)


def git_head() -> str | None:
    if os.environ.get("ATTNOPS_GIT_SHA"):  # a GPU machine's copy of the tree may carry a stale .git
        return os.environ["ATTNOPS_GIT_SHA"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:
        return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--layers", type=int, default=None, help="default: 32 (2 with --tiny)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--tiny", action="store_true", help="tiny Llama on the default device (CPU smoke run)")
    p.add_argument("--out", default="llama-serving.json")
    args = p.parse_args()
    if args.tiny:
        from attnops.kernel_utils import runtime

        base, lens, device = TINY, TINY_LENS, str(runtime.device())
    else:
        base, lens, device = LLAMA3_8B, LLAMA3_8B_LENS, "cuda"
    cfg = {**base, "num_hidden_layers": args.layers or base["num_hidden_layers"]}
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
    torch.backends.cudnn.allow_tf32 = False
    start = time.perf_counter()
    master = build_model(cfg, torch.float32, device)
    sync(device)
    probe = make_requests(args.requests, args.new_tokens, cfg["vocab_size"], lens)
    result = {
        "config": cfg, "requests": args.requests, "new_tokens": args.new_tokens, "page_size": args.page_size,
        "prompt_lens": [len(r.prompt) for r in probe], "arrival_steps": [r.arrival_step for r in probe],
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device, "git": git_head(),
        "checks": {"teacher_forced": "logit_agreement(margin_factor=4, factor=2, floor=1e-4); fp32 logits of the "
                                     "same sequence from the fp32 master the dtype models are cast from"},
        "init_seconds": time.perf_counter() - start, "runs": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"model init (fp32) {result['init_seconds']:.1f} s", flush=True)
    for name in args.dtype:
        result["runs"][name] = run = run_dtype(master, cfg, name, args, lens, device)
        out.write_text(json.dumps(result, indent=1))
        print_table(name, run, args.requests)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
