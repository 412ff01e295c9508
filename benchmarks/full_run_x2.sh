#!/usr/bin/env bash
# The new-path checks, the full 223-row benchmark (issue 8) and the sanitizer sweep (issue 10) in three calls
# on an nvidia-h200-x2 machine, each running two lanes in parallel, one per GPU:
#   PART=1: GPU 0 benchmarks/gpu_new_paths.sh        | GPU 1 attn-nsa, kvcache-ops, FP8LightningIndexerFwd rows
#   PART=2: GPU 0 benchmarks/gpu_new_paths.sh        | GPU 1 TopKSelectFwd, MLA / DSA rows, then
#                                                    |       benchmarks/gpu_reliability.sh
#   PART=3: GPU 0 GQADenseFwd, GQAVarlenFwd, GQABwd  | GPU 1 the three paged attn-core ops
# (The first PART=1 spent its new-path lane on too wide a test selection; PART=2 repeats that lane.) The
# new-path sweeps decide the attn-core defaults that PART=3 times; no row timed in parts 1-2 uses those paths
# (the MLA split merged in the kernel stays opt-in there).
# torch.compile peers are excluded on attn-core (10-30 s of compile per row) and, with torch-ref, on MLA/DSA
# (both already on record). A benchmark lane is benchmarks/gpu_job.sh (BENCH_FIRST=1: rows are timed before the
# family's tests) with its own OUT sub-folder and peer directory; every step stops at DEADLINE (epoch seconds).
# Everything under $OUT is packed into run.tgz at the end (at most 8 files come back). `.peers/` must hold
# ../shared/peers.
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> PART=1 bash benchmarks/full_run_x2.sh
set -u
OUT=${OUT:-/tmp/attnops-out}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
export ATTNOPS_GIT_SHA DEADLINE BENCH_FIRST=1
lane() {  # lane <gpu> <name> <command...>: one lane on one GPU, its output in $OUT/<name>.txt
  local gpu=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/$name" PEERS_DIR="/tmp/peers-gpu$gpu" "$@" >"$OUT/$name.txt" 2>&1
}
job() { bash benchmarks/gpu_job.sh "$@"; }
mkdir -p "$OUT"
case "${PART:?PART=1, 2 or 3}" in
  1) lane 0 new-paths bash benchmarks/gpu_new_paths.sh &
     lane 1 nsa-kv-idx bash -c 'TESTS=0 OUT=$OUT/nsa bash benchmarks/gpu_job.sh attn-nsa
       OUT=$OUT/kv bash benchmarks/gpu_job.sh kvcache-ops
       TESTS=0 OUT=$OUT/idx bash benchmarks/gpu_job.sh attn-mla -- --filter FP8LightningIndexerFwd' & ;;
  2) lane 0 new-paths bash benchmarks/gpu_new_paths.sh &
     lane 1 mla-rel bash -c 'TESTS=0 OUT=$OUT/topk bash benchmarks/gpu_job.sh attn-mla -- --filter TopKSelectFwd
       TESTS=0 OUT=$OUT/mla bash benchmarks/gpu_job.sh attn-mla -- \
         --filter MLADecodeWithKVCacheFwd,DSADecodeWithKVCacheFwd --exclude-peers torch-compile,torch-ref
       STEP_CAP=60 RACECHECK=1 OUT=$OUT/rel bash benchmarks/gpu_reliability.sh attn-core attn-mla' & ;;
  3) TESTS=0 lane 0 core-a job attn-core -- --filter GQADenseFwd,GQAVarlenFwd,GQABwd --exclude-peers torch-compile &
     TESTS=0 lane 1 core-b job attn-core -- --filter Paged --exclude-peers torch-compile & ;;
  *) echo "PART must be 1, 2 or 3" >&2; exit 2 ;;
esac
wait
cat "$OUT"/*.txt
(cd "$OUT" && tar czf run.tgz --remove-files -- */ ./*.txt 2>/dev/null)
ls -R "$OUT"
