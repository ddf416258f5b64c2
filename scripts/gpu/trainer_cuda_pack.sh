#!/usr/bin/env bash
# Packs the CUDA trainer's binaries (built here, -DFP8D_CUDA=ON) and the non-system, non-CUDA
# shared libraries they need into .trainer-cuda-carry/{bin,lib} (ignored by git), for
# scripts/gpu/trainer_cuda.sh on the GPU machine, which has CUDA 13.0 but not yaml-cpp/gloo/…
#   scripts/gpu/trainer_cuda_pack.sh [BUILD_DIR]     (default build-trainer-cuda)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-trainer-cuda}
C=.trainer-cuda-carry
grep -qx "/$C/" .git/info/exclude 2>/dev/null || echo "/$C/" >> .git/info/exclude
rm -rf $C && mkdir -p $C/bin $C/lib
for b in worker_train_cuda_test bench_trainer_cuda fp8-train-cuda; do
  strip -o $C/bin/$b $B/bin/$b
done
# Everything ldd resolves outside glibc, libstdc++/libgcc and the CUDA toolkit.
ldd $C/bin/* | awk '/=> \//{print $3}' | sort -u | \
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' | \
  while read -r lib; do cp -L "$lib" $C/lib/; done
du -sh $C/bin $C/lib
ls $C/lib
