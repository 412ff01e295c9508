#!/usr/bin/env bash
# The open issues' rows on the H200 in one device call: each step its own benchmarks/gpu_job.sh (TESTS=0) or pytest
# run, with its own $OUT subfolder and its own deadline, so a slow step cannot take the next one's logs with it.
# The issues' floors are H200 numbers: on any other GPU the script prints the card and stops (exit 3) before
# anything runs, unless ANY_GPU=1 (then the steps run there: their ratios beside the peers stand, their times and
# the published ratios do not; results go to benchmarks/results/h100/).
# STEPS: space-separated <step>:<deadline in s after the start>, run in that order. Steps:
#   bwd        the 16 GQABwd rows beside cuDNN / flash SDPA (issue 5)
#   bwd-tests  every GQABwd test (both files) on the GPU with ATTNOPS_POISON=1 and pytest-xdist (the seed rows at
#              full size are left to the bench step, which checks each row it times against the same reference)
#   paged      the 44 paged rows beside FA3 / FlashInfer / SDPA (issue 4)
#   mla        TopK decode and the 17 DSA rows beside FlashInfer / FlashMLA (issue 6)
#   mla-decode the 26 MLA decode rows beside FlashInfer / FlashMLA (issue 6; their default is the lazy rescale since
#              attn-mla 0.2.13, not yet run on the H200)
#   mla-all    all 64 attn-mla rows in one run (issue 6 asks for that: MLA decode, DSA, the indexer, TopK; our
#              kernels compiled first in WARM=8 processes; not yet run as one step)
#   fwd        the varlen rows and the qwen3 dense rows (the long-block rule)
#   tests-fwd  every GPU test of attn-core but GQABwd's (bwd-tests runs those; -m gpu, ATTNOPS_POISON=1, 15
#              workers; 430 s on an H100, 2026-12-06)
#   tests-rest every GPU test of kernel-utils, attn-mla, attn-nsa and kvcache-ops (the same; 97 % of it in 500 s on an
#              H100, 2026-12-06)
#   tests-paged the GPU tests of the three paged ops (their files, and test_flash_fwd_ws.py's paged cases: issue 4)
#   tests-mla  every GPU test of attn-mla (issue 6)
#   memcheck   compute-sanitizer memcheck over the GPU tests of attn-core and attn-mla (their warp-specialized
#              kernels' edge cases most of them; the full-size seed rows left out), 6 sanitized pytest lanes
#              (benchmarks/memcheck_lanes.sh; MEMCHECK_PART=i/n runs the i-th of n disjoint parts: ~0.4 tests a second, so
#              the 939 take five ~8-minute calls): any Hopper card answers it, the kernels and SM count being the same
#   bwd-tune   benchmarks/gpu_sweeps.sh's tune-bwd-long-mha: every ws GQABwd config on the four long MHA rows in one
#              process, the early-scores default against ws-s3-p (issue 5; ~100 s)
#   dsa-tune   gpu_sweeps.sh's tune-dsa-d576: every DSA ws config on the d576-h128 kv8k / kv32k rows (issue 6)
#   tests-split-free  the DSA split-free configs' GPU tests (-k "h-f" in test_dsa_decode_ws.py; 29 passed on an
#              H100, 2026-12-07; a barrier change can hang: -o faulthandler_timeout=120 dumps a hung test's stacks)
#   split-free-tune  gpu_sweeps.sh's tune-dsa-split-free: those configs beside the default on five DSA rows
#   dsa-small-tune  gpu_sweeps.sh's tune-dsa-small-cache: the 64-key forms beside the 32-key one on the 576-wide rows
#   tests-dsa  the DSA op's GPU tests (its default configs, the small-cache rule's included)
# Carry .peers (attn-core bundles plus FlashMLA: benchmarks/peers_copy.sh) and .peers-jit.
#   ATTNOPS_GIT_SHA=<sha> [STEPS="bwd:100 bwd-tests:220 paged:430"] [ANY_GPU=1] bash benchmarks/issue_rows.sh
set -u
steps=${STEPS:-bwd:100 bwd-tests:220 paged:430}
for step in $steps; do  # (a misspelt step fails here, before any device time is spent)
  [[ "$step" =~ ^(bwd|bwd-tests|paged|mla|mla-decode|mla-all|fwd|tests-fwd|tests-rest|tests-paged|tests-mla|memcheck|bwd-tune|dsa-tune|tests-split-free|split-free-tune|dsa-small-tune|tests-dsa):[0-9]+$ ]] || { echo "bad step: $step"; exit 2; }
done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "GPU: $gpu"
if [[ "$gpu" != *H200* ]] && [ "${ANY_GPU:-0}" != 1 ]; then
  echo "not an H200: nothing run (ANY_GPU=1 runs the steps anyway)"
  exit 3
fi
start=$(date +%s)
root_out=${OUT:-/tmp/attnops-out}
no_ref="torch-ref,torch-compile"
no_ref_mla="$no_ref,torch-gather,torch,torch-sdpa"
# job <subfolder> <deadline> <gpu_job.sh arguments...>
job() { local sub=$1 deadline=$2; shift 2; mkdir -p "$root_out/$sub"
        OUT=$root_out/$sub TESTS=0 DEADLINE=$deadline bash benchmarks/gpu_job.sh "$@"; }
# gpu_tests <deadline> <log name> <pytest arguments...>: GPU tests with ATTNOPS_POISON=1 under pytest-xdist, cut at
# the deadline. -v: xdist names each case as it starts and as it ends; its summary, the only other place failures are
# named, is lost when the deadline cuts the run. Each log line starts with the second it was printed, so
# benchmarks/test_times.py can say how long each case ran and which ones the deadline cut; that time includes a
# full-size case's wait for its turn, so the plugin also writes <log>-turns.log (when each took and gave back its
# turn), which test_times reads too.
# A case still running after 300 s prints every thread's stack into the log (faulthandler; the run goes on).
gpu_tests() {
  local deadline=$1 log=$root_out/tests/$2.log rc
  shift 2
  mkdir -p "$root_out/tests"
  PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)" ATTNOPS_POISON=1 PYTHONUNBUFFERED=1 \
    ATTNOPS_TURN_LOG="${log%.log}-turns.log" timeout -k 30 $(( deadline - $(date +%s) )) \
    python3 -m pytest -v --tb=line -rf -p no:cacheprovider -o faulthandler_timeout=300 "$@" 2>&1 |
    while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done >"$log"
  rc=${PIPESTATUS[0]}  # 124: cut by the deadline
  # outcomes from xdist's progress lines ("[gw3] [ 39%] FAILED <id>"): -rf's summary repeats each failure, and a
  # setup error is an ERROR, not a FAILED
  echo "$(basename "$log" .log): rc=$rc $(grep -cE '\] PASSED ' "$log") passed," \
       "$(grep -cE '\] (FAILED|ERROR) ' "$log") failed or erred"
  grep -E '\] (FAILED|ERROR) ' "$log" | head -n 20
  python3 -m benchmarks.test_times "$log" --slowest 8
}
# sweep <gpu_sweeps.sh step>: that one sweep, its JSON and logs under <step>/
sweep() { mkdir -p "$root_out/$1"; OUT=$root_out/$1 DEADLINE=$deadline PHASE=sweeps STEPS=$1 bash benchmarks/gpu_sweeps.sh; }
for step in $steps; do
  name=${step%%:*}; deadline=$(( start + ${step##*:} ))
  [ "$(date +%s)" -lt "$deadline" ] || { echo "$name: skipped (its deadline has passed)"; continue; }
  case $name in
    bwd) job bwd "$deadline" attn-core -- --filter "GQABwd/" --exclude-peers "$no_ref" ;;
    bwd-tests) gpu_tests "$deadline" poison-bwd -n 12 -k "not seed_row_full_size" \
                 packages/attn-core/tests/test_gqa_bwd.py packages/attn-core/tests/test_gqa_bwd_ws.py ;;
    tests-fwd) gpu_tests "$deadline" gpu-attn-core-fwd -m gpu -n 15 packages/attn-core/tests \
                 --ignore=packages/attn-core/tests/test_gqa_bwd.py --ignore=packages/attn-core/tests/test_gqa_bwd_ws.py ;;
    tests-rest) gpu_tests "$deadline" gpu-rest -m gpu -n 15 packages/kernel-utils/tests packages/attn-mla/tests \
                  packages/attn-nsa/tests packages/kvcache-ops/tests ;;
    tests-paged) gpu_tests "$deadline" gpu-paged -m gpu -n 15 -k paged packages/attn-core/tests/test_gqa_paged_fwd.py \
                   packages/attn-core/tests/test_mha_decode_paged_with_kv_cache_fwd.py \
                   packages/attn-core/tests/test_gqa_prefill_paged_with_kv_cache_fwd.py \
                   packages/attn-core/tests/test_flash_fwd_ws.py ;;
    tests-mla) gpu_tests "$deadline" gpu-attn-mla -m gpu -n 15 packages/attn-mla/tests ;;
    paged) job paged "$deadline" attn-core -- --filter \
             "GQAPagedFwd/,MHADecodePagedWithKVCacheFwd/,GQAPrefillPagedWithKVCacheFwd/" --exclude-peers "$no_ref" ;;
    mla) job mla "$deadline" attn-mla -- --filter "TopKSelectFwd/ds-v32,DSADecode" --exclude-peers "$no_ref_mla" ;;
    mla-all) WARM=${WARM:-8} job mla-all "$deadline" attn-mla -- --exclude-peers "$no_ref_mla" ;;
    mla-decode) job mla-decode "$deadline" attn-mla -- --filter "MLADecodeWithKVCacheFwd/" --exclude-peers "$no_ref_mla" ;;
    fwd) job fwd "$deadline" attn-core -- --filter "GQAVarlenFwd/,GQADenseFwd/qwen3" --exclude-peers "$no_ref" ;;
    memcheck) OUT=$root_out DEADLINE=$deadline bash benchmarks/memcheck_lanes.sh -m gpu \
                -k "not seed_row and not full_size" packages/attn-core/tests packages/attn-mla/tests
              echo "memcheck: rc=$?" ;;
    bwd-tune) sweep tune-bwd-long-mha ;;
    dsa-tune) sweep tune-dsa-d576 ;;
    tests-split-free) gpu_tests "$deadline" gpu-dsa-split-free -n 8 -o faulthandler_timeout=120 -k "h-f" \
                        packages/attn-mla/tests/test_dsa_decode_ws.py ;;
    split-free-tune) sweep tune-dsa-split-free ;;
    dsa-small-tune) sweep tune-dsa-small-cache ;;
    tests-dsa) gpu_tests "$deadline" gpu-dsa -m gpu -n 15 -o faulthandler_timeout=120 \
                 packages/attn-mla/tests/test_dsa_decode_with_kvcache_fwd.py ;;
  esac
done
echo "wall $(( $(date +%s) - start )) s"
