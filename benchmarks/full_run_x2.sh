#!/usr/bin/env bash
# The full 223-row benchmark (issue 8) in two calls on an nvidia-h200-x2 machine, each running one half on each
# GPU in parallel (a family's rows take longer than one call's 10 minutes on one GPU):
#   PART=1: GPU 0 GQADenseFwd, GQAVarlenFwd, GQABwd | GPU 1 MLADecodeWithKVCacheFwd, DSADecodeWithKVCacheFwd
#   PART=2: GPU 0 the three paged attn-core ops    | GPU 1 indexer, top-k, attn-nsa, kvcache-ops
# torch.compile peers are excluded on attn-core (10-30 s of compile per row). Each half is one
# benchmarks/gpu_job.sh (BENCH_FIRST=1: rows are timed before the family's tests) with its own OUT sub-folder
# and peer directory; every step stops at DEADLINE (epoch seconds). `.peers/` must hold ../shared/peers.
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> PART=1 bash benchmarks/full_run_x2.sh
set -u
OUT=${OUT:-/tmp/attnops-out}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 540 ))}
export ATTNOPS_GIT_SHA DEADLINE BENCH_FIRST=1
half() {  # half <gpu> <name> <families...> -- <bench args>: one gpu_job.sh on one GPU
  local gpu=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/$name" PEERS_DIR="/tmp/peers-gpu$gpu" \
    bash benchmarks/gpu_job.sh "$@" >"$OUT/$name.txt" 2>&1
}
mkdir -p "$OUT"
case "${PART:?PART=1 or PART=2}" in
  1) half 0 core-a attn-core -- --filter GQADenseFwd,GQAVarlenFwd,GQABwd --exclude-peers torch-compile &
     half 1 mla-a attn-mla -- --filter MLADecodeWithKVCacheFwd,DSADecodeWithKVCacheFwd & ;;
  # the attn-core and attn-mla tests ran in part 1
  2) TESTS=0 half 0 core-b attn-core -- --filter Paged --exclude-peers torch-compile &
     (TESTS=0 half 1 mla-b attn-mla -- --filter FP8LightningIndexerFwd,TopKSelectFwd
      half 1 nsa-kv attn-nsa kvcache-ops) & ;;
  *) echo "PART must be 1 or 2" >&2; exit 2 ;;
esac
wait
cat "$OUT"/*.txt
