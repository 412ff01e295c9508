export ATTNOPS_GIT_SHA=0b5191c
export OUT=${OUT:-/tmp/o}
mkdir -p $OUT
T0=$(date +%s)
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)"
D=packages/attn-core/tests
timeout 110 python3 -m pytest -q -rf -n 8 --timeout 90 -p no:cacheprovider \
  $D/test_gqa_dense_fwd.py::test_decode_split_kv_and_combine $D/test_gqa_dense_fwd.py::test_masks_softcap_scale \
  $D/test_gqa_dense_fwd.py::test_every_decode_config_gpu $D/test_gqa_dense_fwd.py::test_repeated_calls_are_bitwise_identical \
  $D/test_gqa_dense_fwd.py::test_fp8_upcast_config_and_decode $D/test_gqa_varlen_fwd.py::test_sinks_with_empty_rows_and_windows \
  $D/test_gqa_varlen_fwd.py::test_split_kv_ragged $D/test_gqa_varlen_fwd.py::test_split_kv_merged_in_the_kernel \
  $D/test_gqa_varlen_fwd.py::test_fp8_to_f16 $D/test_gqa_dense_fwd.py::test_decode_gqa_ratios >$OUT/gpu-tests.log 2>&1
echo "tests: $(tail -n1 $OUT/gpu-tests.log)"; grep "^FAILED" $OUT/gpu-tests.log | head
timeout 100 python3 -m benchmarks.tune_attn_core --out $OUT/tune-splits.json --iters 30 \
  --filter qwen3-30b-1k,qwen3-30b-4k,qwen3-30b-8k,qwen3-30b-16k,gemma-2b-8k >$OUT/tune-splits.log 2>&1
grep -E "default" $OUT/tune-splits.log | cut -c1-160
TESTS=0 WARM=8 DEADLINE=$((T0+400)) bash benchmarks/gpu_job.sh attn-core -- --exclude-peers torch-compile \
  --filter GQADenseFwd/llama-8b-32k,GQADenseFwd/llama-70b-32k,GQADenseFwd/qwen3-30b,GQADenseFwd/starcoder,GQADenseFwd/gemma-2b-8k
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench-attn-core.jsonl"):
    r = json.loads(l)
    if r.get("type") != "row": continue
    im = r["impls"]; ours = im["attnops"].get("ms")
    peers = {k: v["ms"] for k, v in im.items() if k not in ("attnops", "torch-ref") and v.get("ms") and v.get("check") == "pass"}
    b = min(peers, key=peers.get) if peers else None
    print(f"{r['id']:45s} ours {ours*1e3 if ours else float('nan'):8.1f} us  best {b} {peers[b]*1e3 if b else float('nan'):8.1f}  ratio {peers[b]/ours if b and ours else 0:.2f}  {im['attnops'].get('check')}")
PY
L=$(( T0 + 560 - $(date +%s) ))
if [ $L -gt 60 ]; then timeout $L python3 -m benchmarks.tune_attn_core_paged --out $OUT/tune-paged-decode.json --iters 20 \
  --filter llama-8b-p64/,llama-8b-32k-p64,llama-8b-b64-p64,llama-70b-p64/,llama-8b-p256/,llama-70b-p256,llama-405b-p256,gpt-oss-sink-decode >$OUT/tune-paged-decode.log 2>&1
  grep "default" $OUT/tune-paged-decode.log | cut -c1-200; fi
(cd $OUT && tar czf call-logs.tgz --remove-files ./*.log 2>/dev/null); ls $OUT
