#!/usr/bin/env bash
# Packs the calibration job's CUDA binaries (built here, -DFP8D_CUDA=ON) and the non-system,
# non-CUDA shared libraries they need into .calibrate-cuda-carry/{bin,lib} (ignored by git), for
# scripts/gpu/calibrate_cuda.sh on the GPU machine, which has CUDA 13.0 but not yaml-cpp/gloo/…
#   scripts/gpu/calibrate_cuda_pack.sh [BUILD_DIR]     (default build-calperf)
#   targets: calibrate_cuda_test calibrate_test test_kernels_cpu bench_calibrate
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-calperf}
C=.calibrate-cuda-carry
grep -qx "/$C/" .git/info/exclude 2>/dev/null || echo "/$C/" >> .git/info/exclude
rm -rf $C && mkdir -p $C/bin $C/lib
for b in calibrate_cuda_test calibrate_test test_kernels_cpu bench_calibrate; do
  strip -o $C/bin/$b $B/bin/$b
done
# Everything ldd resolves outside glibc, libstdc++/libgcc and the CUDA toolkit.
ldd $C/bin/* | awk '/=> \//{print $3}' | sort -u | \
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' | \
  while read -r lib; do cp -L "$lib" $C/lib/; done
du -sh $C/bin $C/lib
ls $C/lib
