#!/usr/bin/env bash
# One-off GPU diagnosis (2026-12-01, fifth session): the GQABwd fault of fuzz seed 502019, the prefill NaN test.
export PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:)
echo "## bisect"; timeout 150 python3 benchmarks/gqa_bwd_fault.py
echo "## memcheck"
timeout 90 compute-sanitizer --tool memcheck --print-limit 4 python3 benchmarks/gqa_bwd_fault.py \
  '{"batch":1,"s_q":1,"s_kv":1,"heads":[6,1],"head_dim":64,"is_causal":true,"sm_scale":0.3,"dtype":"bf16","config":-1}' 2>&1 | head -80
T=packages/attn-core/tests/test_attn_core_reliability.py
for i in 1 2; do
  echo "## nan/inf prefill run $i"
  ATTNOPS_POISON=1 timeout 60 python3 -m pytest -q -rf --tb=short -p no:cacheprovider \
    "$T::test_nan_and_inf_stay_in_their_request[GQAPrefillPagedWithKVCacheFwd-nan]" \
    "$T::test_nan_and_inf_stay_in_their_request[GQAPrefillPagedWithKVCacheFwd-inf]" 2>&1 | tail -40
done
echo "## racecheck, the attn-core shrunk rows the 2026-12-01 racecheck did not reach"
ATTNOPS_AUTOTUNE=0 timeout 200 compute-sanitizer --tool racecheck python3 -m pytest -q -p no:cacheprovider -m "not gpu" \
  -k seed_row_shrunk packages/attn-core/tests/test_gqa_varlen_fwd.py \
  packages/attn-core/tests/test_mha_decode_paged_with_kv_cache_fwd.py 2>&1 | tail -8
