// SPDX-License-Identifier: Apache-2.0
// Scaled GEMMs on sm_90 through cuBLASLt: FP8 x FP8 with per-tensor scales, FP8 x FP8 with
// DeepSeek-V3 blockwise scales (1x128 activations, 128x128 weights), and the BF16 baseline.
//
// Layout (the same "TN" rule as kernels/gemm.h): A [M, K] row-major, B [N, K] row-major,
// C = A · Bᵀ [M, N] row-major, FP32 accumulation, output BF16 or FP32. Internally this is the
// column-major product Cᵀ[N,M] = op_T(B) · A, i.e. cuBLASLt's "A" is our B (weights) and its
// "B" is our A (activations).
//
// All pointers are device pointers (the scales too). A context is not thread-safe: use one
// per thread/stream.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "common/status.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels::cuda {

enum class Sm90GemmOut : uint8_t { kBf16, kFp32 };

// A matmul plan: descriptor, A/B/C layouts and the heuristic's algo (destroyed together).
struct Sm90CublasLtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Sm90CublasLtPlan() = default;
  Sm90CublasLtPlan(const Sm90CublasLtPlan&) = delete;
  Sm90CublasLtPlan& operator=(const Sm90CublasLtPlan&) = delete;
  ~Sm90CublasLtPlan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Handle, 32 MiB workspace, and a cache of matmul plans (descriptors + the heuristic's algo)
// per shape, so a training step pays the heuristic once per shape.
class Sm90CublasLtContext {
 public:
  static StatusOr<std::unique_ptr<Sm90CublasLtContext>> Create(size_t workspace_bytes = 32u << 20);
  ~Sm90CublasLtContext();
  Sm90CublasLtContext(const Sm90CublasLtContext&) = delete;
  Sm90CublasLtContext& operator=(const Sm90CublasLtContext&) = delete;

  using Plan = Sm90CublasLtPlan;
  // kind: 0 tensorwise FP8, 1 blockwise FP8, 2 BF16.
  using PlanKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t>;
  // a_scale / b_scale (cuBLASLt's A and B scale pointers) are set on a new plan's descriptor
  // before the heuristic runs: with block-scale modes cuBLASLt rejects null scale pointers
  // there (CUBLAS_STATUS_INVALID_VALUE, seen on an H200 with CUDA 13.0).
  StatusOr<Plan*> GetPlan(const PlanKey& key, const float* a_scale, const float* b_scale);

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  Sm90CublasLtContext() = default;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

// Shape rules, checked before any CUDA call (so they are testable without a GPU). Errors are
// InvalidArgument and name the offending dimension.
//   tensorwise FP8: M ≥ 1, N and K multiples of 16 (cuBLASLt FP8 alignment)
//   blockwise FP8:  K and N multiples of 128 (whole scale blocks), M a multiple of 4
//                   (16-byte aligned columns of the M-major activation scales)
//   BF16:           M ≥ 1, N and K multiples of 8
Status Sm90ValidateGemmFp8TensorwiseShape(int64_t m, int64_t n, int64_t k);
Status Sm90ValidateGemmFp8BlockwiseShape(int64_t m, int64_t n, int64_t k);
Status Sm90ValidateGemmBf16Shape(int64_t m, int64_t n, int64_t k);

// C = (A · a_scale_inv) · (B · b_scale_inv)ᵀ + beta · C; a_scale_inv / b_scale_inv: one device
// float each. beta = 1 accumulates into C in place (C is read in the output type: a trainer adds
// weight gradients straight into its FP32 gradient buffer instead of a scratch + extra pass).
// E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 are supported by cuBLASLt (E5M2 x E5M2 is not:
// Unimplemented).
Status Sm90GemmFp8TensorwiseCublasLt(Sm90CublasLtContext& ctx, const uint8_t* a, Fp8Format fa,
                                     const float* a_scale_inv, const uint8_t* b, Fp8Format fb,
                                     const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                                     void* c, Sm90GemmOut out, cudaStream_t stream,
                                     float beta = 0.0f);

// DeepSeek-V3 blockwise scales, in the layouts cuBLASLt reads:
//   a_scale_inv: 1x128 tiles of A, M-major [K/128, M] (Sm90ScaleLayout::kMnMajor)
//   b_scale_inv: 128x128 blocks of B, [N/128, Sm90BlockScaleLd(K)] row-major
// (Sm90Fp8Quantize1x128 / Sm90Fp8Quantize128x128 write exactly these.) beta as above.
Status Sm90GemmFp8BlockwiseCublasLt(Sm90CublasLtContext& ctx, const uint8_t* a, Fp8Format fa,
                                    const float* a_scale_inv, const uint8_t* b, Fp8Format fb,
                                    const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                                    void* c, Sm90GemmOut out, cudaStream_t stream,
                                    float beta = 0.0f);

// BF16 baseline: C = A · Bᵀ with A [M,K], B [N,K] bf16.
Status Sm90GemmBf16CublasLt(Sm90CublasLtContext& ctx, const __nv_bfloat16* a,
                            const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k, void* c,
                            Sm90GemmOut out, cudaStream_t stream);

}  // namespace fp8::kernels::cuda
