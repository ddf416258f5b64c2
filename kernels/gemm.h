// SPDX-License-Identifier: Apache-2.0
// GEMMs, CPU reference. Layout follows cuBLASLt's FP8 rule ("TN"): A is [M, K] row-major,
// B is [N, K] row-major, C = A · Bᵀ is [M, N] row-major, FP32 accumulation.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels {

// Per-tensor scales: C = (A·a_scale_inv) · (B·b_scale_inv)ᵀ.
Status GemmFp8Tensorwise(const uint8_t* a, Fp8Format fa, float a_scale_inv, const uint8_t* b,
                         Fp8Format fb, float b_scale_inv, int64_t m, int64_t n, int64_t k,
                         float* c);

// DeepSeek-V3 blockwise scales: A per 1x128 (a_scale_inv [M, K/128]), B per 128x128
// (b_scale_inv [ceil(N/128), K/128]). Each 128-wide K block is accumulated in FP32, then
// scaled and added to the FP32 result (promotion per K block). K must be a multiple of 128
// (InvalidArgument otherwise); M and N are free.
Status GemmFp8Blockwise(const uint8_t* a, Fp8Format fa, const float* a_scale_inv,
                        const uint8_t* b, Fp8Format fb, const float* b_scale_inv, int64_t m,
                        int64_t n, int64_t k, float* c);

// Plain FP32 GEMM for the CPU trainer, multithreaded and vectorizable, BLAS-like semantics:
// C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, op(X) = Xᵀ when trans_X.
// lda/ldb/ldc are row strides of the stored matrices.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// Sgemm's micro-kernel is chosen at run time: AVX2+FMA where the CPU has it, else a portable
// SSE-width one. Results are independent of the thread count but not of the kernel (FMA
// rounds once). Tests and benches pin one here; nothing outside the code picks it.
enum class SgemmKernel : uint8_t { kAuto, kGeneric, kAvx2 };
void SetSgemmKernel(SgemmKernel kernel);  // kAvx2 falls back to generic without AVX2+FMA
const char* SgemmKernelName();            // the kernel Sgemm uses now

}  // namespace fp8::kernels
