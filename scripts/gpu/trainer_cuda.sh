#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call for the CUDA trainer (binaries built here with -DFP8D_CUDA=ON and carried
# in .trainer-cuda-carry/{bin,lib}; see scripts/gpu/trainer_cuda_pack.sh):
#   1. worker_train_cuda_test: kernels and every layer's forward/backward vs the CPU trainer
#   2. `fp8-worker train` (backend cuda) on GPT-2 124M shapes, byte tokens of data/corpus.txt
#   3. bench_trainer_cuda: bf16 / fp8-tensorwise / fp8-blockwise at GPT-2 124M (B=32, T=1024)
#      and d=4096 L=8 (1.8B params, B=4, T=2048), then the PyTorch torch.compile BF16 baseline
#      on the same shapes in the same run.
#   The Llama family's rows, its profile and the transformers round trip: scripts/gpu/trainer_cuda_llama_speed.sh.
#   device run: bash scripts/gpu/trainer_cuda.sh    (carry: .trainer-cuda-carry)
#   1b. (LOSS_STEPS=N, only when the attention and model tests passed; right after the tests, since
#      it is the longest part) scripts/gpu/trainer_cuda_loss.sh: FP8 vs BF16 held-out loss at equal steps
#   BREAKDOWN=1 adds bench_trainer_cuda --breakdown (each op of a bf16 step timed alone).
#   SKIP_TORCH=1 skips the baseline; TRAIN_RECIPES="" skips step 2; TRAIN_RECIPES="bf16 fp8-tensorwise" runs those.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-trainer-out}
mkdir -p "$OUT"
C=$PWD/.trainer-cuda-carry
. scripts/gpu/carry_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv > "$OUT/summary.txt" 2>&1
ldd $C/bin/bench_trainer_cuda | grep -i "not found" >> "$OUT/summary.txt"
link_test_corpus $C/bin/worker_train_cuda_test

echo "== tests" >> "$OUT/summary.txt"
timeout ${TEST_TIMEOUT:-120} $C/bin/worker_train_cuda_test --gtest_color=no > "$OUT/test.log" 2>&1
TEST_RC=$?
echo "rc=$TEST_RC" >> "$OUT/summary.txt"
grep -E "^\[  (FAILED|PASSED|SKIPPED|     OK) |Failure|Expected|Which is|actual|rel|tests ran" "$OUT/test.log" | head -60 >> "$OUT/summary.txt"

# The loss run needs the attention and the model to be right (not every test: a missing cuBLASLt
# epilogue only costs speed).
MODEL_OK=1
grep -qE "FAILED  \] .*(FlashAttention|CudaModelVsCpu|CudaTraining)" "$OUT/test.log" && MODEL_OK=0
[ "$TEST_RC" -eq 124 ] && MODEL_OK=0
if [ "${LOSS_STEPS:-0}" -gt 0 ] && [ "$MODEL_OK" -eq 1 ]; then
echo "== loss at equal steps" | tee -a "$OUT/summary.txt"
OUT=$OUT bash scripts/gpu/trainer_cuda_loss.sh >> "$OUT/summary.txt" 2>&1
fi

# Byte-token shards of the corpus (llm.c format: 256 int32 header, uint16 tokens).
D=/tmp/fp8d-data; mkdir -p $D
python3 scripts/gpu/byte_shards.py "$PWD/data/corpus.txt" $D

echo "== fp8-worker train, gpt2-124m preset (vocab 50257), byte tokens, fp8-blockwise" | tee -a "$OUT/summary.txt"
for r in ${TRAIN_RECIPES-fp8-blockwise}; do
cat > /tmp/spec-$r.json <<JSON
{"model": {"preset": "gpt2-124m"}, "data": {"train": "$D/train_*.bin", "val": "$D/val_*.bin"},
 "precision": {"recipe": "$r"},
 "training": {"max_steps": 40, "per_device_train_batch_size": 16, "learning_rate": 6e-4, "warmup_steps": 5,
              "logging_steps": 5, "eval_steps": 40, "save_steps": 40, "weight_decay": 0.1},
 "output_dir": "/tmp/fp8d-run-$r", "backend": "cuda"}
JSON
timeout 60 $C/bin/fp8-worker train --spec /tmp/spec-$r.json > "$OUT/train-$r.events" 2> "$OUT/train-$r.log"
echo "$r rc=$?" >> "$OUT/summary.txt"
grep -E "step|eval|done|error|checkpoint" "$OUT/train-$r.log" | head -20 >> "$OUT/summary.txt"
done

echo "== bench (ours)" | tee -a "$OUT/summary.txt"
timeout ${BENCH_TIMEOUT:-150} $C/bin/bench_trainer_cuda --shapes gpt2-124m,d4096-l8 --recipes ${BENCH_RECIPES:-bf16,fp8-tensorwise,fp8-blockwise} --steps 8 --warmup 2 \
  ${BREAKDOWN:+--breakdown} \
  > "$OUT/bench.txt" 2> "$OUT/bench.log"
echo "rc=$?" >> "$OUT/summary.txt"
cat "$OUT/bench.txt" >> "$OUT/summary.txt"
grep -E "error|FAILED|:[0-9]+:" "$OUT/bench.log" | head -10 >> "$OUT/summary.txt"

if [ -z "${SKIP_TORCH:-}" ]; then
echo "== torch (same run)" | tee -a "$OUT/summary.txt"
PYTHONUNBUFFERED=1 timeout 130 python3 scripts/gpu/torch_gpt_baseline.py --shapes gpt2-124m,d4096-l8 --steps 8 --warmup 3 \
  > "$OUT/torch.txt" 2> "$OUT/torch.log"
echo "rc=$?" >> "$OUT/summary.txt"
cat "$OUT/torch.txt" >> "$OUT/summary.txt"
tail -5 "$OUT/torch.log" >> "$OUT/summary.txt"
fi

cat "$OUT/summary.txt"
