#!/usr/bin/env bash
# Same-run A/B of the CUDA trainer's switches (carry .trainer-cuda-carry, packed by
# trainer_cuda_pack.sh): worker_train_cuda_test (TEST_FILTER), then bench_trainer_cuda once per
# environment in AB_ENVS (';'-separated; an empty entry is the default build), in that order and
# then the first again, so drift over the call shows.
#   AB_ENVS="FP8_CUDA_UNFUSED_OPTIMIZER=1;FP8_CUDA_ZERO_ALL_GRADS=1" bash scripts/gpu/trainer_cuda_ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-trainer-ab}
mkdir -p "$OUT"
C=$PWD/.trainer-cuda-carry
. scripts/gpu/carry_env.sh
link_test_corpus $C/bin/worker_train_cuda_test
{
  echo "== tests (${TEST_FILTER:-*})"
  timeout ${TEST_TIMEOUT:-150} $C/bin/worker_train_cuda_test --gtest_color=no --gtest_filter="${TEST_FILTER:-*}" > "$OUT/test.log" 2>&1
  echo "rc=$?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|tests ran" "$OUT/test.log" | head -40
  IFS=";" read -ra envs <<< ";${AB_ENVS:-};;"
  for e in "${envs[@]}"; do
    echo "== bench with '${e}'"
    env $e timeout ${BENCH_TIMEOUT:-90} $C/bin/bench_trainer_cuda --shapes ${AB_SHAPES:-gpt2-124m,d4096-l8} --recipes ${AB_RECIPES:-bf16,fp8-blockwise} \
      --steps 8 --warmup 2 ${BREAKDOWN:+--breakdown} 2>> "$OUT/bench.log" | grep -vE "^device|^shape"
    echo "rc=$?"
    unset BREAKDOWN
  done
} 2>&1 | tee "$OUT/summary.txt"
