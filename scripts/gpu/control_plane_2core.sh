#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The control-plane benchmark on the GPU host's otherwise idle CPU, with fp8d, its workers and
# the benchmark's clients all pinned to two cores (taskset -c 0,1; children inherit it): the
# issue's 2-core setting without the development machine's parallel builds. Binaries and
# libraries come from scripts/gpu/control_plane_pack.sh (carry .cp-carry). Logs go to $OUT.
#   bash scripts/gpu/control_plane_2core.sh [control_plane_bench flags, replacing the defaults]
# With .cp-carry/before/ present, the same command then runs with those binaries too.
set -uo pipefail
cd "$(dirname "$0")/../.."
C=$PWD/.cp-carry
OUT=${OUT:-/tmp/cp-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ARGS=(--jobs 100000 --watchers 1000 --get-seconds 5 --watch-seconds 10 --failure-trials 5)
[[ $# -gt 0 ]] && ARGS=("$@")  # flags given: they replace the issue's command
{
  date -u +%FT%TZ; nproc; uptime
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz' || true
  ldd "$C/bin/fp8d" | grep -i 'not found' || echo "ldd: every library found"
} 2>&1 | tee "$OUT/host.log"

run_bench() {  # name, dir of fp8d + fp8-test-worker, dir of control_plane_bench
  local name=$1 dir=$2 bench=$3
  echo "== $name: taskset -c 0,1 control_plane_bench ${ARGS[*]}" | tee "$OUT/$name.log"
  echo "load before: $(cat /proc/loadavg)" | tee -a "$OUT/$name.log"
  FP8D_ITEST_FP8D=$dir/fp8d FP8D_ITEST_TEST_WORKER=$dir/fp8-test-worker TMPDIR=${TMPDIR:-/tmp} \
    timeout 280 taskset -c 0,1 "$bench/control_plane_bench" "${ARGS[@]}" 2>&1 | tee -a "$OUT/$name.log"
  echo "exit ${PIPESTATUS[0]}; load after: $(cat /proc/loadavg)" | tee -a "$OUT/$name.log"
}

run_bench after "$C/bin" "$C/bin"
if [[ -d "$C/before" ]]; then
  # The earlier daemon driven by this benchmark (the earlier benchmark binary has the build
  # tree's paths compiled in): the daemon's before/after under one client.
  run_bench before_daemon "$C/before" "$C/bin"
fi
