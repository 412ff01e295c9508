#!/usr/bin/env bash
# One GPU lane of the checks and sweeps that decide the next defaults (docs/dev/gpu-runs.md): named GPU tests
# first (verbose, so a cut log still says which test failed), then the sweeps in the order their decisions
# are needed; each sweep checks every variant's output against the reference before timing it. Every step
# is cut at its cap or at DEADLINE (epoch seconds), whichever comes first; JSON and logs land under $OUT
# (logs packed into sweeps-logs.tgz); one summary line per step is printed.
# PHASE=tests runs only the GPU tests, PHASE=sweeps only the sweeps (the two phases of a one-GPU machine:
# the tests may share the GPU with the sanitizer, the sweeps time kernels and must have it alone). The tests run on
# TEST_WORKERS pytest-xdist workers (default 8: their time is mostly Triton compiles, ~3x faster than one).
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> [PHASE=tests|sweeps|all] bash benchmarks/gpu_sweeps.sh
set -u
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
left() { local s=$(( DEADLINE - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
step() {  # step <name> <cap s> <command...>: run with the time left (at most cap), log to $OUT/<name>.log
  local name=$1 cap=$2; shift 2
  local t; t=$(left); t=$(( t < cap ? t : cap ))
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc=$? $(tail -n 1 "$OUT/$name.log")"
}
tune() { local name=$1 cap=$2 tool=$3; shift 3; step "$name" "$cap" python3 -m "benchmarks.$tool" --out "$OUT/$name.json" "$@"; }
core=packages/attn-core/tests mla=packages/attn-mla/tests
# Caps add up to ~360 s: the deadline cuts the last sweeps first (ordered by the size of the gap they address).
# Node ids, not -k: on the GPU machine a -k expression once matched every test of the family.
PHASE=${PHASE:-all}
[ "$PHASE" = sweeps ] || step gpu-tests "${TESTS_CAP:-200}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 90 \
  -p no:cacheprovider "$core/test_flash_fwd_ws.py"
if [ "$PHASE" = tests ]; then
  grep -h "^FAILED\|^ERROR" "$OUT/gpu-tests.log" 2>/dev/null | head -20  # the failing node ids, before packing
  (cd "$OUT" && tar czf tests-logs.tgz --remove-files ./*.log 2>/dev/null); exit 0
fi
# (earlier sessions' sweeps and what they decided: docs/perf/attn-core.md and docs/dev/gpu-runs.md)
# The ws forward with the P·V wait held below the softmax (attn-core 0.3.17, `-hold` configs) beside the defaults:
# the compute-bound ragged / long rows first (qwen3-fp8-ragged is issue 3's last row under the floor)
tune tune-ws-hold 240 tune_attn_core --ws --only ws-n64s3-ov-bm-lpt,ws-n128s2-ov,ws-n64s3-ov-pp --filter \
  GQAVarlenFwd/qwen3-fp8-ragged,GQAVarlenFwd/llama-8b-long-w1024/bf16,GQAVarlenFwd/llama-70b-q-lt-kv/bf16,GQAVarlenFwd/llama-8b-uniform/bf16
# qwen3-fp8-ragged's kernels apart (the host cast of V to 16 bits is one of them: how much of the 127 µs is it?)
step fp8-ragged-kernels 60 python3 -m benchmarks.ncu_row --family attn-core \
  --row GQAVarlenFwd/qwen3-fp8-ragged/fp8e4m3/bf16 --breakdown
# qwen35-9b-rope (paged D = 256, 0.77x FA3's published time): the default and its -hold twin
tune tune-ws-hold-qwen35 150 tune_attn_core_paged --ws --filter GQAPrefillPagedWithKVCacheFwd/qwen35-9b-rope
# the paged layout's D = 128 default and its twin on a paged prefill row
tune tune-ws-hold-paged 120 tune_attn_core_paged --ws --filter GQAPagedFwd/llama-8b/f16
# D = 64 (no ws default: the Triton tile led by 9-12 %): does the held form change that?
tune tune-ws-hold-d64 90 tune_attn_core --ws --only ws-n128s3-ov --filter GQAVarlenFwd/gpt-oss-uniform/bf16
(cd "$OUT" && tar czf sweeps-logs.tgz --remove-files ./*.log 2>/dev/null)
ls "$OUT"
