#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs two builds' control_plane_bench alternately on one machine (A B A B ...) and prints the
# median of each number per build, so a change of the create path is measured against a
# baseline in the same run. Each build's bench starts that build's own fp8d.
#   bench/control_plane/alternate.sh BASELINE_BUILD_DIR NEW_BUILD_DIR [ROUNDS] [-- bench flags]
set -euo pipefail
BASE=$1 NEW=$2
shift 2
ROUNDS=3
if [[ $# -gt 0 && "$1" != "--" ]]; then ROUNDS=$1; shift; fi
[[ "${1:-}" == "--" ]] && shift
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, $ROUNDS rounds each, flags: $*"
for ((r = 1; r <= ROUNDS; r++)); do
  for side in base new; do
    dir=$BASE; [[ $side == new ]] && dir=$NEW
    "$dir/bin/control_plane_bench" "$@" > "$OUT/$side.$r" 2>&1 || { cat "$OUT/$side.$r"; exit 1; }
    echo "round $r $side: $(grep -m1 -i 'create' "$OUT/$side.$r" | tr -s ' ')"
  done
done
# Lines "name ...: value": the median of each value per side.
python3 - "$OUT" "$ROUNDS" <<'PY'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def numbers(path):
    got = {}
    for line in open(path):
        m = re.match(r"^([^:]+):\s*([-0-9.]+)", line.strip())
        if m: got[m.group(1)] = float(m.group(2))
    return got
sides = {s: [numbers(f"{out}/{s}.{r}") for r in range(1, rounds + 1)] for s in ("base", "new")}
for key in sides["base"][0]:
    b = statistics.median(x[key] for x in sides["base"] if key in x)
    n = [x[key] for x in sides["new"] if key in x]
    if not n: continue
    n = statistics.median(n)
    ratio = f"{n / b:.2f}x" if b else "-"
    print(f"{key}: baseline {b:g}  new {n:g}  new/baseline {ratio}")
PY
