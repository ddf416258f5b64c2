// Row-major BF16 GEMMs through cuBLASLt with a fused epilogue: the bf16 recipe's bias adds,
// bias + GELU, residual adds, GELU backward and bias gradients ride in the GEMM that produces or
// consumes the tensor, instead of a separate pass over [tokens, features] each (on the H200 those
// passes were ~10 ms of a 67 ms GPT-2 124M step: bench_trainer_cuda --breakdown).
//
//   D[m, n] = alpha·op(A)·op(B) + beta·C, then the epilogue:
//     kNone          nothing
//     kBias          D += bias[j]                      (bias: fp32 [n])
//     kGeluAuxBias   aux = D + bias[j]; D = gelu(aux)  (GELU's tanh form, as GPT-2; aux bf16, D's layout)
//     kDGeluBGrad    D = gelu'(aux) ∘ D; bias_grad[j] = Σ_i D[i, j]   (fp32 [n], overwritten)
//     kBGradA        bias_grad[i] = Σ_k op(A)[i, k]   (fp32 [m], overwritten): the bias gradient of a
//                    weight-gradient GEMM dW = dyᵀ·x, read off dy while the GEMM streams it
// C has D's type and layout (null: D itself). D is bf16 or fp32.
//
// cuBLASLt does not offer every epilogue for every type combination; Run answers Unimplemented
// when the heuristic has no algorithm, remembers the refusal, and the caller takes its unfused
// path (kernels in train_kernels.h). Refusals() lists them for the bench. Single-stream use.
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

enum class Bf16Epilogue : uint8_t { kNone, kBias, kGeluAuxBias, kDGeluBGrad, kBGradA };
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
  const float* bias = nullptr;  // kBias, kGeluAuxBias
  float* bias_grad = nullptr;   // kDGeluBGrad, kBGradA
  bf16* aux = nullptr;          // kGeluAuxBias (written), kDGeluBGrad (read)
  int64_t ld_aux = 0;
};

class Bf16EpilogueGemm {
 public:
  // Uses the context's handle and workspace (same stream as its other users).
  explicit Bf16EpilogueGemm(kernels::cuda::Sm90CublasLtContext* lt);
  ~Bf16EpilogueGemm();

  Status Run(const Bf16GemmArgs& g, cudaStream_t s);
  // "kBGradA m=768 n=2304 k=32768; ..." for each refused (epilogue, shape); empty if none.
  std::string Refusals() const;

 private:
  struct Plan;
  // epilogue, ta, tb, d_fp32, m, n, k, lda, ldb, ldd, ld_aux, pointer alignments (bytes, ≤ 16)
  using Key = std::tuple<int, bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int>;
  StatusOr<Plan*> GetPlan(const Key& key, const Bf16GemmArgs& g);

  kernels::cuda::Sm90CublasLtContext* lt_;
  std::map<Key, std::unique_ptr<Plan>> plans_;  // null entry: refused
  std::set<std::string> refusals_;
};

}  // namespace fp8::train::cuda
