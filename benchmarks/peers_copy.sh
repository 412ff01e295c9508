#!/usr/bin/env bash
# Fill the git-ignored .peers/ with the peer bundles the named families' benchmarks import, from the kit beside
# the checkout (../shared/peers), and say whether the carry fits. A new session's checkout has no .peers/: a call
# that needs it must re-create it first (2026-12-05: a call stopped at its `test -f .peers/setup.sh` guard).
#   bash benchmarks/peers_copy.sh attn-core [attn-mla ...]
set -eu
KIT=${PEERS_KIT:-../shared/peers}
declare -A BUNDLES=(
  [attn-core]="fa3-vllm-*.tar.xz flashinfer-*.tar.xz apache_tvm_ffi-*.whl cacheops-vllm-*.tar.xz"  # cache ops: the prefill op's FA3 adapter
  [attn-mla]="flashinfer-*.tar.xz apache_tvm_ffi-*.whl flashmla-vllm-*.tar.xz deepgemm-vllm-*.tar.xz"
  [attn-nsa]="fla_core-*.whl flash_linear_attention-*.whl"
  [kvcache-ops]="cacheops-vllm-*.tar.xz flashinfer-*.tar.xz apache_tvm_ffi-*.whl"
)
[ $# -gt 0 ] || { echo "usage: $0 <family>... (of: ${!BUNDLES[*]})" >&2; exit 2; }
rm -rf .peers && mkdir .peers
cp "$KIT/setup.sh" "$KIT/smoke.py" .peers/
for family in "$@"; do
  [ -n "${BUNDLES[$family]:-}" ] || { echo "unknown family $family (of: ${!BUNDLES[*]})" >&2; exit 2; }
  for pattern in ${BUNDLES[$family]}; do
    ls "$KIT"/$pattern >/dev/null 2>&1 || { echo "not in $KIT: $pattern" >&2; exit 1; }
    cp -n "$KIT"/$pattern .peers/
  done
done
# The carry limit counts the tree and every carried path: 64 MiB.
tree=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)
peers=$(du -sb .peers | cut -f1)
jit=$( [ -d .peers-jit ] && du -sb .peers-jit | cut -f1 || echo 0)
total=$(( tree + peers + jit ))
echo ".peers $(( peers >> 20 )) MiB + tree $(( tree >> 20 )) MiB + .peers-jit $(( jit >> 20 )) MiB = $(( total >> 20 )) MiB of 64"
[ "$total" -le $(( 64 << 20 )) ] || { echo "over the 64 MiB carry: name fewer families" >&2; exit 1; }
