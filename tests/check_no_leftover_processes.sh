#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest fixture cleanup (fp8d_processes): after every test that starts fp8d or workers, none of
# the fp8d / fp8-worker / fp8-test-worker processes of this build tree may still run. Any found
# are listed, killed (so one leak does not poison the next run) and fail this test.
# Usage: check_no_leftover_processes.sh BIN_DIR
set -uo pipefail
BIN_DIR=$(cd "$1" && pwd -P)
sleep 1  # a process group killed by the last test may take a moment to be reaped
found=()
for proc in /proc/[0-9]*; do
  exe=$(readlink "$proc/exe" 2>/dev/null) || continue
  exe=${exe% (deleted)}
  case "$exe" in
    "$BIN_DIR/fp8d" | "$BIN_DIR/fp8-worker" | "$BIN_DIR/fp8-test-worker") found+=("${proc#/proc/}") ;;
  esac
done
if [ ${#found[@]} -eq 0 ]; then
  echo "no fp8d, fp8-worker or fp8-test-worker of $BIN_DIR left running"
  exit 0
fi
echo "FAIL: ${#found[@]} process(es) started by the tests are still running:"
for pid in "${found[@]}"; do
  echo "  pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) env: $(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -E '^(FP8D_JOB|FP8_TEST_MODE)=' | tr '\n' ' ')"
done
for pid in "${found[@]}"; do kill -KILL "$pid" 2>/dev/null; done
exit 1
