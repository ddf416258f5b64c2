#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fused causal attention on the GPU machine, in one call: the CUDA trainer tests,
# bench_attention_cuda (the mma.sync and wgmma kernels side by side, the backward's kernels alone)
# beside PyTorch SDPA, and the training step with its breakdown.
#   here:   scripts/gpu/attention.sh pack [BUILD_DIR]   binaries (default build-attn: targets
#           worker_train_cuda_test bench_attention_cuda bench_trainer_cuda) + libraries → .attn-carry
#   device: bash scripts/gpu/attention.sh               (carry .attn-carry; logs under $OUT)
#   BENCH=0 skips torch and bench_attention_cuda. STEP_RECIPES=bf16,fp8-blockwise: the training-step runs' recipes (default bf16).
#   TEST_FILTER='*Flash*' runs only those tests (REST_TESTS=SECONDS: then the others, under that timeout); STEP=0 skips the training-step benches (and a
#   pack made without bench_trainer_cuda needs it: BINS="worker_train_cuda_test bench_attention_cuda").
#   The wgmma kernels' SASS facts (registers, local memory, HGMMA count) go to the summary where
#   the machine has cuobjdump.
set -uo pipefail
cd "$(dirname "$0")/../.."
C=.attn-carry
if [ "${1:-}" = pack ]; then
  set -e
  . scripts/gpu/pack_common.sh
  pack_start $C
  pack_binaries $C/bin "${2:-build-attn}/bin" ${BINS:-worker_train_cuda_test bench_attention_cuda bench_trainer_cuda}
  pack_libs $C $C/bin/*
  exit 0
fi
OUT=${OUT:-/tmp/fp8d-attention-out}
mkdir -p "$OUT"
C=$PWD/$C
. scripts/gpu/carry_env.sh
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv > "$S" 2>&1
ldd $C/bin/bench_attention_cuda | grep -i "not found" >> "$S"
link_test_corpus $C/bin/worker_train_cuda_test
if command -v cuobjdump > /dev/null; then
  echo "== SASS of the wgmma kernels (cuobjdump)" >> "$S"
  cuobjdump -res-usage $C/bin/bench_attention_cuda 2>&1 | grep -A1 -E "Flash(Forward|BackwardDq|BackwardDkDv)Wgmma" | grep -o "REG:[0-9]* STACK:[0-9]*.*LOCAL:[0-9]*" | sort | uniq -c >> "$S"
  cuobjdump -sass $C/bin/bench_attention_cuda 2>/dev/null | awk '/Function : .*Wgmma/{f=$3} /Function : /&&!/Wgmma/{f=""} f&&/HGMMA/{h[f]++} f&&/(LDL|STL)/{l[f]++} END{for(k in h) print k, "HGMMA", h[k], "LDL/STL", l[k]+0}' | sed 's/_ZN3fp8.*GLOBAL__N__[0-9a-f_]*//' >> "$S"
fi

echo "== tests" >> "$S"
timeout ${TEST_TIMEOUT:-100} $C/bin/worker_train_cuda_test --gtest_color=no --gtest_filter="${TEST_FILTER:-*}" > "$OUT/test.log" 2>&1
echo "rc=$?" >> "$S"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|actual|tests ran" "$OUT/test.log" | head -40 >> "$S"
grep -E "^\[       OK \] .*FlashAttention" "$OUT/test.log" >> "$S"
if [ -n "${REST_TESTS:-}" ]; then  # the other tests of the binary, after the filtered ones
  echo "== tests -${TEST_FILTER:-*}" >> "$S"
  timeout $REST_TESTS $C/bin/worker_train_cuda_test --gtest_color=no --gtest_filter="-${TEST_FILTER:-*}" > "$OUT/test_rest.log" 2>&1
  echo "rc=$?" >> "$S"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests ran" "$OUT/test_rest.log" | head -20 >> "$S"
fi
if [ "${BENCH:-1}" != 0 ]; then  # BENCH=0: no torch SDPA and no bench_attention_cuda
echo "== torch SDPA" >> "$S"
timeout ${TORCH_TIMEOUT:-60} python3 scripts/gpu/attention_torch.py --reps 20 --warmup 3 > "$OUT/torch_attention.txt" 2> /tmp/attention_torch.log
echo "rc=$?" >> "$S"
cat "$OUT/torch_attention.txt" >> "$S"; tail -3 /tmp/attention_torch.log >> "$S"
echo "== bench_attention_cuda --reps 20 --warmup 3 --torch torch_attention.txt" >> "$S"
timeout 60 $C/bin/bench_attention_cuda --reps 20 --warmup 3 --torch "$OUT/torch_attention.txt" > "$OUT/bench_attention.txt" 2>&1
echo "rc=$?" >> "$S"
cat "$OUT/bench_attention.txt" >> "$S"
fi
[ "${STEP:-1}" = 0 ] && exit 0
echo "== bench_trainer_cuda --shapes gpt2-124m,d4096-l8 --recipes ${STEP_RECIPES:-bf16} --steps 6 --warmup 1 --breakdown" >> "$S"
timeout ${STEP_TIMEOUT:-80} stdbuf -oL $C/bin/bench_trainer_cuda --shapes gpt2-124m,d4096-l8 --recipes ${STEP_RECIPES:-bf16} --steps 6 --warmup 1 --breakdown \
  > "$OUT/bench_trainer.txt" 2>&1
echo "rc=$?" >> "$S"
cat "$OUT/bench_trainer.txt" >> "$S"
