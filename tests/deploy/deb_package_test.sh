#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The .deb for real: cpack -G DEB, lintian on it (output printed; an error fails), then on this
# machine dpkg -i, check that its files land where the unit expects them, that the unit
# verifies against the installed binary, that the fp8d user exists, that the binaries run and
# that fp8d starts with the shipped config; then an upgrade (the same package as version
# <version>.1) over an install the operator disabled leaves it disabled, and one over an enabled
# install leaves it enabled; dpkg -r and dpkg -P remove everything again. No systemd runs here
# (CI's container): `systemctl enable/disable` work on the unit files offline, and
# tests/deploy/maintainer_scripts_test.sh covers the scripts with a running systemd.
# Needs root (CI runs as root); exit 77 = skipped.
# Usage: deb_package_test.sh <build dir>
set -uo pipefail
build=$1
if [ "$(id -u)" -ne 0 ]; then echo "skipped: dpkg -i needs root"; exit 77; fi
if dpkg-query -W -f='${Status}' fp8d 2>/dev/null | grep -q "install ok installed"; then
  echo "FAIL: a package fp8d is already installed on this machine; not touching it"; exit 1
fi
tmp=$(mktemp -d)
user_existed=0
getent passwd fp8d >/dev/null && user_existed=1
fp8d_pid=""
cleanup() {
  [ -n "$fp8d_pid" ] && kill -KILL "$fp8d_pid" 2>/dev/null
  dpkg -P fp8d >/dev/null 2>&1
  if [ "$user_existed" = 0 ] && getent passwd fp8d >/dev/null; then
    userdel fp8d >/dev/null 2>&1; groupdel fp8d >/dev/null 2>&1
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
check() {  # <description> <command...>
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

(cd "$tmp" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/out" > "$tmp/cpack.log" 2>&1) \
  || { echo "FAIL cpack:"; cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/out/fp8d_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { echo "FAIL: cpack made no fp8d_*.deb"; cat "$tmp/cpack.log"; exit 1; }
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb -f "$deb" Depends
dpkg-deb -c "$deb" | awk '{print $6}' > "$tmp/contents"
for f in ./usr/bin/fp8d ./usr/bin/fp8-worker ./usr/bin/fp8ctl ./usr/lib/systemd/system/fp8d.service \
         ./usr/lib/sysusers.d/fp8d.conf ./etc/fp8d/fp8d.yaml ./etc/default/fp8d \
         ./usr/share/fp8d/systemd/remote.conf ./usr/share/fp8d/systemd/cluster.conf \
         ./usr/share/fp8d/systemd/unprivileged.conf \
         ./usr/share/doc/fp8d/changelog.Debian.gz ./usr/share/doc/fp8d/copyright; do
  check "package holds $f" grep -qx "$f" "$tmp/contents"
done
check "conffiles: /etc/fp8d/fp8d.yaml and /etc/default/fp8d" \
  bash -c "dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./conffiles | sort | tr '\n' ' ' | grep -qx '/etc/default/fp8d /etc/fp8d/fp8d.yaml '"
version=$(dpkg-deb -f "$deb" Version)
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/fp8d/changelog.Debian.gz > "$tmp/changelog.gz"
check "changelog.Debian.gz's newest entry is the package's version $version" \
  bash -c "gzip -dc '$tmp/changelog.gz' | head -1 | grep -q '^fp8d ($version) '"
check "changelog.Debian.gz has no name or time stamp (gzip -n)" \
  bash -c "[ \"\$(od -An -tu4 -j4 -N4 '$tmp/changelog.gz' | tr -d ' ')\" = 0 ]"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/fp8d/copyright > "$tmp/copyright"
check "copyright is machine-readable (DEP-5), Apache-2.0" \
  bash -c "head -1 '$tmp/copyright' | grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' &&
           grep -qx 'License: Apache-2.0' '$tmp/copyright'"

# lintian, when installed (scripts/install-deps.sh lists it for the tests): every line printed;
# an error (E:) fails, warnings do not.
if command -v lintian >/dev/null; then
  lintian --tag-display-limit 0 "$deb" > "$tmp/lintian.log" 2>&1
  echo "lintian $(lintian --version 2>/dev/null | head -1) on $(basename "$deb"):"
  sed 's/^/  /' "$tmp/lintian.log"
  check "lintian reports no error (E:)" bash -c "! grep -q '^E: ' '$tmp/lintian.log'"
else
  echo "lintian not installed: not run (scripts/install-deps.sh installs it)"
fi

# The same package as the next version, for the upgrades below.
dpkg-deb -R "$deb" "$tmp/next"
sed -i "s/^Version: .*/Version: $version.1/" "$tmp/next/DEBIAN/control"
dpkg-deb --root-owner-group -b "$tmp/next" "$tmp/next.deb" > /dev/null

if ! dpkg -i "$deb" > "$tmp/dpkg.log" 2>&1; then
  echo "FAIL dpkg -i:"; cat "$tmp/dpkg.log"; exit 1
fi
echo "ok   dpkg -i $(basename "$deb")"

unit=/usr/lib/systemd/system/fp8d.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
binary=${exec_start%% *}
config=$(sed -n 's/.*--config \([^ ]*\).*/\1/p' <<<"$exec_start")
env_file=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$unit")
check "ExecStart binary $binary is installed and executable" test -x "$binary"
check "--config $config is installed" test -f "$config"
check "EnvironmentFile $env_file is installed" test -f "$env_file"
check "postinst created the user fp8d (for unprivileged.conf)" bash -c "getent passwd fp8d > /dev/null"
check "systemd-analyze verify of the installed unit is clean" \
  bash -c "out=\$(systemd-analyze verify $unit 2>&1) && [ -z \"\$out\" ] || { echo \"\$out\"; false; }"

if /usr/bin/fp8d --version > "$tmp/version" 2>&1; then
  echo "ok   fp8d --version: $(head -1 "$tmp/version")"
else
  # --version comes with the CLI work (fp8d --help until it is merged).
  check "fp8d --help runs (no --version in this build: $(head -1 "$tmp/version"))" \
    bash -c "/usr/bin/fp8d --help > /dev/null"
fi
check "fp8ctl --help runs" bash -c "/usr/bin/fp8ctl --help > /dev/null"

# fp8d starts with the shipped config, reaches SERVING (its log says so), stops on SIGTERM.
mkdir -p "$tmp/data"
/usr/bin/fp8d --config "$config" --data-dir "$tmp/data" --listen 127.0.0.1:0 --gpus none \
  --addr-file "$tmp/addr" > "$tmp/fp8d.log" 2>&1 &
fp8d_pid=$!
for _ in $(seq 1 300); do grep -q "SERVING" "$tmp/fp8d.log" && break; kill -0 "$fp8d_pid" 2>/dev/null || break; sleep 0.1; done
check "installed fp8d starts with $config and reaches SERVING" grep -q "SERVING" "$tmp/fp8d.log"
kill -TERM "$fp8d_pid" 2>/dev/null; wait "$fp8d_pid"; rc=$?; fp8d_pid=""
check "installed fp8d exits 0 on SIGTERM (got $rc)" test "$rc" -eq 0
[ "$failures" -eq 0 ] || cat "$tmp/fp8d.log"

# Enablement across upgrades. A first install enables the unit (deb-systemd-helper; no systemd
# runs here, so nothing is started); the operator's `systemctl disable` then holds.
check "first install enabled fp8d.service" bash -c "[ \"\$(systemctl is-enabled fp8d.service 2>&1)\" = enabled ]"
systemctl disable fp8d.service > /dev/null 2>&1
check "systemctl disable fp8d.service (offline)" bash -c "[ \"\$(systemctl is-enabled fp8d.service 2>&1)\" = disabled ]"
if dpkg -i "$tmp/next.deb" > "$tmp/dpkg-up.log" 2>&1; then
  echo "ok   dpkg -i upgrade to $version.1"
  check "upgrade over a disabled install: still disabled" \
    bash -c "[ \"\$(systemctl is-enabled fp8d.service 2>&1)\" = disabled ]"
else
  echo "FAIL dpkg -i upgrade:"; cat "$tmp/dpkg-up.log"; failures=$((failures + 1))
fi
systemctl enable fp8d.service > /dev/null 2>&1
if dpkg -i "$deb" > "$tmp/dpkg-down.log" 2>&1; then
  check "downgrade over an enabled install: still enabled" \
    bash -c "[ \"\$(systemctl is-enabled fp8d.service 2>&1)\" = enabled ]"
else
  echo "FAIL dpkg -i back to $version:"; cat "$tmp/dpkg-down.log"; failures=$((failures + 1))
fi

dpkg -r fp8d > "$tmp/dpkg-r.log" 2>&1
check "dpkg -r fp8d" test $? -eq 0
check "dpkg -r removed /usr/bin/fp8d and the unit" bash -c "[ ! -e /usr/bin/fp8d ] && [ ! -e $unit ]"
dpkg -P fp8d > /dev/null 2>&1
check "dpkg -P removed the conffiles" bash -c "[ ! -e /etc/fp8d/fp8d.yaml ] && [ ! -e /etc/default/fp8d ]"
check "dpkg -P forgot the enablement (no multi-user.target.wants link)" \
  test ! -L /etc/systemd/system/multi-user.target.wants/fp8d.service

echo "deb package: $failures failures"
[ "$failures" -eq 0 ]
