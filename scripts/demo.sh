#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Quick start: installs what building and running need (not the test tools: scripts/test.sh
# installs those), builds, starts fp8d on loopback, submits a real tiny FP8 (blockwise)
# training job on the shipped corpus, watches it to the end, shows it (`fp8ctl describe`, also
# when it failed), and stops the daemon (workers are never left behind: the job has finished by
# then).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/install-deps.sh --build-only
# Its own build dir by default: the suites stay off (GoogleTest is a test package), which must
# not switch them off in a developer's build/.
BUILD_DIR=${BUILD_DIR:-build-demo}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFP8D_BUILD_TESTS=OFF -DFP8D_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target fp8d fp8ctl fp8-worker

FP8D="$BUILD_DIR/bin/fp8d"
FP8CTL="$BUILD_DIR/bin/fp8ctl"
WORKER="$BUILD_DIR/bin/fp8-worker"
RUN_DIR="$ROOT/demo-run"
ADDR=${FP8D_ADDR:-127.0.0.1:50151}
export FP8D_ADDR=$ADDR
# Each run starts clean: a fresh daemon data dir, fresh shards, no checkpoints of an earlier run.
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"

# Byte-level token shards from the corpus shipped in data/ (vocab 256).
"$WORKER" prepare-data --text data/corpus.txt --out "$RUN_DIR/data"

# The job's paths live under demo-run/ (outside the default allowed roots, the data dir and
# the owner's home), and the demo's worker runs as whoever runs the demo, root included. The
# demo's fp8ctl submits over loopback TCP without a token: a submitter only when fp8d says so.
"$FP8D" --listen "$ADDR" --data-dir "$RUN_DIR/fp8d-data" --worker "$WORKER" \
  --allowed-root "$RUN_DIR" --run-jobs-as-owner=false --loopback-role submitter \
  >"$RUN_DIR/fp8d.log" 2>&1 &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null || true; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  "$FP8CTL" list >/dev/null 2>&1 && break
  kill -0 $DAEMON 2>/dev/null || { cat "$RUN_DIR/fp8d.log"; exit 1; }
  sleep 0.1
done

JOB=$("$FP8CTL" submit -f examples/demo.yaml -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["name"])')
echo "submitted $JOB"
# set -e would end the script at a failed job, before the describe a newcomer needs then.
status=0
"$FP8CTL" watch "$JOB" || status=$?
"$FP8CTL" describe "$JOB" || true
[ "$status" -eq 0 ] || echo "demo: $JOB did not succeed (fp8ctl watch exited $status); fp8d's log: $RUN_DIR/fp8d.log" >&2
exit $status
