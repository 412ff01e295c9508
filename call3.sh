export ATTNOPS_GIT_SHA=29e7b5a
export OUT=${OUT:-/tmp/o}
mkdir -p $OUT
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)"
timeout 120 python3 -m benchmarks.tune_attn_core_paged --out $OUT/tune-paged-splits.json --iters 20 \
  --split-counts 1,2,3,4,5,6,8,12 --variants num_splits \
  --filter llama-70b-p16,llama-70b-p64/,llama-8b-32k-p64,gpt-oss-sink-decode,llama-8b-b64-p64,llama-8b-b64-p16 \
  >$OUT/tune-paged-splits.log 2>&1
grep -v "^\s" $OUT/tune-paged-splits.log | grep default | cut -c1-220
python3 - <<'PY'
import json, os
for r in json.load(open(os.environ["OUT"] + "/tune-paged-splits.json")):
    t = r["timed_ms"]
    print(r["id"][:40], " ".join(f"{k.split('=')[-1] if '=' in k else k}:{v*1e3:.1f}" for k, v in t.items()))
PY
