#!/usr/bin/env bash
# Two lanes on an nvidia-h200-x2 machine, one per GPU, in one call (docs/dev/gpu-runs.md), or PART=checks /
# tunes on a one-GPU machine:
#   PART=checks: three lanes on GPU 0 (none times anything): DIAG (a command, if set) | every test of SUITES
#                (attn-core attn-mla), one process per file | memcheck and racecheck of REL (the four
#                families, smallest first; REL=none: no lane), STEP_CAP s a step
#   PART=tunes:  GPU 0 the sweeps of gpu_sweeps.sh, then ROWS (if set)
#   PART=nsa:    GPU 0 every attn-nsa config timed per row (NSA_FILTER: some rows), the family's GPU tests, memcheck
#                of every NSAVarlenFwd config, Nsight Compute of NCU="<row>@<config> ...", the rows (NSA_BENCH=0: not)
#   PART=sweeps: GPU 0 benchmarks/gpu_sweeps.sh           | GPU 1 ROWS (if set), then the GPU suites of SUITES
#   PART=core:   GPU 0 GQADenseFwd, GQAVarlenFwd, GQABwd  | GPU 1 the three paged attn-core ops
#   PART=mla:    GPU 0 MLA / DSA rows                     | GPU 1 TopK and indexer rows
#   PART=rest:   GPU 0 attn-nsa and kvcache-ops rows      | GPU 1 gpu_reliability.sh
# The full 223-row benchmark is PART=core, mla and rest (~8, 8 and 6 min of the lanes on 2026-12-01). ROWS (PART=sweeps):
# "<family> <filter>" rows to time before the sanitizer sweep (e.g. rows a previous run's deadline cut).
# torch.compile peers are excluded on attn-core (10-30 s of compile per row) and, with torch-ref, on MLA/DSA
# (both already on record). A benchmark lane is benchmarks/gpu_job.sh (BENCH_FIRST=1, TESTS=0: the tests
# run in PART=sweeps or a call of their own) with its own OUT sub-folder and peer directory; every step stops
# at DEADLINE (epoch seconds). Everything under $OUT is packed into run.tgz at the end (at most 8 files come
# back). `.peers/` must hold ../shared/peers.
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> PART=core bash benchmarks/full_run_x2.sh
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> PART=core ONE_GPU=1 LANES=core-b bash benchmarks/full_run_x2.sh
set -u
OUT=${OUT:-/tmp/attnops-out}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
# WARM: the benchmark lanes compile our kernels and the peers' in WARM processes first (benchmarks/warm.py); the
# rows' checks phase (compiles) was 2-23 s a row without it on 2026-12-01 (attn-core), 0.03-1 s with it (attn-nsa)
export ATTNOPS_GIT_SHA DEADLINE BENCH_FIRST=1 TESTS=0 ROWS=${ROWS:-} DIAG=${DIAG:-} WARM=${WARM:-8}
# LANES="<name> ...": run only these lanes of the PART (e.g. LANES=core-b). ONE_GPU=1: every lane on GPU 0, one
# after another in the order the PART starts them (a lock per GPU), for a one-GPU machine.
lane() {  # lane <gpu> <name> <command...>: one lane on one GPU, its output in $OUT/<name>.txt
  local gpu=$1 name=$2; shift 2
  [ -z "${LANES:-}" ] || [[ " $LANES " == *" $name "* ]] || return 0
  if [ "${ONE_GPU:-0}" = 1 ] && [ "$gpu" != 0 ]; then sleep 2; gpu=0; fi  # (the sleep: GPU 0's lane locks first)
  CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/$name" PEERS_DIR="/tmp/peers-gpu$gpu" flock "/tmp/attnops-gpu$gpu.lock" "$@" \
    >"$OUT/$name.txt" 2>&1
}
mkdir -p "$OUT"
core_peers=(--exclude-peers torch-compile)
case "${PART:?PART=checks, tunes, nsa, sweeps, core, mla or rest}" in
  sweeps)
    lane 0 sweeps bash benchmarks/gpu_sweeps.sh &
    lane 1 rows-rel bash -c '
      if [ -n "$ROWS" ]; then set -- $ROWS; OUT=$OUT/rows bash benchmarks/gpu_job.sh "$1" -- --filter "$2" \
        --exclude-peers torch-compile,torch-ref; fi
      BENCH=0 TESTS=1 ATTNOPS_FUZZ_CASES=30 OUT=$OUT/suites bash benchmarks/gpu_job.sh ${SUITES:-attn-core attn-mla}' & ;;
  checks)
    [ -z "$DIAG" ] || lane 0 diag bash -c "$DIAG" &
    lane 0 tests env BENCH=0 TESTS=1 ATTNOPS_FUZZ_CASES=30 bash benchmarks/gpu_job.sh ${SUITES:-attn-core attn-mla} &
    [ "${REL:-}" = none ] || lane 0 rel env STEP_CAP="${STEP_CAP:-150}" RACECHECK=1 FUZZ=0 MEMCHECK="${MEMCHECK:-1}" \
      bash benchmarks/gpu_reliability.sh ${REL:-kvcache-ops attn-nsa attn-mla attn-core} & ;;
  nsa)  # one GPU: every config of the attn-nsa rows forced and timed (benchmarks/tune_attn_nsa.py: the default
        # rule's pick against the best; NSA_FILTER: some rows), the family's GPU tests, memcheck over every
        # NSAVarlenFwd TMA config (MEMCHECK_K: the tests it runs), then the 17 rows
    lane 0 nsa bash -c 'mkdir -p "$OUT"; export PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:)
      timeout 200 python3 -m benchmarks.tune_attn_nsa --iters 30 --out "$OUT/tune-attn-nsa.json" ${NSA_FILTER:+--filter "$NSA_FILTER"} \
        >"$OUT/tune-attn-nsa.log" 2>&1
      echo "tune-attn-nsa: rc=$?"; grep -v -i warn "$OUT/tune-attn-nsa.log"
      OUT=$OUT/tests BENCH=0 TESTS=1 PARALLEL=1 ATTNOPS_FUZZ_CASES=30 DEADLINE=$(( $(date +%s) + 150 )) bash benchmarks/gpu_job.sh attn-nsa
      DEADLINE=$(( $(date +%s) + 90 )) MEMCHECK_LANES=1 bash benchmarks/memcheck_lanes.sh -k "${MEMCHECK_K:-TMA1 or TMA2 or INT32_ROWS1}" \
        packages/attn-nsa/tests/test_nsa_varlen_fwd.py >"$OUT/memcheck.txt" 2>&1
      echo "memcheck NSAVarlenFwd configs: rc=$? $(grep -E "^lane-" "$OUT/memcheck.txt" | tr "\n" " ")"
      for prof in ${NCU:-}; do  # NCU="<row>@<config> ...": Nsight Compute sections of one launch each
        timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --kernel-name regex:nsa \
          --launch-skip 1 --launch-count 1 python3 -m benchmarks.ncu_row --family attn-nsa --row "${prof%@*}" \
          --config "${prof#*@}" >"$OUT/ncu-${prof#*@}-$(basename "${prof%@*}").txt" 2>&1
        echo "ncu $prof: rc=$?"
      done
      [ "${NSA_BENCH:-1}" = 0 ] || OUT=$OUT/bench TESTS=0 bash benchmarks/gpu_job.sh attn-nsa' & ;;
  tunes)
    lane 0 tunes bash -c 'PHASE=sweeps OUT=$OUT/sweeps bash benchmarks/gpu_sweeps.sh
      if [ -n "$ROWS" ]; then set -- $ROWS; OUT=$OUT/rows bash benchmarks/gpu_job.sh "$1" -- --filter "$2" \
        --exclude-peers torch-compile,torch-ref; fi' & ;;
  core)
    lane 0 core-a bash benchmarks/gpu_job.sh attn-core -- --filter GQADenseFwd,GQAVarlenFwd,GQABwd "${core_peers[@]}" &
    lane 1 core-b bash benchmarks/gpu_job.sh attn-core -- --filter Paged "${core_peers[@]}" & ;;
  mla)
    lane 0 mla-a bash benchmarks/gpu_job.sh attn-mla -- --filter MLADecodeWithKVCacheFwd,DSADecodeWithKVCacheFwd \
      --exclude-peers torch-compile,torch-ref &
    lane 1 mla-b bash benchmarks/gpu_job.sh attn-mla -- --filter TopKSelectFwd,FP8LightningIndexerFwd & ;;
  rest)
    lane 0 nsa-kv bash -c 'OUT=$OUT/nsa bash benchmarks/gpu_job.sh attn-nsa
      OUT=$OUT/kv bash benchmarks/gpu_job.sh kvcache-ops' &
    lane 1 rel env STEP_CAP=120 RACECHECK=1 bash benchmarks/gpu_reliability.sh attn-core attn-mla attn-nsa kvcache-ops & ;;
  *) echo "PART must be checks, tunes, nsa, sweeps, core, mla or rest" >&2; exit 2 ;;
esac
wait
cat "$OUT"/*.txt
(cd "$OUT" && tar czf run.tgz --remove-files -- */ ./*.txt 2>/dev/null)
ls -R "$OUT"
