#!/usr/bin/env bash
# GPU calls for the Gluon warp-specialized forward (attn-core flash_fwd/ws_kernel.py): its GPU tests in two
# groups, each under its own timeout (a wrong mbarrier phase hangs rather than fails: a hang in one group keeps the
# others' results), then the sweeps of its configs beside the Triton kernels. STEPS picks steps (default all, in
# this order); every step stops at DEADLINE (epoch seconds, default 560 s from now). Logs and JSON under $OUT.
# ~9 min for the dense / varlen half, as much for the paged half: one call each.
#   STEPS="tests-core tune-core" bash benchmarks/ws_check.sh; STEPS="tests-paged tune-paged" bash benchmarks/ws_check.sh
# TUNE_CORE / TUNE_PAGED: the rows of the two sweeps (--filter of tune_attn_core / tune_attn_core_paged).
set -u
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:):."
export PYTHONPATH PYTHONUNBUFFERED=1 ATTNOPS_POISON=1
. benchmarks/peers_env.sh
DEADLINE=${DEADLINE:-$(( $(date +%s) + 560 ))}
left() { local s=$(( DEADLINE - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }  # cap <s>: at most s, never past the deadline
TESTS=packages/attn-core/tests/test_flash_fwd_ws.py
TUNE_CORE=${TUNE_CORE:-llama-8b-uniform/bf16,short-w256/bf16,llama-8b-q-lt-kv/bf16,llama-70b-q-lt-kv/bf16,long-w1024/bf16,chunked-b8}
TUNE_PAGED=${TUNE_PAGED:-GQAPagedFwd/llama-8b/,serving-step,qwen3-ragged-odd,gpt-oss-sink-mixed,starcoder,gemma-2b,falcon-7b,synthetic-softcap/f16,qwen35-9b-mixed}
tests() {  # tests <name> <seconds> <-k expression>
  timeout "$(cap "$2")" python3 -m pytest -q -rf -p no:cacheprovider -k "$3" "$TESTS" >"$OUT/tests-$1.log" 2>&1
  echo "tests $1: rc=$? $(tail -n 1 "$OUT/tests-$1.log")"
  grep -E "^FAILED|^E  " "$OUT/tests-$1.log" | cut -c1-300 | head -n 12
}
tune() {  # tune <name> <seconds> <module> <filter>
  timeout "$(cap "$2")" python3 -m "benchmarks.$3" --ws --iters 20 --filter "$4" --out "$OUT/tune-$1.json" \
    >"$OUT/tune-$1.log" 2>&1
  echo "tune $1: rc=$?"
  grep -v -i warn "$OUT/tune-$1.log" | cut -c1-330 | tail -n 30
}
for step in ${STEPS:-tests-core tune-core tests-paged tune-paged}; do
  case "$step" in
    tests-core) tests core 200 "not paged" ;;
    tune-core) tune core 330 tune_attn_core "$TUNE_CORE" ;;
    tests-paged) tests paged 200 "paged" ;;
    tune-paged) tune paged 330 tune_attn_core_paged "$TUNE_PAGED" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done
