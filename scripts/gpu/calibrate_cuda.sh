#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call for the calibration job's CUDA backend and CPU throughput (binaries built
# here with -DFP8D_CUDA=ON and carried in .calibrate-cuda-carry/{bin,lib}; see
# scripts/gpu/calibrate_cuda_pack.sh):
#   1. calibrate_cuda_test: CUDA vs CPU output byte for byte (quantize and dequantize)
#   2. test_kernels_cpu (QuantizeIsa*: the AVX2 clones) and calibrate_test: the CPU paths on an AVX2 host
#   3. bench_calibrate --backends cpu,cuda: GPU and CPU GB/s in one run, 2 threads pinned to
#      2 cores (taskset -c 0,1, FP8_NUM_THREADS=2), to /tmp (disk) and /dev/shm; then the CPU
#      with all cores
#   4. scripts/gpu/calibrate_check.py on the CUDA backend's output (torch + safetensors)
#   device run: bash scripts/gpu/calibrate_cuda.sh     (carry: .calibrate-cuda-carry)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-calibrate-out}
mkdir -p "$OUT"
C=$PWD/.calibrate-cuda-carry
. scripts/gpu/carry_env.sh
S="$OUT/summary.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|avx2" | cut -c1-80; } > "$S" 2>&1
ldd $C/bin/bench_calibrate | grep -i "not found" >> "$S"

echo "== calibrate_cuda_test" >> "$S"
timeout 60 $C/bin/calibrate_cuda_test --gtest_color=no > "$OUT/tests.log" 2>&1
echo "rc=$?" >> "$S"
echo "== test_kernels_cpu (ISA clones vs reference), calibrate_test" >> "$S"
timeout 30 $C/bin/test_kernels_cpu --gtest_filter='QuantizeIsa*:Quantize*:Dequant*:Fp8Format*' --gtest_color=no >> "$OUT/tests.log" 2>&1
echo "rc=$?" >> "$S"
timeout 60 $C/bin/calibrate_test --gtest_color=no >> "$OUT/tests.log" 2>&1
echo "rc=$?" >> "$S"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|differs" "$OUT/tests.log" | head -40 >> "$S"

echo "== bench: 2 threads on 2 cores, cpu then cuda, /tmp (disk)" >> "$S"
FP8_NUM_THREADS=2 timeout 60 taskset -c 0,1 $C/bin/bench_calibrate --backends cpu,cuda >> "$S" 2>> "$OUT/bench.log"
echo "rc=$?" >> "$S"
echo "== bench: 2 threads on 2 cores, cpu then cuda, /dev/shm" >> "$S"
FP8_NUM_THREADS=2 timeout 60 taskset -c 0,1 $C/bin/bench_calibrate --backends cpu,cuda --dir /dev/shm/fp8cb >> "$S" 2>> "$OUT/bench.log"
echo "rc=$?" >> "$S"
echo "== bench: all cores ($(nproc)), cpu then cuda, /dev/shm" >> "$S"
timeout 45 $C/bin/bench_calibrate --backends cpu,cuda --dir /dev/shm/fp8cb >> "$S" 2>> "$OUT/bench.log"
echo "rc=$?" >> "$S"
tail -5 "$OUT/bench.log" >> "$S"

echo "== calibrate_check.py on the CUDA backend's output" >> "$S"
M=/tmp/fp8d-calcheck; rm -rf $M; mkdir -p $M
PYTHONUNBUFFERED=1 timeout 60 python3 scripts/gpu/calibrate_check.py --make-model $M/orig >> "$S" 2>&1
echo "{\"input\": \"$M/orig\", \"output_dir\": \"$M/fp8\", \"backend\": \"cuda\"}" > $M/q.json
echo "{\"input\": \"$M/fp8\", \"output_dir\": \"$M/bf16\", \"direction\": \"dequantize\", \"backend\": \"cuda\"}" > $M/d.json
$C/bin/bench_calibrate --child $M/q.json --events $M/q.events >> "$S" 2>&1; echo "quantize rc=$?" >> "$S"
$C/bin/bench_calibrate --child $M/d.json --events $M/d.events >> "$S" 2>&1; echo "dequantize rc=$?" >> "$S"
grep -o '"backend": "[a-z]*"' $M/fp8/report.json $M/bf16/report.json | head -2 >> "$S"
PYTHONUNBUFFERED=1 timeout 60 python3 scripts/gpu/calibrate_check.py --original $M/orig --fp8 $M/fp8 --bf16 $M/bf16 --device cuda >> "$S" 2>&1
echo "check rc=$?" >> "$S"
cat "$S"
