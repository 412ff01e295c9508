#!/usr/bin/env bash
# compute-sanitizer memcheck over a selection of tests on the one GPU, in MEMCHECK_LANES sanitized pytest processes
# at once: a sanitized process runs its kernels many times slower and spends much of its time compiling, so lanes
# keep the GPU and the host's cores busy where one process would leave them idle. The test ids are collected once,
# shuffled with a fixed seed and dealt round-robin, so where the deadline cuts the lanes, what is left unrun is a
# sample of every file rather than the last files. The sanitizer prints each report as it finds it: a cut lane's log
# still shows what it found. Prints one line per lane (passed, failed, skipped, sanitizer reports, finished or cut), the
# distinct report headings, and packs the logs into <OUT>/memcheck.tgz; exits 3 if any lane reported one.
#   DEADLINE=<epoch s> [MEMCHECK_LANES=6] [MEMCHECK_PART=i/n] OUT=<dir> bash benchmarks/memcheck_lanes.sh <pytest args>
# (not LANES / PART: benchmarks/full_run_x2.sh gives those other meanings in its lanes' environment)
set -u
out=${OUT:-/tmp/attnops-out}/memcheck
mkdir -p "$out"
lanes=${MEMCHECK_LANES:-6}  # 8 ran a part in 260-314 s (6: 416-561 s) but ran part 1 out of device memory (H100, 2026-12-07)
deadline=${DEADLINE:?DEADLINE (epoch seconds) is required}
command -v compute-sanitizer >/dev/null || { echo "memcheck: no compute-sanitizer on PATH"; exit 2; }
PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)"
# Without torch's caching allocator every tensor is its own cudaMalloc: memcheck then sees a read past a tensor's end
# (inside a cached segment it would not), and the cache does not hold the device memory the sanitizer needs for its
# own tracking (with it, 3 lanes ran out of memory after ~45 tests each on an H100, fifty-first session).
export PYTHONPATH ATTNOPS_POISON=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
# MEMCHECK_PART=i/n: every n-th id of the shuffled list from the i-th (1 <= i <= n): n calls cover the selection
part=${MEMCHECK_PART:-1/1}
python3 -m pytest --collect-only -q -p no:cacheprovider "$@" 2>/dev/null | grep '::' |
  shuf --random-source=<(yes) | awk -v i="${part%/*}" -v n="${part#*/}" '(NR - i) % n == 0' >"$out/ids.txt"
echo "memcheck: $(wc -l <"$out/ids.txt") tests in $lanes lanes, $(( deadline - $(date +%s) )) s"
[ -s "$out/ids.txt" ] || { echo "memcheck: the selection holds no test"; exit 2; }
split -n "r/$lanes" -d -a 2 "$out/ids.txt" "$out/ids-"
for ids in "$out"/ids-*; do
  [ -s "$ids" ] || { rm -f "$ids"; continue; }  # (fewer tests than lanes: pytest given no id would run every test)
  mapfile -t tests <"$ids"
  timeout -k 10 $(( deadline - $(date +%s) )) compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 -m pytest -v --tb=line -p no:cacheprovider "${tests[@]}" >"$out/lane-${ids##*-}.log" 2>&1 &
done
wait
# a report's heading is '========= ' and a capital, at a line's start or after a test's id (the first report of a test
# lands on its id's line; pytest's own '====== FAILURES' rules are longer runs of '='); the banner and the summary
# are not reports
reports() { grep -oE '(^|[^=])========= [A-Z].*' "$1" | sed 's/^[^=]//' | grep -vE 'COMPUTE-SANITIZER|ERROR SUMMARY'; }
# A test's outcome is its progress mark ("PASSED [ 39%]"), counted wherever it stands: a report printed while the test
# runs puts it on a line of its own, apart from the test's id (so "<id> FAILED" alone misses those, the ones that
# matter). failed_ids names each failed or erred test by the last id line before its mark.
outcomes() { grep -cE "$1 +\[ *[0-9]+%\]" "$2"; }
failed_ids() { awk '$1 ~ /::/ && !/^(=|FAILED |ERROR )/ { id = $1 } /(FAILED|ERROR) +\[ *[0-9]+%\]/ { print id }' "$1"; }
found=0
for log in "$out"/lane-*.log; do
  n=$(reports "$log" | wc -l)
  found=$(( found + n ))
  echo "$(basename "$log" .log): $(outcomes PASSED "$log") passed, $(failed_ids "$log" | wc -l) failed," \
       "$(outcomes '(SKIPPED|XFAIL|XPASS)' "$log") skipped or xfailed, $n sanitizer reports;" \
       "$(grep -qE '^=+ .* in [0-9.]+s' "$log" && echo finished || echo 'cut by the deadline')"
done
for log in "$out"/lane-*.log; do reports "$log"; done | sed 's/ on CUDA API call to .*//' | sort | uniq -c | sort -rn |
  head -n 15
for log in "$out"/lane-*.log; do failed_ids "$log"; done | sed 's/^/failed: /' | head -n 15
# one file back from the device, not 2 x lanes + 1 (a device call returns a limited number of files)
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
[ "$found" = 0 ] || exit 3
