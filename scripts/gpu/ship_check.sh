#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call that checks the shipped CUDA kernels and trainer: the CUDA tests
# (kernels_cuda_test, worker_train_cuda_test), then the kernel bench (casts against a copy,
# own blockwise GEMM against cuBLASLt), the trainer bench beside PyTorch torch.compile bf16 and
# the attention bench beside PyTorch SDPA, all in the same run, so the ratios compare with
# docs/performance.md's current numbers.
#   here:   scripts/gpu/ship_check.sh pack [BUILD_DIR] [CARRY]
#           BUILD_DIR (default build-cuda, -DFP8D_CUDA=ON) holds kernels_cuda_test,
#           bench_kernels_cuda, worker_train_cuda_test, bench_trainer_cuda and
#           bench_attention_cuda; they, the libraries
#           they need and this script go to CARRY (default .ship-carry, git-ignored), which must
#           sit in the checkout the device tool sends.
#   device: bash .ship-carry/ship_check.sh        (carry .ship-carry; logs under $OUT)
# Each step has a timeout and the sum stays inside the tool's 10 minutes; the summary is
# printed last.
set -uo pipefail
if [ "${1:-}" = pack ]; then
  set -e
  cd "$(dirname "$0")/../.."
  B=${2:-build-cuda}
  C=${3:-.ship-carry}
  . scripts/gpu/pack_common.sh
  rm -rf "$C" && mkdir -p "$C/bin" "$C/lib"
  pack_binaries "$C/bin" "$B/bin" kernels_cuda_test bench_kernels_cuda worker_train_cuda_test bench_trainer_cuda \
    bench_attention_cuda
  pack_libs "$C" "$C"/bin/*
  cp scripts/gpu/ship_check.sh scripts/gpu/torch_gpt_baseline.py scripts/gpu/attention_torch.py "$C/"
  exit 0
fi

C=$(cd "$(dirname "$0")" && pwd)
cd "$C/.."
OUT=${OUT:-/tmp/fp8d-ship-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0  # NVLink multicast off (KINDS.md)
S=$OUT/summary.txt
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
  ldd "$C"/bin/* | grep -i "not found"
} > "$S" 2>&1
# The test binary reads the corpus at the build machine's path; link the shipped one there.
corpus=$(strings "$C/bin/worker_train_cuda_test" | grep -m1 '/data/corpus.txt$')
if [ -n "$corpus" ] && [ ! -e "$corpus" ]; then mkdir -p "$(dirname "$corpus")" && ln -sf "$PWD/data/corpus.txt" "$corpus"; fi

step() {  # name, timeout, command...: runs it, logs to $OUT/name.log, records rc and the time
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  timeout -s KILL "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s" >> "$S"
  return $rc
}

step kernels_cuda_test 60 "$C/bin/kernels_cuda_test" --gtest_color=no
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure" "$OUT/kernels_cuda_test.log" | head -20 >> "$S"
step worker_train_cuda_test 200 "$C/bin/worker_train_cuda_test" --gtest_color=no
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|Expected|Which is" "$OUT/worker_train_cuda_test.log" | head -30 >> "$S"

step bench_kernels_cuda 100 "$C/bin/bench_kernels_cuda"
sed -n '/^### /,$p' "$OUT/bench_kernels_cuda.log" >> "$S"

step bench_trainer_cuda 110 "$C/bin/bench_trainer_cuda" --shapes gpt2-124m,d4096-l8 --recipes bf16,fp8-blockwise --steps 8 --warmup 2
cat "$OUT/bench_trainer_cuda.log" >> "$S"
PYTHONUNBUFFERED=1 step torch_gpt_baseline 120 python3 "$C/torch_gpt_baseline.py" --shapes gpt2-124m,d4096-l8 --steps 8 --warmup 3
grep -v "^W\|Warning" "$OUT/torch_gpt_baseline.log" | tail -4 >> "$S"

PYTHONUNBUFFERED=1 step torch_attention 60 python3 "$C/attention_torch.py" --reps 20 --warmup 3
grep -E "^hd" "$OUT/torch_attention.log" > "$OUT/torch_attention.txt"
step bench_attention_cuda 60 "$C/bin/bench_attention_cuda" --reps 20 --warmup 3 --torch "$OUT/torch_attention.txt"
cat "$OUT/bench_attention_cuda.log" >> "$S"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$S" 2>&1
cat "$S"
