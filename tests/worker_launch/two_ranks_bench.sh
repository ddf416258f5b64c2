#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CPU tokens/s of fp8-worker: one rank against two ranks started with torchrun's variables
# (RANK, WORLD_SIZE, ..., MASTER_ADDR/PORT), each rank training the same per-rank batch. Prints
# each run's tokens/s (the done event's tokens / seconds) and the ratios. Run it on a quiet
# machine: it prints the load average first.
#
#   tests/worker_launch/two_ranks_bench.sh [build/bin/fp8-worker] [steps]
set -euo pipefail
worker=${1:-build/bin/fp8-worker}
steps=${2:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/fp8-two-ranks-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$worker" prepare-data --text "$root/data/corpus.txt" --out "$dir/data" > /dev/null 2>&1
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"

spec() {  # spec OUT_DIR: the small model of bench_trainer (L4 C256 T128), bf16, batch 8 a rank
  cat > "$1.json" <<JSON
{"model": {"preset": "tiny", "n_layer": 4, "n_head": 8, "d_model": 256, "seq_len": 128, "vocab_size": 256},
 "backend": "cpu", "data": {"train": "$dir/data/train_*.bin"}, "precision": {"recipe": "bf16"},
 "training": {"max_steps": $steps, "per_device_train_batch_size": 8, "logging_steps": $steps,
              "eval_steps": 100000, "save_steps": 100000},
 "output_dir": "$1"}
JSON
}

tokens_per_s() {  # the done event's tokens / seconds
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if "done" in e: r = e["done"]["result"]; print("%.0f" % (float(r["tokens"]) / float(r["seconds"])))' "$1"
}

one() {  # one NAME [ENV...]: a single rank
  local name=$1; shift
  spec "$dir/$name"
  env "$@" "$worker" train --spec "$dir/$name.json" > "$dir/$name.events" 2> "$dir/$name.log"
  tokens_per_s "$dir/$name.events"
}

two() {  # two NAME [ENV...]: two ranks through torchrun's variables
  local name=$1; shift
  spec "$dir/$name"
  local port=$((20000 + RANDOM % 20000)) pids=()
  for r in 0 1; do
    env "$@" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TMPDIR="$dir" "$worker" train --spec "$dir/$name.json" > "$dir/$name.$r.events" 2> "$dir/$name.$r.log" &
    pids+=($!)
  done
  wait "${pids[0]}" "${pids[1]}"
  tokens_per_s "$dir/$name.0.events"
}

a=$(one one-rank)
b=$(two two-ranks)
c=$(two two-ranks-every-core FP8_NUM_THREADS="$(nproc)")
d=$(one one-rank-one-core FP8_NUM_THREADS=1)
echo "1 rank, $(nproc) threads (all cores):        $a tokens/s"
echo "1 rank, 1 thread:                       $d tokens/s"
echo "2 ranks, their share (FP8_NUM_THREADS unset): $b tokens/s"
echo "2 ranks, $(nproc) threads each (oversubscribed):  $c tokens/s"
python3 -c "import sys; a,b,c,d = map(float, sys.argv[1:]); print('2 ranks / 1 rank: %.2fx; 2 ranks / 1 rank at 1 thread: %.2fx; oversubscribed 2 ranks / 1 rank: %.2fx' % (b/a, b/d, c/a))" "$a" "$b" "$c" "$d"
