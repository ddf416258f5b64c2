#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Profiles what fp8d spends on CreateJob: runs one build's control_plane_bench and records
# fp8d with perf from the end of the failure-detection phase to the end of the create phase,
# then prints the functions with the most samples (self and with children).
#   bench/control_plane/profile_create.sh BUILD_DIR OUT_DIR [-- bench flags]
# OUT_DIR gets perf.data, bench.out and top.txt. Needs perf (Debian: linux-perf).
set -euo pipefail
BUILD=$1 OUT=$2
shift 2
[[ "${1:-}" == "--" ]] && shift
mkdir -p "$OUT"
"$BUILD/bin/control_plane_bench" "$@" > "$OUT/bench.out" 2>&1 &
bench=$!
# The create phase follows the failure-detection line (and the one blocker job it starts).
until grep -q '^failure_detection' "$OUT/bench.out"; do
  kill -0 "$bench" 2>/dev/null || { cat "$OUT/bench.out"; exit 1; }
  sleep 0.05
done
daemon=$(pgrep -P "$bench" -x fp8d | head -1)
[[ -n "$daemon" ]] || { echo "profile_create: no fp8d child of the bench" >&2; kill "$bench"; exit 1; }
perf record -q -F 2000 --call-graph dwarf -o "$OUT/perf.data" -p "$daemon" 2> "$OUT/perf.err" &
perf_pid=$!
until grep -q '^create_jobs_per_s' "$OUT/bench.out"; do
  kill -0 "$bench" 2>/dev/null || break
  sleep 0.05
done
kill -INT "$perf_pid"
wait "$perf_pid" || true
wait "$bench"
grep -m1 '^create_jobs_per_s' "$OUT/bench.out"
set +o pipefail  # `head` closes the reports early
report() { perf report -i "$OUT/perf.data" --stdio -n -g none "$@" 2>/dev/null | grep -v '^#' | grep -v '^$' | cut -c1-170; }
{
  echo "# samples per thread"
  report --no-children --sort pid
  total=$(report --no-children --sort pid | awk '{n += $2} END {print n}')
  echo "# total: $total"
  echo "## self, top 25"
  report --no-children -F overhead,sample,sym | head -25
  echo "## fp8d's own functions with what they call (children %, ~samples), top 45"
  report --children --sort sym | grep -E 'fp8|sqlite3_step|lstat|Serialize' |
    awk -v total="$total" '{pct = $1; sub("%", "", pct); $2 = ""; $3 = ""; printf "%7.2f%% %6d %s\n", pct, pct * total / 100, $0}' |
    cut -c1-170 | head -45
} > "$OUT/top.txt"
cat "$OUT/top.txt"
