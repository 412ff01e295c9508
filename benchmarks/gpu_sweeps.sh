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
# Caps add up to ~750 s: the deadline cuts the last steps first (ordered by the size of the gap they address).
# Node ids, not -k: on the GPU machine a -k expression once matched every test of the family.
PHASE=${PHASE:-all}
if [ "$PHASE" != sweeps ]; then
  step gpu-tests "${TESTS_CAP:-150}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 90 \
    -p no:cacheprovider "$core/test_gqa_bwd_ws.py" "$core/test_gqa_dense_fwd.py::test_tile_by_programs_per_sm" \
    "$core/test_flash_fwd_ws.py::test_fp8_launch_binds_scales_and_a_16_bit_v"
  # the packed-GQA ws configs (-pk, attn-core 0.3.18): every layout through test_every_config, the paged tests
  step gpu-tests-packed "${TESTS_CAP:-150}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 90 \
    -p no:cacheprovider "$core/test_flash_fwd_ws.py::test_paged_packed_merged" \
    "$core/test_flash_fwd_ws.py::test_every_config" "$core/test_flash_fwd_ws.py::test_paged"
fi
if [ "$PHASE" = tests ]; then
  grep -h "^FAILED\|^ERROR" "$OUT"/gpu-tests*.log 2>/dev/null | head -20  # the failing node ids, before packing
  (cd "$OUT" && tar czf tests-logs.tgz --remove-files ./*.log 2>/dev/null); exit 0
fi
# (earlier sessions' sweeps and what they decided: docs/perf/attn-core.md and docs/dev/gpu-runs.md)
# issue 4's red row: the packed ws configs, alone and with the decode requests in their launch (+merge_small)
tune tune-ws-packed-noncausal 90 tune_attn_core_paged --ws --variants pk,ws=False --filter GQAPagedFwd/llama-8b-noncausal,GQAPagedFwd/gpt-oss-sink-mixed
# the packed configs on GQA prefill rows (one K / V tile read serves the G heads in one tile)
tune tune-ws-packed-prefill 90 tune_attn_core --ws --only pk --filter GQAVarlenFwd/llama-8b-uniform/bf16,GQAVarlenFwd/llama-70b-q-lt-kv/bf16
# GQABwd's Gluon dK / dV kernel software-pipelined (attn-core 0.3.18; the serial form was 7-27 % slower than the
# Triton dK / dV role): the ws-* configs beside the Triton ones on the long rows (issue 5's reddest rows)
tune tune-bwd-ws-pipelined 240 tune_gqa_bwd --filter GQABwd/llama-8b-long/bf16,GQABwd/llama-70b-long/bf16
# issue 3's lowest measured row (qwen3-8b-chunked-b8, 0.81x FlashInfer on the ws default): every ws config and the
# Triton tile on it
tune tune-ws-chunked-b8 60 tune_attn_core --ws --filter GQADenseFwd/qwen3-8b-chunked-b8/bf16
(cd "$OUT" && tar czf sweeps-logs.tgz --remove-files ./*.log 2>/dev/null)
ls "$OUT"
