"""Probe for issue 4's serving-step floor (docs/perf/attn-core.md, forty-ninth session): can a memory stream run on
the SMs of the persistent warp-specialized prefill, as programs resident beside its programs, and what does each
lose? The prefill is llama-8b-serving-step's (one request, 1024 queries over 4096 keys, 32 / 8 heads, D = 128,
causal, bf16) through ``gqa_varlen_fwd`` with a forced config; the stream stands in for the row's 30 decodes: 503 MB
read by one small program per SM (``stream_kernel``: loads and a running max, no attention math). The prefill's
consumers at fewer registers (``WsConfig.consumer_regs``) leave the register file room for a stream program; at
FA3's 240 they fill it, so that pair is the control (the two kernels can only take turns on an SM).

Each variant's output is checked first (the prefill against torch's attention in fp32, and bitwise against the
240-register build; the stream's maxima against torch's); then every variant is timed as the benchmarks are
(``timing.measure``: CUPTI, cold L2, median) with the per-kernel times (``timing.kernel_breakdown``).

    python -m benchmarks.probe_coresident --out /tmp/coresident.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import torch
import triton
import triton.language as tl

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd import ws_launch
from attnops.attn_core.gqa_varlen_fwd.op import gqa_varlen_fwd
from attnops.kernel_utils import runtime

from .timing import L2Flusher, kernel_breakdown, measure

Q_LEN, KV_LEN, HEADS, KV_HEADS, DIM = 1024, 4096, 32, 8, 128
DECODE_BYTES = 30 * 4096 * 8 * 128 * 2 * 2  # the serving-step row's 30 decodes' K and V
STREAM_WIDTH = 128  # bf16 columns of a stream chunk (a K or V row of one head)
STREAM_WARPS, STREAM_REGS = 4, 40  # 4 x 32 x 40 = 5 K registers: fits beside a 216-register prefill (7 K left)


@triton.jit
def stream_kernel(src_ptr, out_ptr, n_chunks, ROWS: tl.constexpr, WIDTH: tl.constexpr, STAGES: tl.constexpr):
    """Program p reads chunks p, p + grid, ... of [ROWS, WIDTH] bf16 (software-pipelined, STAGES deep) and stores
    their elementwise max, so no load is dead."""
    offs = tl.arange(0, ROWS)[:, None] * WIDTH + tl.arange(0, WIDTH)[None, :]
    acc = tl.full([ROWS, WIDTH], float("-inf"), tl.float32)
    for c in tl.range(tl.program_id(0), n_chunks, tl.num_programs(0), num_stages=STAGES):
        acc = tl.maximum(acc, tl.load(src_ptr + c.to(tl.int64) * (ROWS * WIDTH) + offs).to(tl.float32))
    tl.store(out_ptr + tl.program_id(0) * (ROWS * WIDTH) + offs, acc)


def _reference(q, k, v):
    """fp32 causal attention, queries at the last Q_LEN of KV_LEN positions, GQA by repeating K / V."""
    g = HEADS // KV_HEADS
    qf, kf, vf = (t.float().transpose(0, 1) for t in (q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)))
    s = qf @ kf.transpose(1, 2) / DIM**0.5
    pos_q = torch.arange(KV_LEN - Q_LEN, KV_LEN, device=q.device)[:, None]
    s = s.masked_fill(torch.arange(KV_LEN, device=q.device)[None, :] > pos_q, float("-inf"))
    return (s.softmax(-1) @ vf).transpose(0, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    q = torch.randn(Q_LEN, HEADS, DIM, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(KV_LEN, KV_HEADS, DIM, device=dev, dtype=torch.bfloat16) for _ in range(2))
    cu_q = torch.tensor([0, Q_LEN], device=dev, dtype=torch.int32)
    cu_kv = torch.tensor([0, KV_LEN], device=dev, dtype=torch.int32)
    sms = runtime.num_sms()
    side = torch.cuda.Stream()

    def prefill(cfg):
        with fwd.forced(config=cfg):
            return gqa_varlen_fwd(q, k, v, cu_q, cu_kv, is_causal=True, max_seqlen_q=Q_LEN, max_seqlen_kv=KV_LEN)

    def stream(rows, stages):
        chunk = rows * STREAM_WIDTH
        src = torch.randn(DECODE_BYTES // 2 // chunk * chunk, device=dev).to(torch.bfloat16)
        out = torch.empty(sms, rows, STREAM_WIDTH, device=dev)
        n_chunks = src.numel() // chunk

        def run():
            stream_kernel[(sms,)](src, out, n_chunks, ROWS=rows, WIDTH=STREAM_WIDTH, STAGES=stages,
                                  num_warps=STREAM_WARPS, maxnreg=STREAM_REGS)
            return out

        want = src.view(n_chunks, rows, STREAM_WIDTH).float()
        want = torch.stack([want[i::sms].amax(0) for i in range(sms)])
        return run, want

    def both(cfg, run_stream):
        def run():  # the prefill queued first, so its persistent programs hold every SM when the stream's arrive
            side.wait_stream(torch.cuda.current_stream())  # (forked before the prefill: the side waits for the flush)
            out = prefill(cfg)
            with torch.cuda.stream(side):
                run_stream()
            torch.cuda.current_stream().wait_stream(side)
            return out
        return run

    ref = _reference(q, k, v)
    # (prefill config, stream chunk rows, stream stages): the serving-step default's tile (197 KB of shared memory:
    # ~30 KB left, 6 stages of 4 KB) and the 64-key tile (164 KB: 12 stages)
    pairs = [(ws_launch.WsConfig(128, 2, overlap=True, early_k_release=True, lazy_rescale=True), 16, 6),
             (ws_launch.WsConfig(64, 3, overlap=True), 16, 12)]
    report, impls, checks = {"device": torch.cuda.get_device_name()}, {}, {}
    for base, rows, stages in pairs:
        run_stream, want = stream(rows, stages)
        checks[f"stream {rows}x{STREAM_WIDTH} s{stages}"] = bool(torch.equal(run_stream(), want))
        impls[f"stream {rows}x{STREAM_WIDTH} s{stages}"] = run_stream
        outs = {}
        for regs in (240, 216):
            cfg = replace(base, consumer_regs=regs)
            outs[regs] = prefill(cfg).clone()
            err = ((outs[regs].float() - ref).abs().max() / ref.abs().max()).item()
            checks[f"{cfg.name} rel err"] = err
            impls[cfg.name] = lambda cfg=cfg: prefill(cfg)
            impls[f"{cfg.name} + stream"] = both(cfg, run_stream)
            paired = impls[f"{cfg.name} + stream"]().clone()
            torch.cuda.synchronize()
            checks[f"{cfg.name} + stream: prefill bitwise alone"] = bool(torch.equal(paired, outs[regs]))
        checks[f"{base.name} r216 bitwise r240"] = bool(torch.equal(outs[216], outs[240]))
    report["checks"] = checks
    bad = [n for n, c in checks.items() if c is False or (isinstance(c, float) and not c < 2e-2)]
    if bad:
        raise SystemExit(f"checks failed: {bad} ({checks})")
    flush = L2Flusher()
    timed = measure(impls, flush)
    report["ms"] = {n: t.median_ms for n, t in timed.items()}
    report["kernels_ms"] = {n: kernel_breakdown(fn, 10, flush) for n, fn in impls.items() if "+" in n}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    for n, ms in report["ms"].items():
        print(f"{n:40s} {ms * 1e3:8.1f} us  {DECODE_BYTES / ms / 1e9 if n.startswith('stream') else 0:6.2f} TB/s")
    for n, parts in report["kernels_ms"].items():
        print(f"{n:40s} " + ", ".join(f"{k[:28]} {v * 1e3:.1f}" for k, v in parts.items()))


if __name__ == "__main__":
    main()
