#!/usr/bin/env bash
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
