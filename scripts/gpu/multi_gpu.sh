#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on a machine with 2+ GPUs (kind nvidia-h200-x2; carry .multi-gpu-carry, made by
# scripts/gpu/multi_gpu_pack.sh):
#   1. worker_train_cuda_test, which on 2 GPUs includes CudaDataParallel (2 `fp8-worker train`
#      processes over NCCL against 1 process with the same global batch), and calibrate_cuda_test
#   2. data-parallel throughput: `fp8-worker train` on 1 GPU and on 2 GPUs (same per-GPU batch)
#   3. the whole system: fp8d with its launcher finding the GPUs (nvidia-smi), a 2-rank CUDA job
#      submitted with fp8ctl, watched to the end, described (ranks placed on GPUs 0 and 1)
#   4. (LOSS_STEPS=N) scripts/gpu/trainer_cuda_loss.sh with its runs spread over the GPUs
#   device run: bash scripts/gpu/multi_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-multi-gpu-out}
mkdir -p "$OUT"
C=$PWD/.multi-gpu-carry
. scripts/gpu/carry_env.sh
S=$OUT/summary.txt
{ nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv; nvidia-smi topo -m; } > "$S" 2>&1
ldd $C/bin/* | grep -i "not found" >> "$S"
link_test_corpus $C/bin/worker_train_cuda_test

if [ "${SKIP_TESTS:-0}" != 1 ]; then
echo "== worker_train_cuda_test" >> "$S"
timeout ${TEST_TIMEOUT:-240} $C/bin/worker_train_cuda_test --gtest_color=no > "$OUT/test.log" 2>&1
echo "rc=$?" >> "$S"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|step [0-9]|tests ran" "$OUT/test.log" | head -40 >> "$S"
grep -E "^\[       OK \] CudaDataParallel" "$OUT/test.log" >> "$S"
echo "== calibrate_cuda_test" >> "$S"
timeout 120 $C/bin/calibrate_cuda_test --gtest_color=no > "$OUT/calibrate_test.log" 2>&1
echo "rc=$?" >> "$S"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests ran" "$OUT/calibrate_test.log" | head -20 >> "$S"
fi

D=/tmp/fp8d-mg-data
$C/bin/fp8-worker prepare-data --text data/corpus.txt --out $D > /dev/null
# Data-parallel throughput: GPT-2 124M (vocab 50257), per-GPU batch 16, T 1024; 1 rank, then 2.
dp_run() {  # $1 recipe, $2 world size
  local dir=/tmp/fp8d-dp-$1-$2; rm -rf $dir; mkdir -p $dir
  cat > $dir/spec.json <<JSON
{"model": {"preset": "gpt2-124m"}, "data": {"train": "$D/train_*.bin", "val": "$D/val_*.bin"},
 "precision": {"recipe": "$1"},
 "training": {"max_steps": ${DP_STEPS:-60}, "per_device_train_batch_size": 16, "learning_rate": 6e-4, "warmup_steps": 5,
              "logging_steps": 10, "eval_steps": 100000, "save_steps": 100000},
 "output_dir": "$dir/out", "backend": "cuda"}
JSON
  for r in $(seq 0 $(($2 - 1))); do
    FP8D_RANK=$r FP8D_WORLD_SIZE=$2 FP8D_RENDEZVOUS_DIR=$dir/rdzv FP8D_COLLECTIVE_TIMEOUT_S=30 timeout 60 $C/bin/fp8-worker train --spec $dir/spec.json \
      > $dir/rank$r.events 2> $dir/rank$r.log &
  done
  wait
  python3 - "$1" "$2" $dir/rank0.events <<'PY'
import json, sys
# worker_event.proto as JSON ({"time": t, "<type>": {...}}), flattened to {"type": ..., **fields}
ev = [{"type": k, **v} for l in open(sys.argv[3]) if l.strip() for k, v in json.loads(l).items() if k != "time"]
prog = [e for e in ev if e.get("type") == "progress"]
done = [e for e in ev if e.get("type") == "done"]
late = prog[len(prog) // 2:]  # past start-up
tps = sum(e.get("tokens_per_sec", 0) for e in late) / max(1, len(late))
print("%-15s ranks %s: steps %s, loss %s -> %s, %.0f tokens/s (mean of the last %d progress events), done=%s"
      % (sys.argv[1], sys.argv[2], prog[-1]["step"] if prog else "-", round(prog[0]["loss"], 4) if prog else "-",
         round(prog[-1]["loss"], 4) if prog else "-", tps, len(late), bool(done)))
PY
  grep -iE "error|nccl" $dir/rank0.log | head -3
}
echo "== data-parallel throughput (fp8-worker train, GPT-2 124M, 16 x 1024 tokens per GPU per step)" >> "$S"
for rec in ${DP_RECIPES:-bf16 fp8-blockwise}; do
  dp_run $rec 1 >> "$S" 2>&1
  dp_run $rec 2 >> "$S" 2>&1
done
cat /tmp/fp8d-dp-*/rank0.log > "$OUT/dp.log" 2>/dev/null

echo "== fp8d: a 2-rank CUDA job through the daemon" >> "$S"
R=/tmp/fp8d-mg-run; rm -rf $R; mkdir -p $R
export FP8D_ADDR=127.0.0.1:50161
$C/bin/fp8d --listen $FP8D_ADDR --data-dir $R/fp8d-data --worker $C/bin/fp8-worker --gpus auto \
  --allowed-root / --run-jobs-as-owner=false --loopback-role submitter > $R/fp8d.log 2>&1 &
DAEMON=$!
for _ in $(seq 1 100); do $C/bin/fp8ctl list > /dev/null 2>&1 && break; sleep 0.1; done
cat > $R/job.yaml <<YAML
display_name: two-gpu
train:
  model: {preset: gpt2-124m}
  data: {train: "$D/train_*.bin", val: "$D/val_*.bin"}
  precision: {recipe: fp8-blockwise}
  training: {max_steps: ${JOB_STEPS:-300}, per_device_train_batch_size: 16, learning_rate: 6e-4, warmup_steps: 20, save_steps: 100, logging_steps: 20, eval_steps: 150}
  output_dir: $R/out
  backend: cuda
resources: {ranks: 2}
YAML
JOB=$($C/bin/fp8ctl submit -f $R/job.yaml -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["name"])')
echo "submitted $JOB" >> "$S"
timeout ${JOB_TIMEOUT:-180} $C/bin/fp8ctl watch "$JOB" >> "$S" 2>&1
echo "watch rc=$?" >> "$S"
$C/bin/fp8ctl describe "$JOB" >> "$S" 2>&1
$C/bin/fp8ctl describe "$JOB" -o json > "$OUT/job.json" 2>&1
kill -TERM $DAEMON; wait $DAEMON
cp $R/fp8d.log "$OUT/fp8d.log"
ls -R $R/out | head -20 >> "$S"

if [ "${LOSS_STEPS:-0}" -gt 0 ]; then
  echo "== loss at equal steps" >> "$S"
  CARRY=$C OUT=$OUT bash scripts/gpu/trainer_cuda_loss.sh >> "$S" 2>&1
fi
cat "$S"
