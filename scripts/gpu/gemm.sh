#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call for the own blockwise FP8 GEMM (issue #3, kernels/cuda/
# sm90_fp8_gemm_blockwise.*): SASS check of the kernel (QGMMA present, no local memory), the
# CUDA kernel tests, then the GEMM tables of bench_kernels_cuda (cuBLASLt blockwise, own kernel and
# each tile kAuto chooses from, BF16, same run), and ncu counters (with the warp-stall breakdown) of one
# launch per GEMM variant on NCU_SHAPE="M N K" (bench_kernels_cuda gemm-profile). Runs the binaries built on the development machine when
# they start there (saves the build's device time), else builds the standalone CMake project.
# Every step has a timeout (a pipeline bug shows up as a hang). Logs go to $OUT.
#   cmake --build build-kernels-cuda -j2 --target kernels_cuda_test bench_kernels_cuda
#   device run: bash scripts/gpu/gemm.sh   (carry: build-kernels-cuda/bin, build-kernels-cuda/googletest)
#   (SKIP_NCU=1: no counters; NCU_SHAPE="128 7168 16384": counters at another shape)
#   The device calls of this session are limited to 120 s of command time: the steps' timeouts
#   fit in it (tests 40 s, bench 60 s, ncu what is left of BUDGET_S, default 115).
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
BUDGET_S=${BUDGET_S:-115}
OUT=${OUT:-/tmp/fp8d-gpu-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
BIN=$PWD/build-kernels-cuda/bin

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  nvcc --version | tail -2
} > "$OUT/env.txt" 2>&1

if ! timeout 60 "$BIN/kernels_cuda_test" --gtest_list_tests > /dev/null 2>> "$OUT/env.txt"; then
  echo "carried binaries do not start here; building the standalone project" >> "$OUT/env.txt"
  B=/tmp/fp8d-kernels-build
  GTEST_SRC=$PWD/build-kernels-cuda/googletest
  [ -d "$GTEST_SRC" ] || GTEST_SRC=/usr/src/googletest
  t0=$(date +%s)
  if ! { timeout 400 cmake -S scripts/gpu/kernels_standalone -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DGTEST_SRC="$GTEST_SRC" &&
         timeout 400 cmake --build $B -j"$(nproc)" --target kernels_cuda_test bench_kernels_cuda; } > "$OUT/build.log" 2>&1; then
    echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1
  fi
  echo "build: $(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"
  BIN=$B/bin
fi

# The GEMM kernels' SASS: QGMMA (FP8 wgmma) count, local-memory traffic, resources.
{
  cuobjdump --dump-sass "$BIN/bench_kernels_cuda" > "$OUT/sass_full.txt" 2>&1
  awk '/Function : /{f=($0 ~ /BlockwiseGemmKernel/)} f' "$OUT/sass_full.txt" > "$OUT/sass_gemm.txt"
  echo "GEMM kernels: $(grep -c 'Function :' "$OUT/sass_gemm.txt"), QGMMA: $(grep -c QGMMA "$OUT/sass_gemm.txt"), LDL/STL: $(grep -cE 'LDL|STL' "$OUT/sass_gemm.txt")"
  cuobjdump --dump-resource-usage "$BIN/bench_kernels_cuda" 2>&1 | grep -A1 BlockwiseGemmKernel | grep -o 'REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*'
  # Global loads (LDG) per kernel, named by its Config<BLOCK_N, stages, split-K, scales TMA,
  # one staging box, L2 hints>: the scales-TMA kernels should have 2 (the split-K ones none).
  awk 'function name(f) { sub(/.*ConfigI/, "", f); sub(/EEEE.*/, "", f); gsub(/E?L[ib]/, ",", f); return "Config<" substr(f, 2) ">" }
       /Function : /{if (f != "") print name(f), "LDG:", n; f = $3; n = 0} /LDG\.E/{n++}
       END{if (f != "") print name(f), "LDG:", n}' "$OUT/sass_gemm.txt"
  rm -f "$OUT/sass_full.txt"
} >> "$OUT/env.txt" 2>&1

# All CUDA kernel tests (the blockwise GEMM's and the rest of kernels/cuda's).
# Tight limits: the whole command must end inside the call's limit.
timeout -s KILL 40 "$BIN/kernels_cuda_test" --gtest_color=no > "$OUT/test.log" 2>&1
test_rc=$?
if [ $test_rc -ne 0 ] && [ $test_rc -ne 137 ]; then  # a wrong kernel (not a hang): where does it go wrong?
  timeout -s KILL 60 compute-sanitizer --tool memcheck "$BIN/kernels_cuda_test" --gtest_color=no \
    --gtest_filter='Sm90GemmBlockwiseTest.MatchesCpuReferenceOnSmallShapes' > "$OUT/sanitizer.log" 2>&1
fi
timeout -s KILL 60 "$BIN/bench_kernels_cuda" gemm > "$OUT/bench.txt" 2>&1
bench_rc=$?
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> "$OUT/env.txt" 2>&1

# Counters of one launch per GEMM on NCU_SHAPE (default M = 4096, (N, K) = (4096, 7168)):
# cuBLASLt, own kAuto and the 128x128 / 128x64 tiles (bench_kernels_cuda gemm-profile), with the
# warp-stall breakdown (where the consumer warps' cycles go). ncu flushes the caches before each
# launch. Clocks left alone (--clock-control none). Runs in what is left of BUDGET_S.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "${SKIP_NCU:-}" ] && NCU=""  # SKIP_NCU=1: no counters (a short call)
NCU_LEFT=$(( BUDGET_S - ($(date +%s) - START) ))
if [ -n "$NCU" ] && [ "$NCU_LEFT" -gt 15 ]; then
  timeout -s KILL "$NCU_LEFT" "$NCU" --clock-control none -k 'regex:Gemm|gemm|nvjet|xmma|cutlass' \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --metrics dram__bytes_read.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    "$BIN/bench_kernels_cuda" gemm-profile ${NCU_SHAPE:-4096 4096 7168} > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$? (limit ${NCU_LEFT} s)" >> "$OUT/env.txt"
fi

cat "$OUT/env.txt"
echo "== tests (rc=$test_rc)"
grep -E "^\[  (FAILED|PASSED|SKIPPED|  OK) |tests ran|Failure|error|differ|calc|Which is|Expected|vs " "$OUT/test.log" | head -60
[ -f "$OUT/sanitizer.log" ] && { echo "== sanitizer"; grep -E "ERROR|Invalid|at 0x|by thread|SUMMARY" "$OUT/sanitizer.log" | head -20; }
[ -f "$OUT/ncu.txt" ] && { echo "== ncu"; grep -E "^  [A-Za-z_].*\(|Duration|DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput|dram__bytes_read|Warp Cycles Per Issued|==ERR|==WARN" "$OUT/ncu.txt" | cut -c1-150 | head -40;
  echo "== warp stalls per issued instruction (> 0.3)"; awk '/^  [A-Za-z_].*\(/{k=substr($0,1,60)} /issue_stalled/{v=$NF; if (v+0 > 0.3) {sub(/smsp__average_warps_issue_stalled_/,"",$1); sub(/_per_issue_active.ratio/,"",$1); print k, $1, v}}' "$OUT/ncu.txt" | head -60; }
echo "== bench (rc=$bench_rc)"; cat "$OUT/bench.txt"
[ $test_rc -eq 0 ] && [ $bench_rc -eq 0 ]
