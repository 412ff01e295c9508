#!/usr/bin/env bash
# The reliability sweep of issue 10 on the GPU, per family: compute-sanitizer memcheck over the shrunk seed
# rows and a few fuzz cases (benchmarks/memcheck_lanes.sh, MEMCHECK_LANES processes, default 1), (RACECHECK=1)
# racecheck over the shrunk seed rows, then the seeded fuzz and determinism tests on CUDA tensors
# (ATTNOPS_FUZZ_CASES per op; FUZZ=0 skips them). Every step stops at DEADLINE (epoch seconds) or after STEP_CAP
# seconds; logs land under $OUT (packed into reliability-logs.tgz); one summary line per step is printed.
#   DEADLINE=<epoch s> ATTNOPS_FUZZ_CASES=30 [RACECHECK=1] [MEMCHECK=0] [STEP_CAP=<s>] [FUZZ=0] \
#     bash benchmarks/gpu_reliability.sh attn-core attn-mla
set -u
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH ATTNOPS_FUZZ_CASES=${ATTNOPS_FUZZ_CASES:-30}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
# STEP_CAP (seconds) bounds each step so one family's sanitizer run cannot use the whole call
left() { local s=$(( DEADLINE - $(date +%s) )); s=$(( s < ${STEP_CAP:-600} ? s : ${STEP_CAP:-600} )); echo $(( s > 5 ? s : 5 )); }
summary() { grep -E "(ERROR|RACECHECK) SUMMARY|[0-9]+ (passed|failed)" "$1" | tail -n 2 | tr '\n' ' '; }
pytest_q=(python3 -m pytest -q -p no:cacheprovider)
for family in "$@"; do
  if [ "${MEMCHECK:-1}" = 1 ]; then  # MEMCHECK=0: racecheck only (with RACECHECK=1)
    # (benchmarks/memcheck_lanes.sh: without torch's caching allocator, MEMCHECK_LANES sanitized processes)
    OUT=$OUT/memcheck-$family DEADLINE=$(( $(date +%s) + $(left) )) MEMCHECK_LANES=${MEMCHECK_LANES:-1} \
      ATTNOPS_FUZZ_CASES=8 bash benchmarks/memcheck_lanes.sh -m "not gpu" -k "seed_row_shrunk or fuzz" \
      "packages/$family/tests" >"$OUT/memcheck-$family.txt" 2>&1
    echo "memcheck $family: rc=$? $(grep -E '^(lane-|memcheck:)' "$OUT/memcheck-$family.txt" | tr '\n' ' ')"
  fi
  if [ "${RACECHECK:-0}" = 1 ]; then
    log="$OUT/racecheck-$family.log"
    timeout "$(left)" compute-sanitizer --tool racecheck --error-exitcode 3 \
      "${pytest_q[@]}" -m "not gpu" -k "seed_row_shrunk" "packages/$family/tests" >"$log" 2>&1
    echo "racecheck $family: rc=$? $(summary "$log")"
  fi
  [ "${FUZZ:-1}" = 1 ] || continue
  log="$OUT/fuzz-$family.log"
  timeout "$(left)" "${pytest_q[@]}" -k "fuzz or repeated or determinism" "packages/$family/tests" >"$log" 2>&1
  echo "fuzz+determinism $family (cases/op=$ATTNOPS_FUZZ_CASES): rc=$? $(summary "$log")"
done
(cd "$OUT" && tar czf reliability-logs.tgz --remove-files ./fuzz-*.log ./memcheck-* ./racecheck-*.log 2>/dev/null)
