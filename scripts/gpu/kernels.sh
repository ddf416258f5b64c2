#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call for the kernels part: build (standalone CMake project, only the kernel
# targets), check the SASS is sm_90a, run the CUDA tests, run bench_kernels_cuda and the
# same-run torch baselines. Logs go to $OUT; the short tables are printed last.
#   device run: bash scripts/gpu/kernels.sh      (carry: build-kernels-cuda/googletest)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-gpu-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
B=/tmp/fp8d-kernels-build
GTEST_SRC=$PWD/build-kernels-cuda/googletest
[ -d "$GTEST_SRC" ] || GTEST_SRC=/usr/src/googletest

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
} > "$OUT/env.txt" 2>&1

t0=$(date +%s)
if ! { cmake -S scripts/gpu/kernels_standalone -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DGTEST_SRC="$GTEST_SRC" && cmake --build $B -j"$(nproc)"; } > "$OUT/build.log" 2>&1; then
  echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"

# sm_90a SASS present, 16-byte global loads in the quantize kernels.
{
  cuobjdump --list-elf $B/bin/bench_kernels_cuda
  cuobjdump --dump-sass $B/bin/bench_kernels_cuda > "$OUT/sass.txt" 2>&1
  echo "LDG.E.128 in 1x128 quantize kernels: $(awk '/Function : .*Quantize1x128Kernel/{f=1} /Function : /&&!/Quantize1x128Kernel/{f=0} f' "$OUT/sass.txt" | grep -c 'LDG.E.*128')"
} >> "$OUT/env.txt" 2>&1

$B/bin/cublaslt_blockwise_probe > "$OUT/probe.txt" 2>&1
$B/bin/kernels_cuda_test --gtest_color=no > "$OUT/test.log" 2>&1
test_rc=$?
$B/bin/bench_kernels_cuda > "$OUT/bench.txt" 2>&1
bench_rc=$?
PYTHONUNBUFFERED=1 timeout 240 python3 scripts/gpu/torch_baseline.py > "$OUT/torch.txt" 2>&1

cat "$OUT/env.txt"
cat "$OUT/probe.txt"
echo "== tests (rc=$test_rc)"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|error|differ|calc" "$OUT/test.log" | head -40
echo "== torch (same run)"; cat "$OUT/torch.txt"
echo "== bench (rc=$bench_rc)"; cat "$OUT/bench.txt"
[ $test_rc -eq 0 ] && [ $bench_rc -eq 0 ]
