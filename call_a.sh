#!/usr/bin/env bash
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:):.
timeout 220 python3 -m pytest -q -rf -p no:cacheprovider packages/attn-core/tests/test_flash_fwd_ws.py > $OUT/ws-tests.log 2>&1
echo "ws tests rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "FAIL|Error|passed|failed" $OUT/ws-tests.log | cut -c1-400 | tail -n 30
timeout 330 python3 -m benchmarks.tune_attn_core --ws --iters 30 --out $OUT/tune-ws.json > $OUT/tune-ws.log 2>&1
echo "tune ws rc=$? ($(( $(date +%s) - T0 )) s)"; grep -v -i warn $OUT/tune-ws.log | cut -c1-330 | tail -n 45
