#!/usr/bin/env bash
# One GPU call for the named families: unpack the carried peers, make the in-tree packages importable,
# then per family: every test on the GPU (shrunk cases run on CUDA too; fuzz cases ATTNOPS_FUZZ_CASES),
# and the benchmark (compute-sanitizer runs live in benchmarks/gpu_reliability.sh).
# Logs and JSONL land under $OUT; one summary line per step is printed.
# WARM=N: the benchmark first compiles our kernels for its rows in N parallel processes (run.py --warm). attn-nsa,
# 2026-12-01: 31 s of warm-up, then 143 s of rows against 219-221 s without it (autotuning and the peers'
# compiles stayed in the rows' checks phase; since then the warm-up calls the peers too: not yet timed).
#   ATTNOPS_GIT_SHA=<sha> [BENCH=0] [TESTS=0] [WARM=N] [DEADLINE=<epoch s>] \
#     bash benchmarks/gpu_job.sh kvcache-ops attn-core -- [bench args]
set -u
families=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do families+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
. benchmarks/peers_env.sh
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH ATTNOPS_FUZZ_CASES=${ATTNOPS_FUZZ_CASES:-100}
# FlashInfer modules not shipped prebuilt take 13-70 s each to compile (alone on the 16-core host): off unless
# PEER_JIT=1. With it, each warm-up worker's ninja gets its share of the cores (MAX_JOBS): 8 workers at ninja's
# default of nproc + 2 jobs each ran ~144 nvcc at once, and sm90 prefill modules took ~4 min each (2026-12-02).
# Add --warm-only to the bench args for a call that only compiles (the cache stays in .peers-run/ for the next).
if [ "${PEER_JIT:-0}" = 1 ]; then
  workers=${WARM:-1}; [ "$workers" -gt 0 ] 2>/dev/null || workers=1
  jobs=$(( $(nproc) / workers )); export MAX_JOBS=${MAX_JOBS:-$(( jobs > 0 ? jobs : 1 ))}
else
  export FLASHINFER_DISABLE_JIT=1
fi
# Every step is cut at DEADLINE (epoch seconds, default 9 minutes from now) so the logs still come back.
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
left() { local s=$(( DEADLINE - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# With the benchmark in the same call, the tests skip test_seed_row_full_size: the benchmark checks every row it
# times against the same fp32 reference at the same size, so they would only repeat it.
test_file() {  # test_file <file> <log> [pytest args]
  local f=$1 log=$2; shift 2
  echo "== $f" >"$log"
  # ATTNOPS_POISON=1: outputs start NaN-filled on the GPU too, so an unwritten element fails (tests only)
  ATTNOPS_POISON=1 timeout "$(left)" python3 -m pytest -q -rf --durations=10 -p no:cacheprovider --timeout "${TEST_TIMEOUT:-240}" \
    "$@" "$f" >>"$log" 2>&1
  echo "tests $f: $(tail -n 1 "$log")"
}
# One pytest process per test file: an illegal memory access poisons only its own process. PARALLEL=1 runs a
# family's files side by side (they compile on separate CPU cores; the GPU work of tests is small).
run_tests() {
  local skip=() f logs=()
  [ "${BENCH:-1}" = 1 ] && skip=(-k "not seed_row_full_size")
  for f in "packages/$1/tests"/test_*.py; do
    [ -n "${TEST_SKIP:-}" ] && [[ "$f" =~ $TEST_SKIP ]] && continue  # TEST_SKIP: a regex of files to leave out
    logs+=("$OUT/tests-$1-$(basename "$f" .py).log")
    if [ "${PARALLEL:-0}" = 1 ]; then test_file "$f" "${logs[-1]}" "${skip[@]}" &
    else test_file "$f" "${logs[-1]}" "${skip[@]}"; fi
  done
  wait
  # (no file left after TEST_SKIP: an empty list would make cat read stdin)
  [ ${#logs[@]} -eq 0 ] || { cat "${logs[@]}" >"$OUT/tests-$1.log" && rm -f "${logs[@]}"; }
}
run_bench() {
  timeout "$(left)" python3 -m benchmarks.run --family "$1" --out "$OUT/bench-$1.jsonl" ${WARM:+--warm "$WARM"} "${bench_args[@]}" \
    >"$OUT/bench-$1.txt" 2>"$OUT/bench-$1.err"
  echo "bench $1: $(grep -c '"type": "row"' "$OUT/bench-$1.jsonl") rows; $(tail -n 1 "$OUT/bench-$1.err")"
}
bench_args=("$@")
for family in "${families[@]}"; do
  [ "${BENCH_FIRST:-0}" = 1 ] && [ "${BENCH:-1}" = 1 ] && run_bench "$family"
  [ "${TESTS:-1}" = 1 ] && run_tests "$family"
  [ "${BENCH_FIRST:-0}" != 1 ] && [ "${BENCH:-1}" = 1 ] && run_bench "$family"
done
# At most 8 files come back from $OUT: keep the JSONL, pack the logs.
(cd "$OUT" && tar czf logs.tgz --remove-files ./*.log ./*.txt ./*.err 2>/dev/null)
ls "$OUT"
