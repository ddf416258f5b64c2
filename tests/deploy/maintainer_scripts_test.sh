#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/debian's postinst, prerm and postrm, run as dpkg runs them, against shims of systemctl,
# deb-systemd-helper, deb-systemd-invoke and systemd-sysusers (the only commands on PATH) that
# keep the unit's state (enabled, active) in files and log every call. Each case runs in its own
# mount namespace where /run is a fresh tmpfs, with or without /run/systemd/system (systemd
# running or not), so nothing on this machine is touched. What it shows:
#   - first install: enabled and started;
#   - upgrade over a unit the operator disabled (and stopped): still disabled, not started;
#   - upgrade over an enabled, running unit: still enabled, restarted (try-restart);
#   - no systemd running (container, chroot): enabled through deb-systemd-helper, nothing started;
#   - remove stops the unit and keeps its enablement; purge forgets it.
# Needs root for unshare --mount (CI runs as root); exit 77 = skipped.
# Usage: maintainer_scripts_test.sh <source dir>
set -uo pipefail
src=${1:?usage: maintainer_scripts_test.sh <source dir>}
if [ "$(id -u)" -ne 0 ]; then echo "skipped: unshare --mount needs root"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # <description> <command...>
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

# The shims: state in $FP8D_SHIM_STATE/{enabled,active,masked}, calls appended to .../calls.
mkdir -p "$tmp/bin"
cat > "$tmp/bin/systemctl" <<'EOF'
#!/bin/sh
s=$FP8D_SHIM_STATE
echo "systemctl $*" >> "$s/calls"
[ "$1" = "--system" ] && shift
case "$1" in
  daemon-reload) ;;
  enable) /usr/bin/touch "$s/enabled" ;;
  disable) /bin/rm -f "$s/enabled" ;;
  start) /usr/bin/touch "$s/active" ;;
  stop) /bin/rm -f "$s/active" ;;
  try-restart) [ -e "$s/active" ] && echo restarted >> "$s/restarts" ;;
  is-enabled) [ -e "$s/enabled" ] ;;
  *) echo "systemctl shim: unexpected $*" >&2; exit 1 ;;
esac
EOF
cat > "$tmp/bin/deb-systemd-helper" <<'EOF'
#!/bin/sh
s=$FP8D_SHIM_STATE
echo "deb-systemd-helper $*" >> "$s/calls"
case "$1" in
  enable) /usr/bin/touch "$s/enabled" "$s/tracked" ;;
  update-state) [ -e "$s/enabled" ] && /usr/bin/touch "$s/tracked"; true ;;
  purge) /bin/rm -f "$s/enabled" "$s/tracked" ;;
  unmask) /bin/rm -f "$s/masked" ;;
  *) echo "deb-systemd-helper shim: unexpected $*" >&2; exit 1 ;;
esac
EOF
cat > "$tmp/bin/deb-systemd-invoke" <<'EOF'
#!/bin/sh
echo "deb-systemd-invoke $*" >> "$FP8D_SHIM_STATE/calls"
exec systemctl "$@"
EOF
cat > "$tmp/bin/systemd-sysusers" <<'EOF'
#!/bin/sh
echo "systemd-sysusers $*" >> "$FP8D_SHIM_STATE/calls"
EOF
chmod +x "$tmp/bin"/*

# run <case> <systemd: yes|no> <initial state words> <script> <args...>: one maintainer script
# call in a fresh mount namespace; the case's state directory persists across calls.
run() {
  local name=$1 systemd=$2 initial=$3 script=$4; shift 4
  local state="$tmp/$name"
  if [ ! -d "$state" ]; then
    mkdir -p "$state"; : > "$state/calls"
    for w in $initial; do touch "$state/$w"; done
  fi
  unshare --mount -- /bin/sh -c '
    mount -t tmpfs fp8d-test /run || exit 90
    [ "$1" = yes ] && mkdir -p /run/systemd/system
    shift
    exec "$@"' _ "$systemd" /usr/bin/env -i PATH="$tmp/bin" FP8D_SHIM_STATE="$state" \
      /bin/sh "$src/deploy/debian/$script" "$@"
  local rc=$?
  check "$name: $script $* exits 0 (got $rc)" test "$rc" -eq 0
}
calls() { cat "$tmp/$1/calls"; }
is() { [ -e "$tmp/$1/$2" ]; }
not() { ! "$@"; }
called() { grep -qE "$2" "$tmp/$1/calls"; }

run fresh yes "" postinst configure
check "fresh: enabled" is fresh enabled
check "fresh: started" is fresh active
check "fresh: enabled through deb-systemd-helper" called fresh '^deb-systemd-helper enable fp8d.service$'

run upgrade-disabled yes "" postinst configure 0.0.9
check "upgrade over a disabled unit: still disabled" not is upgrade-disabled enabled
check "upgrade over a disabled unit: not started" not is upgrade-disabled active
check "upgrade over a disabled unit: no enable of any kind" not called upgrade-disabled 'enable'
check "upgrade over a disabled unit: no start" not called upgrade-disabled ' start '

run upgrade-enabled yes "enabled active" postinst configure 0.0.9
check "upgrade over an enabled unit: still enabled" is upgrade-enabled enabled
check "upgrade over a running unit: restarted" is upgrade-enabled restarts
check "upgrade over a running unit: by try-restart" called upgrade-enabled 'try-restart fp8d.service'

run upgrade-stopped yes "enabled" postinst configure 0.0.9
check "upgrade over an enabled, stopped unit: not started" not is upgrade-stopped active
check "upgrade over an enabled, stopped unit: not restarted" not is upgrade-stopped restarts

run container no "" postinst configure
check "no systemd running: enabled (deb-systemd-helper)" is container enabled
check "no systemd running: nothing started" not is container active
check "no systemd running: systemctl never called" not called container '^systemctl'

run container-upgrade no "" postinst configure 0.0.9
check "no systemd running, upgrade over a disabled unit: still disabled" not is container-upgrade enabled

run lifecycle yes "" postinst configure
run lifecycle yes "" prerm remove
check "remove: stopped" not is lifecycle active
check "remove: enablement kept (a reinstall keeps the operator's choice)" is lifecycle enabled
run lifecycle yes "" postrm remove
check "postrm remove: enablement kept" is lifecycle enabled
run lifecycle yes "" postrm purge
check "purge: enablement forgotten" not is lifecycle enabled

run upgrade-prerm yes "enabled active" prerm upgrade 0.1.0
check "prerm upgrade: left running (postinst restarts it)" is upgrade-prerm active

# The cases can fail: the old postinst (`systemctl enable --now` on every configure) is caught.
sed 's/^  if \[ -z "\$2" \]; then$/  if true; then/' "$src/deploy/debian/postinst" > "$tmp/postinst.always-enable"
grep -q '^  if true; then$' "$tmp/postinst.always-enable" || { echo "FAIL: could not make the broken postinst"; exit 1; }
mkdir -p "$tmp/broken"; : > "$tmp/broken/calls"
unshare --mount -- /bin/sh -c 'mount -t tmpfs fp8d-test /run && mkdir -p /run/systemd/system && exec "$@"' _ \
  /usr/bin/env -i PATH="$tmp/bin" FP8D_SHIM_STATE="$tmp/broken" /bin/sh "$tmp/postinst.always-enable" configure 0.0.9
check "a postinst that enables on upgrade is caught (the check above would fail)" is broken enabled

if [ "$failures" -ne 0 ]; then
  for d in "$tmp"/*/calls; do echo "--- $(basename "$(dirname "$d")")"; cat "$d"; done
fi
echo "maintainer scripts: $failures failures"
[ "$failures" -eq 0 ]
