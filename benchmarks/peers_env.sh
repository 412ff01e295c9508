# Sourced by the GPU scripts (needs $OUT): unpacks the carried peer kit (.peers) and exports its environment.
# A fixed unpack dir in the repo (git-ignored, kept between calls on a warm machine): a later call skips the
# unpacking and finds FlashInfer's JIT cache ($PEERS_DIR/fiws) of the calls before it. The kit's default, a fresh
# temp dir per call, compiles every JIT module again (2026-12-02: 555 s of warm-up reached 14 module builds, no row).
export PEERS_DIR=${PEERS_DIR:-$PWD/.peers-run}
if [ -f .peers/setup.sh ]; then eval "$(bash .peers/setup.sh 2>"$OUT/peers-setup.log")"; fi
# FlashInfer modules the kit does not ship prebuilt, compiled off the GPU machine by
# benchmarks/flashinfer_prebuild.py (same nvcc 13.0, sm_90a) and carried in the git-ignored .peers-jit/: added to
# the unpacked kit's AOT folder, the one place FlashInfer loads a module from with FLASHINFER_DISABLE_JIT=1 (its
# JIT cache is only read through ninja), so no call spends minutes compiling them.
aot_dir="$PEERS_DIR/flashinfer/flashinfer/data/aot"
if [ -d "$aot_dir" ] && ls .peers-jit/flashinfer-jit-*.tar.xz >/dev/null 2>&1; then
  for f in .peers-jit/flashinfer-jit-*.tar.xz; do tar xJf "$f" -C "$aot_dir"; done
  echo "FlashInfer AOT modules with the prebuilt ones: $(ls "$aot_dir" | wc -l)" >>"$OUT/peers-setup.log"
fi
