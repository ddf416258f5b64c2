// BF16 GEMMs of the linear layers with the elementwise work that follows them folded into
// cuBLASLt epilogues, so the bias add, GELU, GELU backward and residual add are no separate
// passes over [B·T, C..4C] activations (bf16 recipe; the FP8 recipes' GEMMs live in kernels/).
// Row-major, the same "y = x·Wᵀ" rule as GemmBf16:
//   kBias            y[m,n] (bf16) = x[m,k]·W[n,k]ᵀ + bias[n]
//   kGeluAuxBias     pre = x·Wᵀ + bias → aux[m,n] (bf16, kept for backward); y = gelu_tanh(pre)
//   kBiasResidualF32 y[m,n] (fp32) = x·Wᵀ + bias + residual[m,n] (fp32; may alias y)
//   kDGelu           (dgrad) y[m,n] (bf16) = (dy[m,k]·W[k,n]) ∘ gelu'(aux[m,n])
// A shape/epilogue that cuBLASLt's heuristic has no kernel for answers Unimplemented on its
// first call; callers then fall back to the unfused path for good (Supported() says which).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "common/status.h"

namespace fp8::train::cuda {

enum class LtEpilogue : int { kBias, kGeluAuxBias, kBiasResidualF32, kDGelu };

class LtEpilogueGemm {
 public:
  static StatusOr<std::unique_ptr<LtEpilogueGemm>> Create(size_t workspace_bytes = 32u << 20);
  ~LtEpilogueGemm();
  LtEpilogueGemm(const LtEpilogueGemm&) = delete;
  LtEpilogueGemm& operator=(const LtEpilogueGemm&) = delete;

  // a [m, k] row-major (x, or dy for kDGelu); w: [n, k] (forward epilogues) or [k, n] (kDGelu).
  // bias: fp32 [n] (unused by kDGelu); aux: bf16 [m, n] written (kGeluAuxBias) or read (kDGelu);
  // residual: fp32 [m, n] (kBiasResidualF32 only). y: bf16, or fp32 for kBiasResidualF32.
  Status Run(LtEpilogue e, const __nv_bfloat16* a, const __nv_bfloat16* w, int64_t m, int64_t n,
             int64_t k, const float* bias, __nv_bfloat16* aux, const float* residual, void* y,
             cudaStream_t s);

  // False once cuBLASLt had no kernel for (e, m, n, k).
  bool Supported(LtEpilogue e, int64_t m, int64_t n, int64_t k) const;

 private:
  struct Plan;
  using Key = std::tuple<int, int64_t, int64_t, int64_t>;
  LtEpilogueGemm() = default;
  StatusOr<Plan*> GetPlan(LtEpilogue e, int64_t m, int64_t n, int64_t k);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;  // null entry: no kernel for that key
};

}  // namespace fp8::train::cuda
