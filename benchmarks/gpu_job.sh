#!/usr/bin/env bash
# One GPU call: unpack the carried peers, make the in-tree packages importable, run the GPU tests and the
# benchmark of the named families, leave JSONL and logs under $OUT. Usage (on the GPU machine):
#   ATTNOPS_GIT_SHA=<sha> bash benchmarks/gpu_job.sh kvcache-ops [attn-core ...] [-- extra benchmark args]
set -u
families=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do families+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
if [ -f .peers/setup.sh ]; then eval "$(bash .peers/setup.sh 2>"$OUT/peers-setup.log")"; fi
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for family in "${families[@]}"; do
  python3 -m pytest -q -m gpu "packages/$family/tests" -p no:cacheprovider >"$OUT/gpu-tests-$family.log" 2>&1
  echo "gpu tests $family: $(tail -n 1 "$OUT/gpu-tests-$family.log")"
  python3 -m benchmarks.run --family "$family" --out "$OUT/bench-$family.jsonl" "$@" 2>"$OUT/bench-$family.err"
  tail -n 3 "$OUT/bench-$family.err"
done
