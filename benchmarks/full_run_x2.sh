#!/usr/bin/env bash
# Half of the full 223-row benchmark on each GPU of an nvidia-h200-x2 machine, in one call (issue 8):
# HALF=1: GPU 0 runs attn-core (128 rows, torch.compile peers excluded: 10-30 s of compile per row);
# HALF=2: GPU 1 runs attn-mla, attn-nsa, kvcache-ops. Both halves run in parallel when HALF is unset.
# Each half is one benchmarks/gpu_job.sh (BENCH_FIRST=1: rows are timed before the family's tests) with its own
# OUT sub-folder and peer directory; every step stops at DEADLINE (epoch seconds).
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> bash benchmarks/full_run_x2.sh
set -u
OUT=${OUT:-/tmp/attnops-out}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
export ATTNOPS_GIT_SHA DEADLINE BENCH_FIRST=1
half() {  # half <n> <gpu> <families...> [-- bench args]
  local n=$1 gpu=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/half$n" PEERS_DIR="/tmp/peers-half$n" \
    bash benchmarks/gpu_job.sh "$@" >"$OUT/half$n.txt" 2>&1
}
mkdir -p "$OUT"
[ "${HALF:-1}" = 1 ] && half 1 0 attn-core -- --exclude-peers torch-compile &
[ "${HALF:-2}" = 2 ] && half 2 1 attn-mla attn-nsa kvcache-ops &
wait
cat "$OUT"/half*.txt
