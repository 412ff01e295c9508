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
[ "$PHASE" = sweeps ] || step gpu-tests "${TESTS_CAP:-150}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 90 \
  -p no:cacheprovider packages/kernel-utils/tests/test_split_combine.py \
  "$core/test_gqa_dense_fwd.py::test_decode_split_kv_and_combine" \
  "$core/test_gqa_dense_fwd.py::test_every_decode_config_gpu" \
  "$core/test_gqa_varlen_fwd.py::test_sinks_with_empty_rows_and_windows" \
  "$core/test_gqa_varlen_fwd.py::test_split_kv_ragged" \
  "$mla/test_mla_decode_with_kvcache_fwd.py::test_split_kv_and_combine" \
  "$mla/test_mla_decode_with_kvcache_fwd.py::test_split_kv_and_combine_bf16" \
  "$mla/test_mla_decode_with_kvcache_fwd.py::test_every_config_full_size" \
  "$mla/test_mla_decode_ws.py" \
  "$core/test_flash_fwd_ws.py::test_paged" \
  "$core/test_flash_fwd_ws.py::test_prefill_paged" \
  "$core/test_flash_fwd_ws.py::test_paged_softcap_and_sinks" \
  "$core/test_flash_fwd_ws.py::test_prefill_paged_rope"
if [ "$PHASE" = tests ]; then
  grep -h "^FAILED\|^ERROR" "$OUT/gpu-tests.log" 2>/dev/null | head -20  # the failing node ids, before packing
  (cd "$OUT" && tar czf tests-logs.tgz --remove-files ./*.log 2>/dev/null); exit 0
fi
# (the sweeps of 2026-12-03 13:00 decided or closed: the paged decode split rule, qwen35's D = 256 ws configs (no
# change); docs/perf/attn-core.md "Twenty-second session")
# GQABwd's short rows: m32n64-m64n32w4s2 led on the four GQA ones (-3 to -7 %); the short-mha rows decide `choose`
tune tune-bwd-short 150 tune_gqa_bwd --filter short
# MLA's 32k rows (power-of-two splits, one-step combine): the split counts around the planner's
tune tune-mla-32k 120 tune_attn_mla --filter MLADecodeWithKVCacheFwd/ds-v3-32k/bf16,MLADecodeWithKVCacheFwd/ds-v2-32k/bf16
(cd "$OUT" && tar czf sweeps-logs.tgz --remove-files ./*.log 2>/dev/null)
ls "$OUT"
