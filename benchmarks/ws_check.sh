#!/usr/bin/env bash
# GPU calls for the Gluon warp-specialized kernels: their GPU tests, each group under its own timeout (a wrong
# mbarrier phase hangs rather than fails: a hang in one group keeps the others' results), then the sweeps of their
# configs beside the Triton kernels. STEPS picks steps (default the flash forward's four, in this order); every
# step stops at DEADLINE (epoch seconds, default 560 s from now). Logs and JSON under $OUT; each sweep's last
# lines are printed, and per row every timed label (ws configs beside the default) from its JSON.
#   STEPS="tests-core tune-core" bash benchmarks/ws_check.sh     # attn-core flash forward, dense / varlen
#   STEPS="tests-paged tune-paged" bash benchmarks/ws_check.sh   # its paged layout
#   STEPS="tests-latent tune-latent" bash benchmarks/ws_check.sh # attn-mla MLA decode and DSA
#   STEPS="tests-bwd tune-bwd" bash benchmarks/ws_check.sh       # attn-core GQABwd dK / dV and dQ
# TUNE_CORE / TUNE_PAGED / TUNE_LATENT / TUNE_BWD: the rows (--filter) of the four sweeps.
# tests-latent first runs NEW_LATENT (configs never run on a GPU; default the alternating MLA config) on two small
# cases under a short timeout: if that fails or hangs, the config is deselected from the tests and the sweep.
set -u
OUT=${OUT:-/tmp/attnops-out}
mkdir -p "$OUT"
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:):."
export PYTHONPATH PYTHONUNBUFFERED=1 ATTNOPS_POISON=1
. benchmarks/peers_env.sh
DEADLINE=${DEADLINE:-$(( $(date +%s) + 560 ))}
left() { local s=$(( DEADLINE - $(date +%s) )); echo $(( s > 5 ? s : 5 )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }  # cap <s>: at most s, never past the deadline
FLASH_TESTS=packages/attn-core/tests/test_flash_fwd_ws.py
LATENT_TESTS="packages/attn-mla/tests/test_mla_decode_ws.py packages/attn-mla/tests/test_dsa_decode_ws.py"
BWD_TESTS=packages/attn-core/tests/test_gqa_bwd_ws.py
TUNE_CORE=${TUNE_CORE:-llama-8b-uniform/bf16,short-w256/bf16,llama-8b-q-lt-kv/bf16,llama-70b-q-lt-kv/bf16,long-w1024/bf16,chunked-b8}
TUNE_PAGED=${TUNE_PAGED:-GQAPagedFwd/llama-8b/,serving-step,qwen3-ragged-odd,gpt-oss-sink-mixed,starcoder,gemma-2b,falcon-7b,synthetic-softcap/f16,qwen35-9b-mixed}
TUNE_LATENT=${TUNE_LATENT:-mla-b128-8192/bf16,ds-v3-serving-batch/bf16,ds-v3-4k/bf16,mla-tp-b64/bf16,d576-h128-kv32k,d512-h64-kv32k}
TUNE_BWD=${TUNE_BWD:-long}
NEW_LATENT=${NEW_LATENT:-ws-alt-n32s4}
SKIP_LATENT=""
# PYTEST_PAR: pytest-xdist workers for a test group (the Gluon kernels' tests are compile-bound: 8 on the 16-core host)
tests() {  # tests <name> <seconds> <-k expression> <files...>
  local name=$1 seconds=$2 expr=$3; shift 3
  timeout "$(cap "$seconds")" python3 -m pytest -q -rf -p no:cacheprovider -n "${PYTEST_PAR:-8}" --timeout 90 \
    -k "$expr" "$@" >"$OUT/tests-$name.log" 2>&1
  echo "tests $name: rc=$? $(tail -n 1 "$OUT/tests-$name.log")"
  grep -E "^FAILED|^E  " "$OUT/tests-$name.log" | cut -c1-300 | head -n 12
}
tune() {  # tune <name> <seconds> <module> <filter> [extra args]
  local name=$1 seconds=$2 module=$3 filter=$4; shift 4
  timeout "$(cap "$seconds")" python3 -m "benchmarks.$module" "$@" --iters 20 --filter "$filter" \
    --out "$OUT/tune-$name.json" >"$OUT/tune-$name.log" 2>&1
  echo "tune $name: rc=$?"
  grep -v -i warn "$OUT/tune-$name.log" | cut -c1-330 | tail -n 30
  python3 - "$OUT/tune-$name.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit()
for r in rows:
    ms = r.get("ms", {})
    print(r["id"], " ".join(f"{k.split(' (')[0]}={v:.4f}" for k, v in ms.items() if "splits" not in k),
          "| failed:", sorted(r.get("failed", {})) or "-")
PY
}
for step in ${STEPS:-tests-core tune-core tests-paged tune-paged}; do
  case "$step" in
    tests-core) tests core 200 "not paged" $FLASH_TESTS ;;
    tune-core) tune core 330 tune_attn_core "$TUNE_CORE" --ws ;;
    tests-paged) tests paged 200 "paged" $FLASH_TESTS ;;
    tune-paged) tune paged 330 tune_attn_core_paged "$TUNE_PAGED" --ws ;;
    tests-latent)
      if [ -n "$NEW_LATENT" ]; then
        tests latent-smoke 100 "$NEW_LATENT and (one-key or tail) and f16" packages/attn-mla/tests/test_mla_decode_ws.py
        grep -q " passed" "$OUT/tests-latent-smoke.log" && ! grep -qE "failed|error|Timeout" "$OUT/tests-latent-smoke.log" \
          || { SKIP_LATENT=$NEW_LATENT; echo "smoke failed: $NEW_LATENT left out"; }
      fi
      tests latent 240 "${SKIP_LATENT:+not $SKIP_LATENT}" $LATENT_TESTS ;;
    tune-latent) tune latent 330 tune_attn_mla "$TUNE_LATENT" ${SKIP_LATENT:+--skip "$SKIP_LATENT"} ;;
    tests-bwd) tests bwd 240 "" $BWD_TESTS ;;
    tune-bwd) tune bwd 330 tune_gqa_bwd "$TUNE_BWD" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done
