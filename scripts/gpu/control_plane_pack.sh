#!/usr/bin/env bash
# Packs the control-plane benchmark (fp8d, fp8-test-worker, control_plane_bench, built here)
# and the non-system shared libraries they need (gRPC, protobuf, SQLite, spdlog, ...) into
# .cp-carry/{bin,lib} (ignored by git), for scripts/gpu/control_plane_2core.sh on the GPU
# host, which has none of those libraries. BEFORE_DIR, if set, names a directory with the same
# three binaries from an earlier commit: they go to .cp-carry/before/ for a before/after run.
#   scripts/gpu/control_plane_pack.sh [BUILD_DIR]     (default build-cp)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cp}
C=.cp-carry
BINS="fp8d fp8-test-worker control_plane_bench"
grep -qx "/$C/" .git/info/exclude 2>/dev/null || echo "/$C/" >> .git/info/exclude
rm -rf $C && mkdir -p $C/bin $C/lib
for b in $BINS; do strip -o $C/bin/$b $B/bin/$b; done
if [[ -n "${BEFORE_DIR:-}" ]]; then
  mkdir -p $C/before
  for b in $BINS; do strip -o $C/before/$b "$BEFORE_DIR/$b"; done
fi
# Everything ldd resolves outside glibc and libstdc++/libgcc (the host has its own).
ldd $C/bin/* ${BEFORE_DIR:+$C/before/*} | awk '/=> \//{print $3}' | sort -u | \
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | \
  while read -r lib; do cp -L "$lib" $C/lib/; done
du -sh $C
ls $C/lib | tr '\n' ' '; echo
