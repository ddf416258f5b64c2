// SPDX-License-Identifier: Apache-2.0
// Diagnostic for the GPU machine: which cuBLASLt blockwise-FP8 configurations does the
// heuristic accept? Prints one line per (A mode, B mode, scale pointers set before the
// heuristic) for the TN layout fp8_kernels_cuda uses. Built only by scripts/gpu/kernels_standalone.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  cublasLtHandle_t h;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  const int M = 256, N = 384, K = 512;  // ours: C[M,N] = A[M,K] B[N,K]^T; cuBLAS m=N, n=M
  float* scales = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&scales), 1 << 20);
  const int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const int32_t modes[2][2] = {{blk, vec}, {vec, blk}};
  for (auto& mode : modes) {
    for (int set_ptr = 0; set_ptr < 2; ++set_ptr) {
      cublasLtMatmulDesc_t d;
      cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n));
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode[0], sizeof(int32_t));
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode[1], sizeof(int32_t));
      if (set_ptr) {
        const float* pa = scales;
        const float* pb = scales + 65536;
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof(pa));
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof(pb));
      }
      cublasLtMatrixLayout_t la, lb, lc;
      cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, N, K);
      cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, M, K);
      cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N);
      cublasLtMatmulPreference_t p;
      cublasLtMatmulPreferenceCreate(&p);
      size_t ws = 32u << 20;
      cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
      cublasLtMatmulHeuristicResult_t r{};
      int got = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, p, 1, &r, &got);
      std::printf("probe: A mode %s, B mode %s, scale ptrs %s -> %s, %d algos\n",
                  mode[0] == blk ? "BLK128x128" : "VEC128", mode[1] == blk ? "BLK128x128" : "VEC128",
                  set_ptr ? "set" : "null", cublasLtGetStatusName(st), got);
      cublasLtMatmulPreferenceDestroy(p);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(d);
    }
  }
  cudaFree(scales);
  cublasLtDestroy(h);
  return 0;
}
