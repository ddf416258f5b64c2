#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `fp8ctl watch` on a real terminal (issue 19 item 3): under tmux at 60 and 160 columns the
# progress line fits the width (never wraps), and while the daemon is away it says
# "reconnecting". Reads the screen with tmux capture-pane. Skips (exit 77) without tmux.
# Usage: watch_tmux_test.sh FP8D FP8CTL TEST_WORKER
set -euo pipefail
FP8D=$1 FP8CTL=$2 WORKER=$3
command -v tmux >/dev/null || { echo "tmux not installed: skipping"; exit 77; }

TMP=$(mktemp -d)
SOCK="fp8d-watch-test-$$"
DAEMON_PID=""
cleanup() {
  tmux -L "$SOCK" kill-server 2>/dev/null || true
  if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    [ -n "${JOB:-}" ] && "$FP8CTL" --server "$ADDR" cancel "$JOB" >/dev/null 2>&1 || true
    [ -n "${JOB:-}" ] && "$FP8CTL" --server "$ADDR" wait "$JOB" --for state=CANCELLED --timeout 30s >/dev/null 2>&1 || true
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

start_daemon() {  # $1: listen address
  rm -f "$TMP/addr"
  FP8_TEST_STEP_MS=200 "$FP8D" --data-dir "$TMP/data" --listen "$1" --addr-file "$TMP/addr" \
    --worker "$WORKER" --gpus none --cpu-slots 2 --cancel-grace-ms 1000 --allowed-root "$TMP" \
    --run-jobs-as-owner false --worker-env-allow "FP8_TEST_*" --loopback-role submitter \
    2>>"$TMP/fp8d.log" &
  DAEMON_PID=$!
  for _ in $(seq 1 300); do
    [ -s "$TMP/addr" ] && "$FP8CTL" --server "$(cat "$TMP/addr")" list >/dev/null 2>&1 && break
    sleep 0.1
  done
  ADDR=$(cat "$TMP/addr")
}

fail() { echo "FAIL: $*"; echo "---- screen"; cat "$TMP/screen" 2>/dev/null; echo "---- fp8d"; tail -20 "$TMP/fp8d.log"; exit 1; }

start_daemon 127.0.0.1:0
cat > "$TMP/job.yaml" <<YAML
display_name: tmux
train:
  model: {preset: tiny}
  data: {train: d}
  precision: {recipe: bf16}
  training: {max_steps: 100000}
  output_dir: $TMP/out
  backend: cpu
YAML
JOB=$("$FP8CTL" --server "$ADDR" submit -f "$TMP/job.yaml" -o name)
"$FP8CTL" --server "$ADDR" wait "$JOB" --for state=RUNNING --timeout 60s >/dev/null

# The line with the job on it, and the row after it (a wrapped line would continue there).
check_width() {  # $1: columns
  local cols=$1 row next
  for _ in $(seq 1 50); do
    tmux -L "$SOCK" capture-pane -p -t "w$cols" > "$TMP/screen"
    grep -q "step" "$TMP/screen" && break
    sleep 0.2
  done
  row=$(grep -n "$JOB" "$TMP/screen" | head -1 | cut -d: -f1)
  [ -n "$row" ] || fail "$cols columns: no line shows $JOB"
  local line; line=$(sed -n "${row}p" "$TMP/screen")
  next=$(sed -n "$((row + 1))p" "$TMP/screen")
  [ "${#line}" -lt "$cols" ] || fail "$cols columns: the line fills the width (${#line} chars)"
  [ -z "${next// /}" ] || fail "$cols columns: the line wrapped onto the next row: '$next'"
  echo "$cols columns: '$line'"
}

for cols in 60 160; do
  tmux -L "$SOCK" new-session -d -s "w$cols" -x "$cols" -y 8 \
    "env LANG=C.UTF-8 '$FP8CTL' --server '$ADDR' watch '$JOB'; sleep 30"
done
sleep 1
check_width 60
check_width 160
tmux -L "$SOCK" capture-pane -p -t w160 | grep -q "step .*/100000 loss" || fail "160 columns: no step/loss"
tmux -L "$SOCK" capture-pane -p -t w160 | grep -q "\[#*\.*\]" || fail "160 columns: no progress bar"

# The daemon goes away: the watch says so, and carries on when it is back.
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || true
for _ in $(seq 1 50); do
  tmux -L "$SOCK" capture-pane -p -t w160 > "$TMP/screen"
  grep -q "reconnecting" "$TMP/screen" && break
  sleep 0.2
done
grep -q "reconnecting" "$TMP/screen" || fail "no 'reconnecting' while fp8d is down"
echo "while fp8d is down: '$(grep reconnecting "$TMP/screen")'"
start_daemon "$ADDR"
for _ in $(seq 1 100); do
  tmux -L "$SOCK" capture-pane -p -t w160 > "$TMP/screen"
  grep -q "reconnecting" "$TMP/screen" || break
  sleep 0.2
done
grep -q "reconnecting" "$TMP/screen" && fail "still 'reconnecting' after fp8d came back"
check_width 160
echo PASS
