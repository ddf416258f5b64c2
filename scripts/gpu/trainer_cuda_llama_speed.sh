#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call for the Llama step's speed (binaries carried in .trainer-cuda-carry, made
# by scripts/gpu/trainer_cuda_pack.sh):
#   1. the Llama-side tests of worker_train_cuda_test: RMSNorm/RoPE/SwiGLU kernels vs the CPU,
#      the fused norm/SwiGLU casts vs the unfused path, flash attention, the CUDA Llama vs the CPU
#   2. bench_trainer_cuda --profile at llama-3b fp8-blockwise: one step timed op by op
#   3. bench_trainer_cuda at llama-1b and llama-3b, bf16 and fp8-blockwise (B=4, T=2048), then
#      scripts/gpu/torch_llama_baseline.py (torch.compile BF16) at the same shapes, same call
#   device run: bash scripts/gpu/trainer_cuda_llama_speed.sh    (carry: .trainer-cuda-carry)
#   4. (HF_LLAMA=1) scripts/gpu/llama_hf_cuda.py: transformers' Llama and Qwen3 through fp8d's CUDA
#      backend and back
#   SHAPES=llama-3b picks the shapes, RECIPES=fp8-blockwise the recipes of step 3; SKIP_TORCH=1
#   skips the baseline; SKIP_TESTS=1 the tests; SKIP_PROFILE=1 step 2; CARRY=DIR (absolute)
#   takes the binaries and libraries from DIR. ACCUM=4 adds rows with gradient accumulation over
#   4 micro-batches of the same B×T (bench_trainer_cuda --accum, ours under fp8-blockwise, and
#   torch_llama_baseline.py --accum 1,4 on one compiled model), beside the one-micro-batch rows.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-llama-speed-out}
mkdir -p "$OUT"
C=${CARRY:-$PWD/.trainer-cuda-carry}
. scripts/gpu/carry_env.sh
S="$OUT/summary.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv; } > "$S" 2>&1
ldd $C/bin/bench_trainer_cuda | grep -i "not found" >> "$S"
link_test_corpus $C/bin/worker_train_cuda_test

if [ -z "${SKIP_TESTS:-}" ]; then
echo "== tests" >> "$S"
timeout ${TEST_TIMEOUT:-150} $C/bin/worker_train_cuda_test --gtest_color=no \
  --gtest_filter='*Llama*:*FusedBlockCast*:*RmsNorm*:*Rope*:*SwiGlu*:*FlashAttention*:*AdamWCast*' > "$OUT/test.log" 2>&1
echo "rc=$?" >> "$S"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|actual|worst gradient|tests ran" "$OUT/test.log" | head -80 >> "$S"
fi

if [ -z "${SKIP_PROFILE:-}" ]; then
echo "== profile (ours), llama-3b fp8-blockwise" >> "$S"
timeout ${PROFILE_TIMEOUT:-90} $C/bin/bench_trainer_cuda --shapes llama-3b --recipes fp8-blockwise --steps 4 --warmup 2 --profile \
  > "$OUT/profile.txt" 2> "$OUT/profile.log"
echo "rc=$?" >> "$S"
cat "$OUT/profile.txt" >> "$S"
grep -E "error|FAILED|:[0-9]+:" "$OUT/profile.log" | head -10 >> "$S"
fi

echo "== bench (ours), Llama" >> "$S"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader >> "$S" 2>&1
timeout ${BENCH_TIMEOUT:-150} $C/bin/bench_trainer_cuda --shapes ${SHAPES:-llama-1b,llama-3b} --recipes ${RECIPES:-bf16,fp8-blockwise} \
  --steps 8 --warmup 2 --json "$OUT/bench-llama.json" > "$OUT/bench-llama.txt" 2> "$OUT/bench-llama.log"
echo "rc=$?" >> "$S"
cat "$OUT/bench-llama.txt" >> "$S"
grep -E "error|FAILED|:[0-9]+:" "$OUT/bench-llama.log" | head -10 >> "$S"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader >> "$S" 2>&1
if [ -n "${ACCUM:-}" ]; then
echo "== bench (ours), gradient accumulation over $ACCUM micro-batches" >> "$S"
timeout ${BENCH_TIMEOUT:-150} $C/bin/bench_trainer_cuda --shapes ${SHAPES:-llama-1b,llama-3b} --recipes fp8-blockwise --accum "$ACCUM" \
  --steps 4 --warmup 1 --json "$OUT/bench-llama-accum.json" > "$OUT/bench-llama-accum.txt" 2> "$OUT/bench-llama-accum.log"
echo "rc=$?" >> "$S"
cat "$OUT/bench-llama-accum.txt" >> "$S"
grep -E "error|FAILED|:[0-9]+:" "$OUT/bench-llama-accum.log" | head -10 >> "$S"
fi

if [ -z "${SKIP_TORCH:-}" ]; then
echo "== torch Llama (same call)" >> "$S"
PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-240} python3 scripts/gpu/torch_llama_baseline.py --shapes ${SHAPES:-llama-1b,llama-3b} \
  --steps 8 --warmup 3 ${ACCUM:+--accum 1,$ACCUM} > "$OUT/torch-llama.txt" 2> "$OUT/torch-llama.log"
echo "rc=$?" >> "$S"
cat "$OUT/torch-llama.txt" >> "$S"
tail -3 "$OUT/torch-llama.log" >> "$S"
fi
if [ -n "${HF_LLAMA:-}" ]; then
echo "== transformers Llama/Qwen3 -> fp8d cuda -> transformers" >> "$S"
PYTHONUNBUFFERED=1 timeout 240 python3 scripts/gpu/llama_hf_cuda.py $C/bin/fp8-worker "$PWD/data/corpus.txt" \
  > "$OUT/llama-hf.txt" 2> "$OUT/llama-hf.log"
echo "rc=$?" >> "$S"
cat "$OUT/llama-hf.txt" >> "$S"
tail -3 "$OUT/llama-hf.log" >> "$S"
fi
date -u >> "$S"
cat "$S"
