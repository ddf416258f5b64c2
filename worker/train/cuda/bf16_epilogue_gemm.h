// SPDX-License-Identifier: Apache-2.0
// Row-major BF16 GEMMs through cuBLASLt with a fused epilogue: the bf16 recipe's bias add,
// bias + GELU and GELU backward ride in the GEMM that produces or consumes the tensor, instead of
// a separate pass over [tokens, features] each.
//
//   D[m, n] = alpha·op(A)·op(B) + beta·C, then the epilogue:
//     kNone          nothing
//     kBias          D += bias[j]
//     kGeluAuxBias   aux = D + bias[j]; D = gelu(aux)  (GELU's tanh form, as GPT-2; aux: D's layout)
//     kDGelu         D = gelu'(aux) ∘ D
// bias and aux have D's element type (on the H200 with CUDA 13.0 cuBLASLt refused an FP32 bias
// with a BF16 D). C has D's type and layout (null: D itself).
//
// cuBLASLt does not offer every epilogue for every type combination; Run answers Unimplemented
// when the heuristic has no algorithm, remembers the refusal, and the caller takes its unfused
// path (kernels in train_kernels.h). Refusals() lists them for the bench. Single-stream use.
//
// Measured and not used (bench_trainer_cuda --breakdown, H200, GPT-2 124M shapes): a residual add
// as beta·C into an FP32 D (proj fwd 0.151 ms vs GEMM 0.061 + add 0.063), the wgrad bias gradient
// BGRADB into an FP32 D (qkv 0.263 ms vs 0.181 + a ≈0.07 column sum), and DGELU_BGRAD (fc_proj
// dgrad 0.870 ms vs 0.224 + GELU backward 0.156 + a ≈0.09 column sum) all ran slower than the
// GEMM plus the separate pass.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "common/status.h"
#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {

enum class Bf16Epilogue : uint8_t { kNone, kBias, kGeluAuxBias, kDGelu };
const char* Bf16EpilogueName(Bf16Epilogue e);

struct Bf16GemmArgs {
  bool ta = false, tb = false;  // op(A) = Aᵀ / op(B) = Bᵀ
  int64_t m = 0, n = 0, k = 0;
  const bf16* a = nullptr;
  int64_t lda = 0;
  const bf16* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  bool d_fp32 = false;
  const void* c = nullptr;  // beta's C (D's type and layout); null: D
  float alpha = 1.0f, beta = 0.0f;
  Bf16Epilogue epilogue = Bf16Epilogue::kNone;
  const void* bias = nullptr;  // kBias, kGeluAuxBias (D's type)
  bf16* aux = nullptr;         // kGeluAuxBias (written), kDGelu (read)
  int64_t ld_aux = 0;
};

class Bf16EpilogueGemm {
 public:
  // Uses the context's handle and workspace (same stream as its other users).
  explicit Bf16EpilogueGemm(kernels::cuda::Sm90CublasLtContext* lt);
  ~Bf16EpilogueGemm();

  Status Run(const Bf16GemmArgs& g, cudaStream_t s);
  // "bias m=32768 n=2304 k=768; ..." for each refused (epilogue, shape); empty if none.
  std::string Refusals() const;

 private:
  using Plan = kernels::cuda::Sm90CublasLtPlan;  // its C layout is D's
  // epilogue, ta, tb, d_fp32, m, n, k, lda, ldb, ldd, ld_aux, pointer alignments (bytes, ≤ 16)
  using Key = std::tuple<int, bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int>;
  StatusOr<Plan*> GetPlan(const Key& key, const Bf16GemmArgs& g);

  kernels::cuda::Sm90CublasLtContext* lt_;
  std::map<Key, std::unique_ptr<Plan>> plans_;  // null entry: refused
  std::set<std::string> refusals_;
};

}  // namespace fp8::train::cuda
