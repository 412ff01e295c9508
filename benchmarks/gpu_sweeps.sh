#!/usr/bin/env bash
# One GPU lane of the checks and sweeps that decide the next defaults (docs/dev/gpu-runs.md): named GPU tests
# first (verbose, so a cut log still says which test failed), then the sweeps in the order their decisions
# are needed; each sweep checks every variant's output against the reference before timing it. Every step
# is cut at its cap or at DEADLINE (epoch seconds), whichever comes first; JSON and logs land under $OUT
# (logs packed into sweeps-logs.tgz); one summary line per step is printed.
# PHASE=tests runs only the GPU tests, PHASE=sweeps only the sweeps (the two phases of a one-GPU machine:
# the tests may share the GPU with the sanitizer, the sweeps time kernels and must have it alone). The tests run on
# TEST_WORKERS pytest-xdist workers (default 8: their time is mostly Triton compiles, ~3x faster than one).
#   ATTNOPS_GIT_SHA=<sha> DEADLINE=<epoch s> [PHASE=tests|sweeps|all] bash benchmarks/gpu_sweeps.sh
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
tune() { local name=$1 cap=$2 tool=$3; shift 3; step "$name" "$cap" python3 -m "benchmarks.$tool" --out "$OUT/$name.json" "$@"; }
core=packages/attn-core/tests mla=packages/attn-mla/tests
# Caps add up to ~480 s: the deadline cuts the last sweeps first (ordered by the size of the gap they address).
# Node ids, not -k: on the GPU machine a -k expression once matched every test of the family.
PHASE=${PHASE:-all}
[ "$PHASE" = sweeps ] || step gpu-tests "${TESTS_CAP:-120}" python3 -m pytest -v -rf -n "${TEST_WORKERS:-8}" --timeout 90 -p no:cacheprovider \
  "$core/test_gqa_bwd.py::test_single_token_every_config" \
  "$core/test_attn_core_reliability.py::test_nan_and_inf_stay_in_their_request" \
  "$core/test_mha_decode_paged_with_kv_cache_fwd.py" \
  "$core/test_gqa_paged_fwd.py::test_decode_requests_merged_into_the_prefill_launch" \
  "$core/test_gqa_prefill_paged_with_kv_cache_fwd.py::test_decode_requests_merged_into_the_prefill_launch" \
  "$core/test_gqa_paged_fwd.py::test_page_addressing" \
  "$core/test_gqa_paged_fwd.py::test_kv_splits_merged_in_the_kernel_gpu" \
  "$core/test_gqa_varlen_fwd.py::test_tma_configs_gpu" \
  "$core/test_gqa_varlen_fwd.py::test_rope_keys_rotated_in_a_prepass" \
  "$core/test_gqa_dense_fwd.py::test_rope_keys_rotated_in_a_prepass" \
  "$core/test_gqa_bwd.py::test_atomic_dq_every_config_gpu" \
  "$core/test_gqa_paged_fwd.py::test_every_config" \
  "$core/test_gqa_dense_fwd.py::test_decode_split_kv_and_combine" \
  "$mla/test_topk_select_fwd.py::test_every_config_shrunk" \
  "$mla/test_topk_select_fwd.py::test_split_path_random_rows" \
  "$mla/test_topk_select_fwd.py::test_windows_of_every_kind" \
  "$mla/test_topk_select_fwd.py::test_ties_go_to_the_lower_position" \
  "$mla/test_topk_select_fwd.py::test_all_minus_inf_row_is_still_selected" \
  "$mla/test_topk_select_fwd.py::test_radix_and_bitwise_selects_agree"
if [ "$PHASE" = tests ]; then
  grep -h "^FAILED\|^ERROR" "$OUT/gpu-tests.log" 2>/dev/null | head -20  # the failing node ids, before packing
  (cd "$OUT" && tar czf tests-logs.tgz --remove-files ./*.log 2>/dev/null); exit 0
fi
# paged: the rows slower on 2026-12-01 (405b-p256, 70b-p16); the p16 rows (pow2_pages: pages below the tile);
# GQAPagedFwd's prefill rows (0.40-0.58x FA3 on the per-key gather of the prefill tile: tile_in_page and
# pow2_pages for that kind, page 64); the prefill op's smaller rows (D = 256 tiles: its default spills 136 B
# with RoPE, 64x32 w8 none). The default plan's time per kernel is printed too (attention vs combine).
# (the ninth session's sweep decided tile_in_page / fused combine for the paged ops, the D = 64 tile, the RoPE key
# pre-pass, GQABwd `choose` and MLA's split floor: docs/perf/attn-core.md "Ninth session")
# TopK decode at 8 / 16 warps beside the default (timed 2026-12-03 11:00: level); the merged noncausal launch's tiles (128x64 w8 s4 new: its loop waits on the 3-stage K / V copies)
tune tune-topk-warps 90 tune_attn_mla --filter topk-decode --iters 20
tune tune-noncausal 60 tune_attn_core_paged --filter noncausal --variants large:
# dense gemma-2b-8k-bs1 (0.71x cuDNN; 32 splits of 256 keys, 64 splits measured slower): attention vs combine
# (with the chunked combine of the twentieth session: combine vs attention launch time)
step gemma-bs1-breakdown 40 python3 -m benchmarks.ncu_row --family attn-core --row GQADenseFwd/gemma-2b-8k-bs1/bf16 \
  --breakdown
tune tune-splits 90 tune_attn_core --filter qwen3-30b,llama-8b-32k,llama-70b-32k,gemma-2b-8k  # one-wave split rule
tune tune-paged 150 tune_attn_core_paged \
  --filter gemma-2b,qwen35,gpt-oss-sink,-p16/,llama-8b-rope/  # D = 256 tiles, sink rows, p16 rows on 0.3.4
tune tune-bwd 90 tune_gqa_bwd --filter long  # the long rows on the refit `choose`
tune tune-mla 60 tune_attn_mla --filter ds-v3-32k,serving-batch,ds-v2  # the 128-key split floor on the other rows
(cd "$OUT" && tar czf sweeps-logs.tgz --remove-files ./*.log 2>/dev/null)
ls "$OUT"
