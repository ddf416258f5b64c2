#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` with GNUInstallDirs into a staging DESTDIR, with a prefix other than /usr:
# the binaries, unit, sysusers file and example config land under the prefix, and the unit's
# ExecStart, --config and EnvironmentFile name those installed paths (rewritten for the prefix).
# Usage: cmake_install_test.sh <build dir>
set -uo pipefail
build=$1
prefix=/opt/fp8d
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
DESTDIR="$tmp/root" cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1 \
  || { echo "FAIL cmake --install:"; cat "$tmp/install.log"; exit 1; }
root=$tmp/root
for f in bin/fp8d bin/fp8-worker bin/fp8ctl lib/systemd/system/fp8d.service lib/sysusers.d/fp8d.conf \
         etc/fp8d/fp8d.yaml etc/default/fp8d share/fp8d/systemd/remote.conf share/doc/fp8d/README.md; do
  check "$prefix/$f installed" test -e "$root$prefix/$f"
done
unit=$root$prefix/lib/systemd/system/fp8d.service
check "ExecStart=$prefix/bin/fp8d --config $prefix/etc/fp8d/fp8d.yaml" \
  grep -qx "ExecStart=$prefix/bin/fp8d --config $prefix/etc/fp8d/fp8d.yaml \$FP8D_OPTS" "$unit"
check "EnvironmentFile=-$prefix/etc/default/fp8d" grep -qx "EnvironmentFile=-$prefix/etc/default/fp8d" "$unit"
check "no /usr/bin or /etc path left in the settings of the unit and remote.conf" \
  bash -c "! grep -hv '^#' '$unit' '$root$prefix/share/fp8d/systemd/remote.conf' | grep -E '(=-?| |:)/(usr/bin|etc)/'"
check "install_manifest.txt lists the unit" grep -q "$prefix/lib/systemd/system/fp8d.service" "$build/install_manifest.txt"
echo "cmake install: $failures failures"
[ "$failures" -eq 0 ]
