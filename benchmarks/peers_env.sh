# Sourced by the GPU scripts (needs $OUT): unpacks the carried peer kit (.peers) and exports its environment.
# A fixed unpack dir in the repo (git-ignored, kept between calls on a warm machine): a later call skips the
# unpacking and finds FlashInfer's JIT cache ($PEERS_DIR/fiws) of the calls before it. The kit's default, a fresh
# temp dir per call, compiles every JIT module again (2026-12-02: 555 s of warm-up reached 14 module builds, no row).
export PEERS_DIR=${PEERS_DIR:-$PWD/.peers-run}
if [ -f .peers/setup.sh ]; then eval "$(bash .peers/setup.sh 2>"$OUT/peers-setup.log")"; fi
# FlashInfer modules the kit does not ship prebuilt, compiled off the GPU machine by
# benchmarks/flashinfer_prebuild.py (same nvcc 13.0, sm_90a) and carried in the git-ignored .peers-jit/: placed
# where FlashInfer looks first, so FLASHINFER_DISABLE_JIT=1 runs find them and no call spends minutes compiling.
if [ -n "${FLASHINFER_WORKSPACE_BASE:-}" ] && ls .peers-jit/flashinfer-jit-*.tar.xz >/dev/null 2>&1; then
  jit_cache="$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer"
  mkdir -p "$jit_cache"
  for f in .peers-jit/flashinfer-jit-*.tar.xz; do tar xJf "$f" -C "$jit_cache"; done
  echo "prebuilt FlashInfer modules: $(ls "$jit_cache"/*/*/cached_ops | wc -l)" >>"$OUT/peers-setup.log"
fi
