"""Probe for issue 4's serving-step floor (docs/perf/attn-core.md, forty-ninth session): can a memory stream run on
the SMs of the persistent warp-specialized prefill, as programs resident beside its programs, and what does each
lose? The prefill is llama-8b-serving-step's (one request, 1024 queries over 4096 keys, 32 / 8 heads, D = 128,
causal, bf16) through ``gqa_varlen_fwd`` with a forced config; the stream stands in for the row's 30 decodes: 503 MB
read by one small program per SM (``stream_kernel``: loads and a running max, no attention math). The prefill's
consumers at fewer registers (``WsConfig.consumer_regs``) leave the register file room for a stream program; at
FA3's 240 they fill it, so that pair is the control (the two kernels can only take turns on an SM). Two orders: the
stream on a side stream (whichever kernel's programs reach the SMs first), and the stream as the prefill's
programmatic dependent on the same stream (``WsConfig.launch_dependents``, ``launch_pdl``): its programs can then
only join SMs the prefill's programs already hold.

The third form (fiftieth session) puts the decode's math in: ``coresident_decode``'s paged GQA decode (the row's
30 decodes, 4 warps, at the registers the prefill leaves) alone and as the prefill's dependent. Besides the
benchmarks' timing, each variant's ``held span``: the GPU asleep while the host queues a marker, the variant and a
marker, so no host latency splits a pair (probe 3's dependent stream started ~55 µs into the prefill). Its last run
(fifty-first session) closed the co-resident form: beside the prefill every memory kernel here ran ~30 % slower
than alone, whatever it kept in flight.

Each variant's output is checked first (the prefill against the op's shipped fp32 reference by the dual-reference
rule, and bitwise against the 240-register build and alone; the stream's maxima against torch's; the decode
against ``gqa_paged_fwd_ref`` by the same rule); then every variant is timed as the benchmarks are
(``timing.measure``: CUPTI, cold L2, median) with the per-kernel times (``timing.kernel_breakdown``).

    python -m benchmarks.probe_coresident --out /tmp/coresident.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace

import torch
import triton
import triton.language as tl

from attnops.attn_core.flash_fwd import launch as fwd
from attnops.attn_core.flash_fwd import ws_launch
from attnops.attn_core.gqa_paged_fwd.reference import gqa_paged_fwd_ref
from attnops.attn_core.gqa_varlen_fwd.op import gqa_varlen_fwd
from attnops.attn_core.gqa_varlen_fwd.reference import gqa_varlen_fwd_ref
from attnops.kernel_utils import runtime, testing

from .coresident_decode import chunk_count, merge, paged_decode_chunks_kernel
from .timing import L2Flusher, kernel_breakdown, measure

Q_LEN, KV_LEN, HEADS, KV_HEADS, DIM = 1024, 4096, 32, 8, 128
DECODE_BYTES = 30 * 4096 * 8 * 128 * 2 * 2  # the serving-step row's 30 decodes' K and V
STREAM_WIDTH = 128  # bf16 columns of a stream chunk (a K or V row of one head)
STREAM_WARPS, STREAM_REGS = 4, 40  # 4 x 32 x 40 = 5 K registers: fits beside a 216-register prefill (7 K left)
STREAM_BATCH_BYTES = 128 * 1024  # what a stream program takes from the shared counter at a time
DECODES, PAGE = 30, 64  # the serving-step row's decodes (each 4096 keys: DECODE_BYTES) and its page size
DECODE_CHUNK = 512  # keys a decode work item: 1920 items, ~14 a program


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def stream_kernel(src_ptr, out_ptr, next_ptr, trace_ptr, n_batches, ROWS: tl.constexpr, WIDTH: tl.constexpr,
                  STAGES: tl.constexpr, BATCH: tl.constexpr):
    """Each program takes batches of BATCH chunks of [ROWS, WIDTH] bf16 from a shared counter (``next_ptr``, zero
    before the launch; so a program that starts late or shares its SM takes fewer, rather than holding the launch
    back) and reads each batch software-pipelined, STAGES deep, into an elementwise max it stores (no load is dead).
    ``trace_ptr``: per program its SM, start and end (globaltimer, ns), where programs ran and when."""
    pid = tl.program_id(0)
    start = _now()
    offs = tl.arange(0, ROWS)[:, None] * WIDTH + tl.arange(0, WIDTH)[None, :]
    acc = tl.full([ROWS, WIDTH], float("-inf"), tl.float32)
    b = tl.atomic_add(next_ptr, 1)
    while b < n_batches:
        base = src_ptr + b.to(tl.int64) * (BATCH * ROWS * WIDTH)
        for c in tl.range(0, BATCH, num_stages=STAGES):
            acc = tl.maximum(acc, tl.load(base + c * (ROWS * WIDTH) + offs).to(tl.float32))
        b = tl.atomic_add(next_ptr, 1)
    tl.store(out_ptr + pid * (ROWS * WIDTH) + offs, acc)
    sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(trace_ptr + pid * 3, sm.to(tl.int64))
    tl.store(trace_ptr + pid * 3 + 1, start)
    tl.store(trace_ptr + pid * 3 + 2, _now())


@triton.jit
def mark_kernel(marks_ptr, slot):
    """One thread stores the global timer (ns) at ``marks_ptr[slot]``: the span between two of these brackets the
    kernels queued between them."""
    tl.store(marks_ptr + slot, _now())


HOLD_CYCLES = 4_000_000  # ~2 ms of torch.cuda._sleep: longer than the host takes to queue a pair and its markers
SPAN_ITERS = 30


def _span_us(fn, marks, flush) -> tuple[float, object]:
    """Median device span (µs) of ``fn``'s kernels with no host latency inside it: the GPU sleeps while the host
    queues a marker, ``fn`` and a marker, so the second kernel of a pair starts as soon as the GPU lets it (the
    benchmarks' union of kernel intervals counts the gap the host leaves between two launches as overlap lost:
    probe 3's dependent stream began ~55 µs into the prefill). Also the first marker's time of the last call."""
    spans = []
    for _ in range(SPAN_ITERS):
        flush()
        torch.cuda._sleep(HOLD_CYCLES)
        mark_kernel[(1,)](marks, 0)
        fn()
        mark_kernel[(1,)](marks, 1)
        torch.cuda.synchronize()
        t0, t1 = marks.tolist()
        spans.append((t1 - t0) / 1e3)
    return statistics.median(spans), t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    q = torch.randn(Q_LEN, HEADS, DIM, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(KV_LEN, KV_HEADS, DIM, device=dev, dtype=torch.bfloat16) for _ in range(2))
    cu_q, cu_kv = testing.cu_seqlens([Q_LEN], dev), testing.cu_seqlens([KV_LEN], dev)
    sms = runtime.num_sms()
    side = torch.cuda.Stream()

    def prefill(cfg):
        with fwd.forced(config=cfg):
            return gqa_varlen_fwd(q, k, v, cu_q, cu_kv, is_causal=True, max_seqlen_q=Q_LEN, max_seqlen_kv=KV_LEN)

    def stream(rows, stages):
        batch = STREAM_BATCH_BYTES // (2 * rows * STREAM_WIDTH)
        n_batches = DECODE_BYTES // STREAM_BATCH_BYTES
        src = torch.randn(n_batches * batch * rows * STREAM_WIDTH, device=dev).to(torch.bfloat16)
        out = torch.empty(sms, rows, STREAM_WIDTH, device=dev)
        next_batch = torch.zeros(1, device=dev, dtype=torch.int32)
        trace = torch.zeros(sms, 3, device=dev, dtype=torch.int64)

        def launch(pdl=False):  # (pdl: as the programmatic dependent of the kernel queued before it)
            stream_kernel[(sms,)](src, out, next_batch, trace, n_batches, ROWS=rows, WIDTH=STREAM_WIDTH,
                                  STAGES=stages, BATCH=batch, num_warps=STREAM_WARPS, maxnreg=STREAM_REGS,
                                  launch_pdl=pdl)
            return out

        def run():  # (the counter's reset is a one-word memset inside the timed call)
            next_batch.zero_()
            return launch()

        want = src.view(-1, rows, STREAM_WIDTH).float().amax(0)
        return run, launch, next_batch, out, want, trace

    def both(cfg, run_stream):
        def run():  # the prefill queued first, so its persistent programs hold every SM when the stream's arrive
            side.wait_stream(torch.cuda.current_stream())  # (forked before the prefill: the side waits for the flush)
            out = prefill(cfg)
            with torch.cuda.stream(side):
                run_stream()
            torch.cuda.current_stream().wait_stream(side)
            return out
        return run

    def dependent(cfg, launch_stream, next_batch):
        def run():  # one stream: the counter, the prefill (its programs let a dependent start first thing), the stream
            next_batch.zero_()  # as that dependent: its programs can only arrive on SMs the prefill holds
            out = prefill(cfg)
            launch_stream(pdl=True)
            return out
        return run

    call = dict(is_causal=True, max_seqlen_q=Q_LEN, max_seqlen_kv=KV_LEN)
    ref = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, **call)  # fp32, and torch's bf16 error as the yardstick
    lowp = gqa_varlen_fwd_ref(q, k, v, cu_q, cu_kv, **call, compute_dtype=torch.bfloat16)
    # (prefill config, stream chunk rows, stream stages, decode key tile, decode stages), by the shared memory the
    # prefill leaves (offline sm_90): the serving-step default's tile (197 KB: ~30 KB left; stream 6 stages of 4 KB,
    # decode 21 KB), the 64-key tile at 3 stages (164 KB; 12 stages, 53 KB) and at 2 (131 KB; 20 stages, 85 KB)
    pairs = [(ws_launch.WsConfig(128, 2, overlap=True, early_k_release=True, lazy_rescale=True), 16, 6, 32, 2),
             (ws_launch.WsConfig(64, 3, overlap=True), 16, 12, 32, 4),
             (ws_launch.WsConfig(64, 2, overlap=True), 16, 20, 32, 6)]
    report, impls, checks = {"device": torch.cuda.get_device_name()}, {}, {}
    traces = {}
    decoder = _decoder()
    for base, rows, stages, decode_n, decode_stages in pairs:
        run_stream, launch_stream, next_batch, stream_out, want, trace = stream(rows, stages)
        name = f"stream {rows}x{STREAM_WIDTH} s{stages}"
        checks[name] = bool(torch.equal(run_stream().amax(0), want))
        impls[name] = run_stream
        traces[name] = trace
        outs = {}
        for regs in (240, 216, 192):
            cfg = replace(base, consumer_regs=regs)
            outs[regs] = prefill(cfg).clone()
            testing.assert_close_dual(cfg.name, outs[regs], ref, lowp)  # (raises before anything is timed)
            checks[f"{cfg.name} rel err"] = testing.rel_error(outs[regs], ref)
            impls[cfg.name] = lambda cfg=cfg: prefill(cfg)
            impls[f"{cfg.name} + stream"] = both(cfg, run_stream)
            traces[f"{cfg.name} + stream"] = trace
            paired = impls[f"{cfg.name} + stream"]().clone()
            torch.cuda.synchronize()
            checks[f"{cfg.name} + stream: stream max"] = bool(torch.equal(stream_out.amax(0), want))
            checks[f"{cfg.name} + stream: prefill bitwise alone"] = bool(torch.equal(paired, outs[regs]))
            gdc = replace(cfg, launch_dependents=True)
            name = f"{gdc.name} + dependent stream"
            impls[name] = dependent(gdc, launch_stream, next_batch)
            traces[name] = trace
            paired = impls[name]().clone()
            torch.cuda.synchronize()
            checks[f"{name}: stream max"] = bool(torch.equal(stream_out.amax(0), want))
            checks[f"{name}: prefill bitwise alone"] = bool(torch.equal(paired, outs[regs]))
        checks[f"{base.name} r216 / r192 bitwise r240"] = all(torch.equal(outs[r], outs[240]) for r in (216, 192))
        _decode_pairs(base, decode_n, decode_stages, prefill, decoder, checks, impls)
    report["checks"] = checks
    bad = [n for n, c in checks.items() if c is False]
    if bad:
        raise SystemExit(f"checks failed: {bad} ({checks})")
    flush = L2Flusher()
    timed = measure(impls, flush)
    report["ms"] = {n: t.median_ms for n, t in timed.items()}
    report["kernels_ms"] = {n: kernel_breakdown(fn, 10, flush) for n, fn in impls.items() if "+" in n}
    marks = torch.zeros(2, device=dev, dtype=torch.int64)
    report["held_span_us"], report["stream_programs"] = {}, {}
    for n, fn in impls.items():
        us, t_mark = _span_us(fn, marks, flush)
        report["held_span_us"][n] = round(us, 1)
        if n in traces:  # (read before the next variant's calls rewrite the shared trace)
            report["stream_programs"][n] = _placement(traces[n], t_mark)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"{'':46s} {'timed':>8s} {'held span':>10s}")
    for n, ms in report["ms"].items():
        print(f"{n:46s} {ms * 1e3:8.1f} {report['held_span_us'][n]:10.1f} us"
              + (f"  {DECODE_BYTES / ms / 1e9:.2f} TB/s" if n.startswith(("stream", "decode")) else ""))
    for n, parts in report["kernels_ms"].items():
        print(f"{n:40s} " + ", ".join(f"{k[:28]} {v * 1e3:.1f}" for k, v in parts.items()))
    for n, pl in report["stream_programs"].items():
        print(f"{n:40s} " + ", ".join(f"{k} {v}" for k, v in pl.items()))


def _decoder():
    """The serving-step row's 30 decodes as paged pools (64-token pages in shuffled order, 4096 keys each, 503 MB),
    their fp32 reference and its low-precision twin, and a launcher of ``coresident_decode``'s kernel."""
    dev = torch.device("cuda")
    pages = DECODES * KV_LEN // PAGE
    q = torch.randn(DECODES, HEADS, DIM, device=dev, dtype=torch.bfloat16)
    k_pages, v_pages = (torch.randn(pages, PAGE, KV_HEADS, DIM, device=dev, dtype=torch.bfloat16) for _ in range(2))
    table = testing.block_table([KV_LEN] * DECODES, PAGE, pages, KV_LEN // PAGE, testing.generator(0), dev)
    lens = torch.full((DECODES,), KV_LEN, device=dev, dtype=torch.int32)
    cu = testing.cu_seqlens([1] * DECODES, dev)
    ref = gqa_paged_fwd_ref(q, k_pages, v_pages, table, lens, cu, out_dtype=torch.float32)
    lowp = gqa_paged_fwd_ref(q, k_pages, v_pages, table, lens, cu, lowp=torch.bfloat16)
    chunks = chunk_count(KV_LEN, DECODE_CHUNK, PAGE, 32)  # (every variant below: 32-key tiles)
    n_items = DECODES * KV_HEADS * chunks
    group = HEADS // KV_HEADS
    o_part = torch.empty(n_items * group, DIM, device=dev)
    lse_part = torch.empty(n_items * group, device=dev)
    next_item = torch.zeros(1, device=dev, dtype=torch.int32)

    def launch(regs, warps, block_n, stages, pdl=False):
        paged_decode_chunks_kernel[(runtime.num_sms(),)](
            q, k_pages, v_pages, table, o_part, lse_part, next_item, n_items, math.log2(math.e) / math.sqrt(DIM),
            KV_HEADS, q.stride(0), q.stride(1), k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
            table.stride(0), G=group, D=DIM, PAGE=PAGE, CHUNK=DECODE_CHUNK, CHUNKS=chunks, BLOCK_N=block_n,
            STAGES=stages, num_warps=warps, maxnreg=regs, launch_pdl=pdl)

    def poison():  # before each checked call: a partial the kernel skips then reaches the check as NaN
        o_part.fill_(float("nan"))
        lse_part.fill_(float("nan"))

    def result():
        return merge(o_part, lse_part, DECODES, HEADS, chunks)

    return launch, next_item, poison, result, ref, lowp


def _decode_pairs(base, block_n, stages, prefill, decoder, checks, impls):
    """The decode kernel alone and as the prefill's programmatic dependent, in the registers the prefill leaves
    (65536 - 384 · cap, cap = (2 · consumer_regs + 24) / 3): beside 216, 2 warps at 112 a thread (offline sm_90: 48 B
    of spill at 2 stages, 16 at 4-6; 4 warps would get 56 and spill 140 B); beside 192, 4 warps at 104 (no spill).
    ``block_n`` / ``stages`` fit the shared memory the prefill leaves."""
    launch, next_item, poison, result, ref, lowp = decoder
    for consumer_regs in (216, 192):
        free = 65536 - 384 * ((2 * consumer_regs + 24) // 3)
        warps = 4 if free >= 96 * 128 else 2
        regs = free // (32 * warps) // 8 * 8
        name = f"decode n{block_n}s{stages} w{warps} r{regs}"

        def alone(regs=regs, warps=warps):
            next_item.zero_()
            launch(regs, warps, block_n, stages)

        if name not in impls:
            poison()
            alone()
            testing.assert_close_dual(name, result(), ref, lowp)
            checks[f"{name} rel err"] = testing.rel_error(result(), ref)
            impls[name] = alone
        gdc = replace(base, consumer_regs=consumer_regs, launch_dependents=True)

        def pair(gdc=gdc, regs=regs, warps=warps):
            next_item.zero_()
            out = prefill(gdc)
            launch(regs, warps, block_n, stages, pdl=True)
            return out

        pair_name = f"{gdc.name} + dependent {name}"
        poison()
        paired = pair().clone()
        testing.assert_close_dual(pair_name, result(), ref, lowp)
        alone_out = prefill(replace(gdc, launch_dependents=False))
        checks[f"{pair_name}: prefill bitwise alone"] = bool(torch.equal(paired, alone_out))
        impls[pair_name] = pair


def _placement(trace, t_mark) -> dict:
    """Where and when the stream programs of the last held call ran: distinct SMs, most programs on one SM, programs
    started within 2 µs of the first, the first start after the marker queued before the call, and the spread of
    starts and ends after the first start (µs)."""
    sm, start, end = trace.cpu().T
    t0 = start.min()
    return {"sms": int(sm.unique().numel()), "most_on_one_sm": int(sm.bincount().max()),
            "started_within_2us": int(((start - t0) < 2000).sum()),
            "first_start_after_mark_us": round((t0.item() - t_mark) / 1e3, 1),
            "start_spread_us": round((start.max() - t0).item() / 1e3, 1),
            "first_end_us": round((end.min() - t0).item() / 1e3, 1),
            "last_end_us": round((end.max() - t0).item() / 1e3, 1)}


if __name__ == "__main__":
    main()
