// SPDX-License-Identifier: Apache-2.0
// C entry points of the own blockwise FP8 GEMM for scripts/gpu/deepgemm_vs_own.py, which loads
// this library with ctypes and times our kernel with DeepGEMM's own timer (kineto, an 8 GB
// memset before each call) on DeepGEMM's own inputs, in the same process as DeepGEMM.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/sm90_fp8_gemm_blockwise.h"
#include "kernels/cuda/sm90_fp8_quantize.h"

extern "C" {

// Leading dimension (floats) of the [N/128, ld] B-scale array the GEMM reads.
int64_t fp8d_block_scale_ld(int64_t k) { return fp8::kernels::cuda::Sm90BlockScaleLd(k); }

// D[m, n] (bf16) = A[m, k] (e4m3) · B[n, k]ᵀ (e4m3) with a_scale [k/128, m] and b_scale
// [n/128, fp8d_block_scale_ld(k)] (FP32); `tile` is a Sm90BlockwiseGemmTile (0: kAuto).
// 0 on success, else prints the error and returns 1.
int fp8d_own_gemm(const void* a, const float* a_scale, const void* b, const float* b_scale, int64_t m, int64_t n,
                  int64_t k, void* d, void* stream, int tile) {
  const fp8::Status st = fp8::kernels::cuda::Sm90GemmFp8Blockwise(
      static_cast<const uint8_t*>(a), a_scale, static_cast<const uint8_t*>(b), b_scale, m, n, k,
      static_cast<__nv_bfloat16*>(d), static_cast<cudaStream_t>(stream),
      static_cast<fp8::kernels::cuda::Sm90BlockwiseGemmTile>(tile));
  if (!st.ok()) {
    std::fprintf(stderr, "fp8d_own_gemm: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // extern "C"
