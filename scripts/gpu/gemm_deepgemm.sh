#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU-machine call for the own blockwise FP8 GEMM against DeepGEMM (issue #32): builds the
# kernels' standalone CMake project and DeepGEMM (from the anchors' source tarball) side by
# side, warms DeepGEMM's JIT while our build runs, then on an otherwise idle GPU: the blockwise
# GEMM tests, `bench_kernels_cuda gemm` (cuBLASLt, own kAuto and every tile), DeepGEMM's bench
# (deepgemm_bench.py) right after, our kernel under DeepGEMM's timer on DeepGEMM's inputs
# (deepgemm_vs_own.py, both with and without the timer's memset between calls), and optionally
# ncu counters at NCU_SHAPE.
#   here, once: mkdir -p build-dg && cp ../shared/anchors/{deepgemm-src.tgz,deepgemm_bench.py} build-dg/ &&
#               cp -r /usr/src/googletest build-dg/
#   device run: bash scripts/gpu/gemm_deepgemm.sh      (carry: build-dg)
#   NCU_SHAPES="4096 7168 16384;128 4096 7168": ncu counters of DeepGEMM's kernel and ours (kAuto, and
#   the tiles in NCU_TILES) at each shape, one launch each in one process (else no ncu).
#   About 270 s of command time (DeepGEMM's build and JIT, ~200 s, overlap our 22 s build).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${OUT:-/tmp/fp8d-gpu-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
B=/tmp/fp8d-kernels-build
DGC=$REPO/build-dg

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
  nvcc --version | tail -1
} > "$OUT/env.txt" 2>&1

# DeepGEMM: extension (~95 s) then one call of every bench shape (JIT), in the
# background while our build runs (CPU work; the GPU is idle then).
(
  set -e
  tar xzf "$DGC/deepgemm-src.tgz" -C /tmp
  cp "$DGC/deepgemm_bench.py" /tmp/dg/
  mkdir -p /tmp/dgcache
  cd /tmp/dg && CUDA_HOME=/usr/local/cuda bash develop.sh > "$OUT/dg_build.log" 2>&1
  cd /tmp/dg && HOME=/root DG_JIT_CACHE_DIR=/tmp/dgcache DG_PRINT_CONFIGS=1 \
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6 PYTHONUNBUFFERED=1 \
    timeout 400 python3 deepgemm_bench.py > "$OUT/dg_warm.txt" 2>&1
) &
DG_PID=$!

t0=$(date +%s)
if ! { cmake -S scripts/gpu/kernels_standalone -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DGTEST_SRC="$DGC/googletest" &&
       cmake --build $B -j12 --target bench_kernels_cuda kernels_cuda_test fp8d_own_gemm_capi; } > "$OUT/build.log" 2>&1; then
  echo "BUILD FAILED"; grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"
fi
echo "own build: $(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"
wait $DG_PID
echo "DeepGEMM build + JIT warm-up rc=$?, done at +$(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"

# The GEMM kernels' resources and SASS (QGMMA present, no local memory).
if [ -x $B/bin/bench_kernels_cuda ]; then
  cuobjdump --dump-resource-usage $B/bin/bench_kernels_cuda 2>&1 | grep -A1 BlockwiseGemmKernel |
    grep -o 'REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*' | sort | uniq -c >> "$OUT/env.txt"
  cuobjdump --dump-sass $B/bin/bench_kernels_cuda 2>/dev/null |
    awk '/Function : /{f=($0 ~ /BlockwiseGemmKernel/)} f' > "$OUT/sass_gemm.txt"
  echo "GEMM kernels: $(grep -c 'Function :' "$OUT/sass_gemm.txt"), QGMMA: $(grep -c QGMMA "$OUT/sass_gemm.txt"), LDL/STL: $(grep -cE 'LDL|STL' "$OUT/sass_gemm.txt")" >> "$OUT/env.txt"
  gzip -f "$OUT/sass_gemm.txt"
fi

test_rc=-1
if [ -x $B/bin/kernels_cuda_test ]; then
  timeout -s KILL 150 $B/bin/kernels_cuda_test --gtest_color=no --gtest_filter='Sm90GemmBlockwise*' > "$OUT/test.log" 2>&1
  test_rc=$?
fi
timeout -s KILL 200 $B/bin/bench_kernels_cuda gemm > "$OUT/bench.txt" 2>&1
bench_rc=$?
cd /tmp/dg && HOME=/root DG_JIT_CACHE_DIR=/tmp/dgcache LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6 \
  PYTHONUNBUFFERED=1 timeout 200 python3 deepgemm_bench.py > "$OUT/dg.txt" 2>&1
dg_rc=$?
# Our kernel under DeepGEMM's timer, on DeepGEMM's inputs, in one process with it.
CAPI=$(find $B -name 'libfp8d_own_gemm_capi.so' | head -1)
HOME=/root DG_JIT_CACHE_DIR=/tmp/dgcache LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6 \
  PYTHONUNBUFFERED=1 timeout 240 python3 "$REPO/scripts/gpu/deepgemm_vs_own.py" "$CAPI" > "$OUT/dg_vs_own.txt" 2>&1
vs_rc=$?
cd "$REPO"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> "$OUT/env.txt" 2>&1

# ncu counters of DeepGEMM's kernel and ours (kAuto and NCU_TILES), one launch each on DeepGEMM's
# inputs in one process (deepgemm_vs_own.py --profile), at each shape of NCU_SHAPES.
if [ -n "${NCU_SHAPES:-}" ]; then
  IFS=';' read -ra ncu_shapes <<< "$NCU_SHAPES"
  : > "$OUT/ncu.txt"
  for shape in "${ncu_shapes[@]}"; do
    echo "#### shape $shape" >> "$OUT/ncu.txt"
    (cd /tmp/dg && HOME=/root DG_JIT_CACHE_DIR=/tmp/dgcache LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6 \
      PYTHONUNBUFFERED=1 timeout -s KILL 150 ncu --clock-control none -k 'regex:sm90_fp8_gemm|Sm90Fp8Blockwise' \
      --section SpeedOfLight --section WarpStateStats \
      --metrics dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
      python3 "$REPO/scripts/gpu/deepgemm_vs_own.py" "$CAPI" --profile $shape 0 ${NCU_TILES:-}) >> "$OUT/ncu.txt" 2>&1
    echo "ncu $shape rc=$?" >> "$OUT/env.txt"
  done
fi

cat "$OUT/env.txt"
echo "== DeepGEMM configs"; grep -iE "block|config" "$OUT/dg_warm.txt" | cut -c1-400 | head -20
echo "== tests (rc=$test_rc)"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|error|differ|Which is|Expected" "$OUT/test.log" | head -40
if [ -f "$OUT/ncu.txt" ]; then
  echo "== ncu"
  grep -E "^####|^  [A-Za-z_].*\(|^profile|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|SM Frequency|dram__bytes_read|lts__t_bytes|inst_executed.sum|gmma|Warp Cycles Per Issued|==ERR" "$OUT/ncu.txt" | cut -c1-120 | head -90
  awk '/^  [A-Za-z_].*\(/{k=substr($0,1,50)} /issue_stalled/{v=$NF; if (v+0 > 0.3) {sub(/smsp__average_warps_issue_stalled_/,"",$1); sub(/_per_issue_active.ratio/,"",$1); print k, $1, v}}' "$OUT/ncu.txt" | cut -c1-110 | head -60
fi
echo "== DeepGEMM (rc=$dg_rc)"; grep -E "^dense|^grouped|Error|error" "$OUT/dg.txt" | head -20
echo "== bench (rc=$bench_rc)"; grep -vE "^host enqueue|^gemm m=" "$OUT/bench.txt"
echo "== own vs DeepGEMM, DeepGEMM's timer (rc=$vs_rc)"; grep -vE "^$" "$OUT/dg_vs_own.txt" | tail -30
# At most 8 files come back from the device machine: the build and test logs go in one tarball.
(cd "$OUT" && tar czf logs.tgz --remove-files $(ls dg_build.log build.log sass_gemm.txt.gz test.log 2>/dev/null))
