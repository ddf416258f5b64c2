#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/systemd/fp8d.service, alone and with each drop-in (remote.conf, unprivileged.conf):
#   - `systemd-analyze verify` prints nothing and exits 0 (a warning is a failure);
#   - `systemd-analyze security --offline=yes` rates the exposure at most 3.0.
# verify wants ExecStart's binary to exist, so it checks a temporary copy whose ExecStart names
# the fp8d just built. No running systemd is needed (CI's container has none).
# Usage: systemd_unit_test.sh <source dir> <fp8d binary>
set -euo pipefail
src=$1
fp8d=$2
max_exposure=3.0
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found (package systemd)"; exit 1; }
[ -x "$fp8d" ] || { echo "$fp8d: not built"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

check() {  # <label> <dir with fp8d.service>
  local label=$1 dir=$2 out
  out=$(cd "$dir" && systemd-analyze verify ./fp8d.service 2>&1) || out="${out}(verify exited non-zero)"
  if [ -n "$out" ]; then
    echo "FAIL $label: systemd-analyze verify is not clean:"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok   $label: systemd-analyze verify clean"
  fi
  out=$(cd "$dir" && systemd-analyze security --offline=yes --no-pager ./fp8d.service 2>&1 || true)
  local level
  level=$(sed -n 's/.*Overall exposure level for fp8d.service: \([0-9.]*\).*/\1/p' <<<"$out")
  if [ -z "$level" ]; then
    echo "FAIL $label: no exposure level in:"; echo "$out"; failures=$((failures + 1))
  elif awk -v l="$level" -v m="$max_exposure" 'BEGIN { exit !(l <= m) }'; then
    echo "ok   $label: exposure $level <= $max_exposure"
  else
    echo "FAIL $label: exposure $level > $max_exposure"; grep '✗' <<<"$out" || true; failures=$((failures + 1))
  fi
}

# The unit as shipped (paths of the .deb: /usr/bin/fp8d), pointed at the built binary.
mkdir -p "$tmp/plain" "$tmp/remote/fp8d.service.d"
sed "s|/usr/bin/fp8d |$fp8d |" "$src/deploy/systemd/fp8d.service" > "$tmp/plain/fp8d.service"
grep -q "^ExecStart=$fp8d " "$tmp/plain/fp8d.service" || { echo "FAIL: ExecStart=/usr/bin/fp8d not found in the unit"; exit 1; }
check "fp8d.service" "$tmp/plain"

# With the drop-in for a public address (LoadCredential= for the TLS key and tokens).
cp "$tmp/plain/fp8d.service" "$tmp/remote/fp8d.service"
sed "s|/usr/bin/fp8d |$fp8d |" "$src/deploy/systemd/remote.conf" > "$tmp/remote/fp8d.service.d/remote.conf"
check "fp8d.service + remote.conf" "$tmp/remote"

# With the drop-in for the Slurm launcher (the cluster network opened).
mkdir -p "$tmp/cluster/fp8d.service.d"
cp "$tmp/plain/fp8d.service" "$tmp/cluster/fp8d.service"
cp "$src/deploy/systemd/cluster.conf" "$tmp/cluster/fp8d.service.d/"
check "fp8d.service + cluster.conf" "$tmp/cluster"

# What the unit must say, beyond what verify and security look at.
has() {  # <description> <file> <extended regex, a whole line>
  if grep -Eqx "$3" "$2"; then echo "ok   $1"; else echo "FAIL $1 (no line matching $3 in $2)"; failures=$((failures + 1)); fi
}
unit=$src/deploy/systemd/fp8d.service
# SIGHUP is fp8d's reload (TLS files, tokens): `systemctl reload` must send it to fp8d alone.
has "ExecReload sends SIGHUP to the main pid" "$unit" 'ExecReload=/bin/kill -HUP \$MAINPID'
has "RuntimeDirectory=fp8d (the unix socket's /run/fp8d)" "$unit" 'RuntimeDirectory=fp8d'
has "RuntimeDirectoryMode=0755 (local users reach the socket)" "$unit" 'RuntimeDirectoryMode=0755'
has "KillMode=process (workers outlive a restart)" "$unit" 'KillMode=process'
# The unix socket the config suggests lies in the RuntimeDirectory.
sockets=$(grep -ho 'unix:[^ `)]*' "$src"/deploy/systemd/fp8d.yaml "$src"/deploy/systemd/*.conf | sort -u)
if [ -n "$sockets" ] && ! grep -qv '^unix:/run/fp8d/' <<<"$sockets"; then
  echo "ok   the unix sockets the config names lie under /run/fp8d: $(tr '\n' ' ' <<<"$sockets")"
else
  echo "FAIL a unix socket outside /run/fp8d (or none) in deploy/systemd: $sockets"; failures=$((failures + 1))
fi
# The shipped allowed root is the unit's writable output root (homes are read-only there).
roots=$(sed -n 's/^allowed_roots: *\[\(.*\)\]$/\1/p' "$src/deploy/systemd/fp8d.yaml")
rw=$(sed -n 's/^ReadWritePaths=-\{0,1\}//p' "$unit")
if [ -n "$roots" ] && [ "$roots" = "$rw" ]; then
  echo "ok   fp8d.yaml allowed_roots [$roots] = the unit's ReadWritePaths"
else
  echo "FAIL fp8d.yaml allowed_roots [$roots] differs from the unit's ReadWritePaths ($rw)"; failures=$((failures + 1))
fi
has "ProtectHome=read-only (so homes cannot be the default root)" "$unit" 'ProtectHome=read-only'
# The .deb installs every drop-in this directory has.
for conf in "$src"/deploy/systemd/*.conf; do
  if grep -q "$(basename "$conf")" "$src/deploy/packaging.cmake"; then
    echo "ok   packaging.cmake installs $(basename "$conf")"
  else
    echo "FAIL packaging.cmake does not install $(basename "$conf")"; failures=$((failures + 1))
  fi
done

# With the drop-in that runs fp8d as the user fp8d without capabilities.
mkdir -p "$tmp/unprivileged/fp8d.service.d"
cp "$tmp/plain/fp8d.service" "$tmp/unprivileged/fp8d.service"
cp "$src/deploy/systemd/unprivileged.conf" "$tmp/unprivileged/fp8d.service.d/"
check "fp8d.service + unprivileged.conf" "$tmp/unprivileged"

# The checks above can fail: a unit with a misspelled key must not pass verify.
mkdir -p "$tmp/broken"
sed 's/^NoNewPrivileges=/NoNewPrivilege=/' "$tmp/plain/fp8d.service" > "$tmp/broken/fp8d.service"
if [ -z "$(cd "$tmp/broken" && systemd-analyze verify ./fp8d.service 2>&1)" ]; then
  echo "FAIL: verify did not notice a misspelled key"; failures=$((failures + 1))
else
  echo "ok   a misspelled key is reported by verify"
fi

echo "systemd unit: $failures failures"
[ "$failures" -eq 0 ]
