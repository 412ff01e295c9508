export ATTNOPS_GIT_SHA=238b414
export OUT=${OUT:-/tmp/o}
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
PHASE=tests TESTS_CAP=170 DEADLINE=$((T0+175)) bash benchmarks/gpu_sweeps.sh
PHASE=sweeps DEADLINE=$((T0+570)) bash benchmarks/gpu_sweeps.sh
ls $OUT
