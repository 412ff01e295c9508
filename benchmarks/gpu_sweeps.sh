#!/usr/bin/env bash
# One GPU lane of the checks and sweeps that decide the next defaults (docs/dev/gpu-runs.md): named GPU tests
# first (verbose, so a cut log still says which test failed), then the sweeps in the order their decisions
# are needed; each sweep checks every variant's output against the reference before timing it. Every step
# is cut at its cap or at DEADLINE (epoch seconds), whichever comes first; JSON and logs land under $OUT
# (logs packed into sweeps-logs.tgz); one summary line per step is printed.
# PHASE=tests runs only the GPU tests, PHASE=sweeps only the sweeps (the two phases of a one-GPU machine:
# the tests may share the GPU with the sanitizer, the sweeps time kernels and must have it alone). The tests run on
# TEST_WORKERS pytest-xdist workers (default 8: their time is mostly Triton compiles, ~3x faster than one).
# STEPS (a regex of step names, whole-name match; default all) runs only those steps, so a call can pick its
# steps without the cut ones each spending the 5 s floor of their timeout.
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> [PHASE=tests|sweeps|all] [STEPS=<regex>] bash benchmarks/gpu_sweeps.sh
set -u
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
left() { local s=$(( DEADLINE - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
step() {  # step <name> <cap s> <command...>: run with the time left (at most cap), log to $OUT/<name>.log
  local name=$1 cap=$2; shift 2
  [[ "$name" =~ ^(${STEPS:-.*})$ ]] || return 0
  local t; t=$(left); t=$(( t < cap ? t : cap ))
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc=$? $(tail -n 1 "$OUT/$name.log")"
}
tune() { local name=$1 cap=$2 tool=$3; shift 3; step "$name" "$cap" python3 -m "benchmarks.$tool" --out "$OUT/$name.json" "$@"; }
core=packages/attn-core/tests mla=packages/attn-mla/tests
# Caps add up to ~150 s: the deadline cuts the last steps first (ordered by the size of the gap they address).
# A -k expression only within one named file: on the GPU machine one over the family once matched every test, and
# on 2026-12-04 `-k tma` within test_gqa_bwd_ws.py ran all 547 of its gpu-marked tests there (236 selected on a CPU
# checkout), so a step's cap allows for the whole file (the ids carry the config names: ws-s3-p, ws-dkdv-s2, ...).
PHASE=${PHASE:-all}
if [ "$PHASE" != sweeps ]; then
  # the configs the 2026-12-04 branch next-gpu added (first GPU-run by these steps; issue_rows.sh's test steps run
  # the whole files since): GQABwd's Triton kernel as the preprocess's programmatic dependent
  # (test_dependent_launch_gpu: bitwise against the plain launch, in a CUDA graph too), then the attn-mla ws kernels'
  # half-slot ready barriers (-h), per-thread slot releases (-t) and DSA's persistent 64-key configs (seed rows, edge
  # cases, persistent items; a hang shows as the per-test timeout)
  step gpu-tests "${TESTS_CAP:-200}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 120 \
    -p no:cacheprovider "$core/test_gqa_bwd.py"
  # (the new configs only, 160 of the two files' 303 tests: they come last in WS_CONFIGS, so a cap would cut them)
  step gpu-tests-mla "${TESTS_CAP:-240}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 120 \
    -p no:cacheprovider -k "n64s2 or h-p or s4-h or t-p or s4-t" "$mla/test_dsa_decode_ws.py" \
    "$mla/test_mla_decode_ws.py"
  # the attn-core forward's per-thread slot release twins (-t) and split blocks (test_paged_tail_splits,
  # test_prefill_paged_tail_splits): the ws tests loop over every config inside each test (the ids name no config),
  # so the whole ws file and the paged ws tests (2026-12-04: 176 passed in 121 s at -n 14; since then 4 `-kr` configs
  # and the split builds: their compiles, hence a 300 s cap)
  step gpu-tests-fwd "${TESTS_CAP:-300}" python3 -m pytest -v -rf -n 14 --timeout 150 \
    -p no:cacheprovider -k ws "$core/test_flash_fwd_ws.py" "$core/test_gqa_paged_fwd.py"
  # the thirty-fifth session's changes: TopK's rank launch (every config on shrunk rows, the split path's edge cases;
  # not the 8.6 GB full-size rows) and the Gluon GQABwd kernels' shared consumer arguments (their PTX unchanged but
  # for the dQ kernel's barrier offsets: its seed rows and side stream)
  step gpu-tests-topk "${TESTS_CAP:-90}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 120 \
    -p no:cacheprovider -k "not full_size" "$mla/test_topk_select_fwd.py"
  step gpu-tests-bwd-ws "${TESTS_CAP:-120}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 120 \
    -p no:cacheprovider -k "seed_rows or dq_stream or head_splits_seed_row" "$core/test_gqa_bwd_ws.py"
fi
if [ "$PHASE" = tests ]; then
  grep -h "^FAILED\|^ERROR" "$OUT"/gpu-tests*.log 2>/dev/null | head -20  # the failing node ids, before packing
  (cd "$OUT" && tar czf tests-logs.tgz --remove-files ./*.log 2>/dev/null); exit 0
fi
# (earlier sessions' sweeps and what they decided: docs/perf/attn-core.md and docs/dev/gpu-runs.md)
# GQABwd's short MHA rows with the Triton kernel's programs in chunks of (batch, KV head) pairs (launch.ORDER_GROUP):
# each wave of their ~8 re-streams Q / dO or K / V of all 128 pairs; chunks keep a wave's inputs in L2. (The GQA short
# rows' dK/dV grids are one wave: a rule would leave them alone.)
tune tune-bwd-order 100 tune_gqa_bwd --order --filter "short-mha/bf16"
# GQABwd's short MHA rows (0.80x FA3's published, issue 5's last two): the Gluon kernels against the Triton tile (the
# default there, launched as the preprocess's dependent on this branch) now that their stores are 16-byte: before
# them the Gluon default ran these rows at 144.4 against 139.8 us (2026-12-03), and the stores took 7 % off the long
# MHA rows
tune tune-bwd-short-mha 120 tune_gqa_bwd --ws-only --filter short-mha/bf16
# qwen35-9b-rope (issue 4: 17.9 ms, 17.68 needed for 0.8x FA3's published 14.1; ahead of the DSA sweep: it is the
# nearer of the two to its floor): its default was then the pingpong config (ahead of the 4-slot
# config in four earlier sweeps), beside the 4-slot config, that
# one's per-thread release twin and the 3-slot form, each also with its 3 lightest blocks split in 3 (`+tail`,
# plan.WS_TAIL_SPLITS_DEFAULT: modelled 1.9 % shorter), and the 64-key 2-slot tile with K freed before V (`-kr`: its
# score wgmmas fit the shared-memory port, the 32-key ones do not), and the 32-key configs with half of Q in registers
# (`-qr128`: 156 -> 125 B a clock of shared-memory traffic); ~4 % run-to-run noise, hence 40 iterations
tune tune-qwen35-thread-release 300 tune_attn_core_paged --ws --filter qwen35-9b-rope --variants "ws-n32,kr" --iters 40
# The half-slot ready barriers and DSA's 64-key blocks against the persistent default on the rows below 0.8x FlashMLA
# (each variant checked first; the channel split and the one-item configs left out), then MLA's 64-key form
tune tune-dsa-half-ready 300 tune_attn_mla --filter "mla-d576-h128-kv32k,mla-d512-h128-kv8k,mla-d512-h64-kv32k" \
  --skip h200,ws-n32s3,ws-n32s2,ws-alt-n32s4
# TopK's decode row (issue 6: FlashInfer 9.9 us): the split path's candidates ranked by a third launch (the default
# h200-split-rank-s8: H100 11.9 us) against the last-program select (h200-split: 15.7) and one program per row
tune tune-topk-rank 60 tune_attn_mla --filter topk-decode --iters 20 \
  --skip h200,h200-4w,h200-radix,h200-latency-radix,h200-latency-4x,h200-split-w8,h200-split-w16
# the other seed rows the tail rule would split (modelled: qwen35-9b-mixed 3 blocks in 2, 1.3 %; the fp8-pool qwen35-9b
# row as qwen35-9b-rope), each default beside its config with `+tail`, and the D = 256 `-kr` configs on those and
# gemma-2b
tune tune-ws-tail 150 tune_attn_core_paged --ws --filter "qwen35-9b-mixed,qwen35-9b/f16/fp8,gemma-2b" \
  --variants "+tail,kr,qr" --iters 20
# mixed serving batches: the decode launch beside the persistent ws prefill launch on the SMs it leaves (plan
# small_beside: the model's count, and forced ones; modelled serving-step 252 -> ~192 us), with the per-kernel times
tune tune-paged-beside 90 tune_attn_core_paged --ws --filter "serving-step,qwen3-ragged-odd" --variants beside \
  --iters 20
# the dense / varlen default and its -t / -kr / -qr twins where the forward is furthest from the peers (-qr: Q in
# registers, 125 -> 94 B a clock of shared-memory traffic against the port's 128), and the 128-key 2-slot tile with K
# freed before V (its score wgmmas read 96 B a clock of shared memory against the 64-key tile's 128)
tune tune-fwd-thread-release 150 tune_attn_core --ws --only "n64s3-ov-bm-lpt,n128s2-ov" \
  --filter "llama-8b-uniform/bf16,llama-70b-q-lt-kv/bf16,qwen3-8b-chunked-b8"
# the 128-key 2-slot tile with K freed before V on the other D = 128 rows whose blocks read more keys than queries
# (H100 2026-12-06: llama-70b-q-lt-kv 88.4 against the default's 96.5 us, qwen3-8b-chunked-b8 68.0 / 69.2, but
# llama-8b-uniform 41.3 / 35.2): the rule that would pick it needs these rows first
tune tune-fwd-kr 150 tune_attn_core --ws --only "n64s3-ov-bm-lpt,n128s2-ov" \
  --filter "q-lt-kv/bf16,long-w1024/bf16,qwen3-8b-chunked,llama-8b-4k/bf16,llama-8b-32k/bf16"
tune tune-mla-half-ready 120 tune_attn_mla --filter "mla-b128-8192/bf16" --skip h200,ws-n32s3,ws-n32s2
# the paged D = 128 compute-bound rows (GQAPagedFwd llama-8b at 0.91x FA3) with the 128-key 2-slot tile, K freed
# first, and the paged default with Q in registers
tune tune-paged-kr 150 tune_attn_core_paged --ws --filter "GQAPagedFwd/llama-8b/,starcoder,llama-8b-rope/f16" --variants kr,qr \
  --iters 20
# GQABwd's long MHA rows (issue 5: the f16 ones at 0.798x / 0.80002x FA3's published on the H200, 2026-12-07): the
# early-scores default ws-s3-p-e (0.3.20, chosen on an H100) against ws-s3-p, which the H200 ran 1.4-1.7 % faster in
# its 12-05 run (another run: not decisive); every ws config, one process
tune tune-bwd-long-mha 150 tune_gqa_bwd --ws-only --filter long-mha
# DSA d576-h128 (issue 6: kv8k 0.79x FlashMLA on the H200, 2026-12-07): every ws config on kv8k / kv32k, one process
# (the defaults since the lazy rescale were chosen on H100 sweeps)
tune tune-dsa-d576 300 tune_attn_mla --skip h200 \
  --filter "DSADecodeWithKVCacheFwd/mla-d576-h128-kv8k,DSADecodeWithKVCacheFwd/mla-d576-h128-kv32k"
# DSA's split-free configs (forced only; first run on an H100 2026-12-07, no row gained; docs/perf/attn-mla.md)
# beside the default and the 64-key half-ready form they extend, one process; every other ws config skipped
tune tune-dsa-split-free 200 tune_attn_mla \
  --skip h200,ws-alt-n32s4-p,ws-alt-n32s4-l,ws-alt-n32s4,ws-n32s3,ws-n32s2,ws-alt-n64s2,ws-alt-n32s4-h-p,ws-alt-n32s4-t-p \
  --filter "mla-d576-h128-kv8k,mla-d576-h128-kv32k,mla-d512-h64-kv8k,mla-d512-h128-kv8k,ds-v32-kv2k/bf16"
# DSA's small-cache default (``ws_launch.default``, 2026-12-07): the 64-key half-ready form and its split-free form
# beside the 32-key default on every 576-wide row, one process: where the cut at half the L2 falls
tune tune-dsa-small-cache 300 tune_attn_mla \
  --skip h200,ws-alt-n32s4-p,ws-alt-n32s4-l,ws-alt-n32s4,ws-n32s3,ws-n32s2,ws-alt-n64s2,ws-alt-n32s4-h-p,ws-alt-n32s4-t-p,ws-alt-n32s4-h-f-l-p \
  --filter "DSADecodeWithKVCacheFwd/ds-v32,DSADecodeWithKVCacheFwd/mla-d576"
(cd "$OUT" && tar czf sweeps-logs.tgz --remove-files ./*.log 2>/dev/null)
ls "$OUT"
