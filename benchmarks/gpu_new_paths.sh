#!/usr/bin/env bash
# One GPU call that checks, then times, the paths written without a GPU (docs/dev/gpu-runs.md, item 1):
# their GPU tests first (a path that fails is not timed: its sweep entries fail their own check too), then
# the sweeps that decide the defaults. Every step stops at DEADLINE (epoch seconds); JSON and logs land under
# $OUT (logs packed into new-paths-logs.tgz); one summary line per step is printed.
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> bash benchmarks/gpu_new_paths.sh
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
# Not `-m gpu`: the new paths' interpreter-sized tests run on CUDA too, and "rope" would also select every
# GPU-marked RoPE seed row (a first try spent its whole call on them). Sweeps run in the order their
# decisions are needed; each checks every config's output against the reference before timing it.
step gpu-tests 120 python3 -m pytest -q -p no:cacheprovider \
  -k "atomic or tma or merged_in_the_kernel or prepass or tile_in_page" packages/attn-core/tests
step tune-bwd 90 python3 -m benchmarks.tune_gqa_bwd --filter long --out "$OUT/tune-gqa-bwd.json"
step tune-mha-paged 60 python3 -m benchmarks.tune_attn_core_paged --filter MHADecode --out "$OUT/tune-mha-paged.json"
step tune-paged-decode 60 python3 -m benchmarks.tune_attn_core_paged --filter p64 --out "$OUT/tune-paged-decode.json"
step tune-decode 60 python3 -m benchmarks.tune_attn_core --filter qwen3-30b --out "$OUT/tune-decode.json"
step tune-prefill 60 python3 -m benchmarks.tune_attn_core --filter q-lt-kv --out "$OUT/tune-prefill.json"
step tune-rope 60 python3 -m benchmarks.tune_attn_core --filter rope --out "$OUT/tune-rope.json"
step gpu-tests-mla 60 python3 -m pytest -q -p no:cacheprovider -k "merged_in_the_kernel or split" \
  packages/attn-mla/tests/test_mla_decode_with_kvcache_fwd.py
step tune-mla 60 python3 -m benchmarks.tune_attn_mla --filter ds-v3 --out "$OUT/tune-mla.json"
(cd "$OUT" && tar czf new-paths-logs.tgz --remove-files ./*.log 2>/dev/null)
ls "$OUT"
