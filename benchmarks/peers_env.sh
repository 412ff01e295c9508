# Sourced by the GPU scripts (needs $OUT): unpacks the carried peer kit (.peers) and exports its environment.
# A fixed unpack dir in the repo (git-ignored, kept between calls on a warm machine): a later call skips the
# unpacking and finds FlashInfer's JIT cache ($PEERS_DIR/fiws) of the calls before it. The kit's default, a fresh
# temp dir per call, compiles every JIT module again (2026-12-02: 555 s of warm-up reached 14 module builds, no row).
export PEERS_DIR=${PEERS_DIR:-$PWD/.peers-run}
if [ -f .peers/setup.sh ]; then eval "$(bash .peers/setup.sh 2>"$OUT/peers-setup.log")"; fi
