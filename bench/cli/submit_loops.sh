#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Submission throughput from scripts (issue 19 item 5): LOOPS shell loops in parallel, each
# submitting PER_LOOP jobs one `fp8ctl submit` at a time, against a fresh fp8d; the same loops
# with `sbatch` against a one-node Slurm when SLURM_CLUSTER (the path of
# scripts/slurm-cluster.sh) is given; and the CPU time of one `fp8ctl submit` (user + sys,
# from 100 sequential calls) for each fp8ctl binary given in FP8CTL_BASELINE and FP8CTL.
# The loops run in ROUNDS rounds (default 3); each round runs every submitter once, in an order
# that rotates, so load from other processes on a shared machine falls on all of them alike.
# The summary gives each submitter's median rate and the median (and range) of the per-round
# ratio fp8ctl / sbatch.
#
# Usage: submit_loops.sh FP8D FP8CTL TEST_WORKER [LOOPS] [PER_LOOP]
#   env: FP8CTL_BASELINE=/path/to/old/fp8ctl  SLURM_CLUSTER=/path/to/slurm-cluster.sh  ROUNDS=3
set -euo pipefail
FP8D=$1 FP8CTL=$2 WORKER=$3 LOOPS=${4:-16} PER_LOOP=${5:-50} ROUNDS=${ROUNDS:-3}
TMP=$(mktemp -d)
DAEMON_PID=""
SLURM_DIR=""
cleanup() {
  if [ -n "$DAEMON_PID" ]; then kill -TERM "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null || true; fi
  # The one running test worker outlives fp8d by design; end it by its process group.
  for pid in $(pgrep -f "$TMP/data/jobs/" || true); do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
  if [ -n "$SLURM_DIR" ]; then bash "$SLURM_CLUSTER" stop "$SLURM_DIR" >/dev/null 2>&1 || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# One CPU slot and slow steps: one job runs (and sleeps), the rest queue, so the daemon's
# workers take no CPU from the loops being measured.
FP8_TEST_STEP_MS=10000 "$FP8D" --data-dir "$TMP/data" --listen 127.0.0.1:0 --addr-file "$TMP/addr" \
  --worker "$WORKER" --gpus none --cpu-slots 1 --log-level warn --allowed-root "$TMP" \
  --run-jobs-as-owner false --worker-env-allow "FP8_TEST_*" --loopback-role submitter 2>"$TMP/fp8d.log" &
DAEMON_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/addr" ] && break; sleep 0.1; done
ADDR=$(cat "$TMP/addr")
until "$FP8CTL" --server "$ADDR" list >/dev/null 2>&1; do sleep 0.1; done
cat > "$TMP/job.yaml" <<YAML
display_name: bench
train:
  model: {preset: tiny}
  data: {train: d}
  precision: {recipe: bf16}
  training: {max_steps: 100000}
  output_dir: out
  backend: cpu
YAML
# Every job needs its own output_dir (an active job's is refused): one file per submitter,
# round, loop and job.
for who in f b; do
  [ "$who" = b ] && [ -z "${FP8CTL_BASELINE:-}" ] && continue
  for r in $(seq 1 "$ROUNDS"); do
    for l in $(seq 1 "$LOOPS"); do
      for i in $(seq 1 "$PER_LOOP"); do
        sed "s|output_dir: out|output_dir: $TMP/out/$who$r-$l-$i|" "$TMP/job.yaml" > "$TMP/job$who-$r-$l-$i.yaml"
      done
    done
  done
done
for i in $(seq 1 100); do sed "s|output_dir: out|output_dir: $TMP/out/cpu-$i|" "$TMP/job.yaml" > "$TMP/cpu-$i.yaml"; done

ROUND=0
rate() {  # $1: label; the rest: a command run as `CMD LOOP JOB` by each loop. Prints jobs/s.
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  for l in $(seq 1 "$LOOPS"); do
    ( for i in $(seq 1 "$PER_LOOP"); do "$@" "$l" "$i" >/dev/null || echo "submit failed" >&2; done ) &
  done
  wait $(jobs -p | grep -v "^$DAEMON_PID$") 2>/dev/null || true
  end=$(date +%s.%N)
  python3 -c "n=$LOOPS*$PER_LOOP; s=$end-$start; print(f'round $ROUND $label: {n} jobs in {s:.2f} s = {n/s:.0f} jobs/s')" >&2
  python3 -c "print($LOOPS*$PER_LOOP/($end-$start))"
}
fp8ctl_submit() { "$FP8CTL" --server "$ADDR" submit -f "$TMP/jobf-$ROUND-$1-$2.yaml" --parsable; }
baseline_submit() { "$FP8CTL_BASELINE" --server "$ADDR" submit -f "$TMP/jobb-$ROUND-$1-$2.yaml"; }
sbatch_submit() { sbatch --parsable --wrap true -o /dev/null -J "bench-$1-$2"; }
cpu_per_call() {  # $1: fp8ctl binary
  local bin=$1
  python3 - "$bin" "$ADDR" "$TMP" <<'PY'
import resource, subprocess, sys
bin, addr, tmp = sys.argv[1:]
before = resource.getrusage(resource.RUSAGE_CHILDREN)
for i in range(1, 101):
    subprocess.run([bin, "--server", addr, "submit", "-f", f"{tmp}/cpu-{i}.yaml"], check=True, stdout=subprocess.DEVNULL)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"{bin}: {cpu / 100 * 1000:.2f} ms CPU per submit (user+sys, 100 calls)")
PY
}

echo "== $LOOPS parallel loops x $PER_LOOP submits, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${FP8CTL_BASELINE:-}" ]; then
  cpu_per_call "$FP8CTL_BASELINE"
  # The baseline's cpu run used cpu-*.yaml: those jobs are now active, so make new files.
  for i in $(seq 1 100); do sed "s|output_dir: out|output_dir: $TMP/out/cpu2-$i|" "$TMP/job.yaml" > "$TMP/cpu-$i.yaml"; done
fi
cpu_per_call "$FP8CTL"
proc_cpu_ms() { awk '{ print ($14 + $15) * 1000 / 100 }' "/proc/$1/stat"; }  # utime+stime at 100 Hz

CTLD_PID=""
if [ -n "${SLURM_CLUSTER:-}" ]; then
  SLURM_DIR="$TMP/slurm"
  bash "$SLURM_CLUSTER" start "$SLURM_DIR" 1 >"$TMP/slurm.log" 2>&1 || { cat "$TMP/slurm.log"; exit 1; }
  eval "$(bash "$SLURM_CLUSTER" env "$SLURM_DIR")"
  python3 - <<'PY'
import resource, subprocess
before = resource.getrusage(resource.RUSAGE_CHILDREN)
for i in range(100):
    subprocess.run(["sbatch", "--parsable", "--wrap", "true", "-o", "/dev/null"], check=True, stdout=subprocess.DEVNULL)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"sbatch: {cpu / 100 * 1000:.2f} ms CPU per submit (user+sys, 100 calls)")
PY
  CTLD_PID=$(cat "$SLURM_DIR/slurmctld.pid" 2>/dev/null || true)
fi

submitters=(fp8ctl)
[ -n "${SLURM_CLUSTER:-}" ] && submitters+=(sbatch)
[ -n "${FP8CTL_BASELINE:-}" ] && submitters+=(baseline)
declare -A rates
fp8d_ms=0 ctld_ms=0
for ROUND in $(seq 1 "$ROUNDS"); do
  n=${#submitters[@]}
  for k in $(seq 0 $((n - 1))); do
    who=${submitters[$(((ROUND - 1 + k) % n))]}
    case $who in
      fp8ctl)
        d0=$(proc_cpu_ms "$DAEMON_PID")
        rates[$who]+="$(rate "fp8ctl submit" fp8ctl_submit) "
        d1=$(proc_cpu_ms "$DAEMON_PID")
        fp8d_ms=$(python3 -c "print($fp8d_ms + $d1 - $d0)")
        ;;
      baseline) rates[$who]+="$(rate "fp8ctl submit (baseline binary)" baseline_submit) " ;;
      sbatch)
        [ -n "$CTLD_PID" ] && c0=$(proc_cpu_ms "$CTLD_PID")
        rates[$who]+="$(rate "sbatch" sbatch_submit) "
        [ -n "$CTLD_PID" ] && ctld_ms=$(python3 -c "print($ctld_ms + $(proc_cpu_ms "$CTLD_PID") - $c0)")
        ;;
    esac
  done
done
python3 - "$LOOPS" "$PER_LOOP" "$ROUNDS" "$fp8d_ms" "$ctld_ms" "${rates[fp8ctl]}" "${rates[sbatch]:-}" "${rates[baseline]:-}" <<'PY'
import statistics, sys
loops, per_loop, rounds = map(int, sys.argv[1:4])
fp8d_ms, ctld_ms = map(float, sys.argv[4:6])
def parse(text): return [float(x) for x in text.split()]
fp8ctl, sbatch, baseline = (parse(t) for t in sys.argv[6:9])
jobs = loops * per_loop * rounds
print(f"== summary over {rounds} rounds (median [min..max])")
for name, r in (("fp8ctl submit", fp8ctl), ("fp8ctl submit (baseline binary)", baseline), ("sbatch", sbatch)):
    if r: print(f"{name}: {statistics.median(r):.0f} jobs/s [{min(r):.0f}..{max(r):.0f}]")
print(f"fp8d: {fp8d_ms / jobs:.2f} ms CPU per create (during the fp8ctl loops)")
if sbatch:
    ratios = [f / s for f, s in zip(fp8ctl, sbatch)]
    print(f"slurmctld: {ctld_ms / jobs:.2f} ms CPU per job")
    print(f"fp8ctl / sbatch: {statistics.median(ratios):.2f}x [{min(ratios):.2f}..{max(ratios):.2f}] (per round; target >= 1.0)")
if baseline:
    ratios = [f / b for f, b in zip(fp8ctl, baseline)]
    print(f"fp8ctl / baseline binary: {statistics.median(ratios):.2f}x [{min(ratios):.2f}..{max(ratios):.2f}]")
PY
