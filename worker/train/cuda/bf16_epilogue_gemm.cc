// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/bf16_epilogue_gemm.h"

#include <algorithm>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::train::cuda {

const char* Bf16EpilogueName(Bf16Epilogue e) {
  switch (e) {
    case Bf16Epilogue::kNone: return "none";
    case Bf16Epilogue::kBias: return "bias";
    case Bf16Epilogue::kGeluAuxBias: return "gelu_aux_bias";
    case Bf16Epilogue::kDGelu: return "dgelu";
  }
  return "?";
}

namespace {

// Row-major D = op(A)·op(B) is cuBLASLt's column-major Dᵀ = op(B)ᵀ·op(A)ᵀ: its "A" is our B and
// its "B" our A, its rows our columns. So our per-column bias is its per-row one.
cublasLtEpilogue_t LtEpilogue(Bf16Epilogue e) {
  switch (e) {
    case Bf16Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Bf16Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Bf16Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Bf16Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

int Alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 16;
  int a = 1;
  while (a < 16 && v % (2 * a) == 0) a *= 2;
  return a;
}

bool UsesBias(Bf16Epilogue e) { return e == Bf16Epilogue::kBias || e == Bf16Epilogue::kGeluAuxBias; }
bool UsesAux(Bf16Epilogue e) { return e == Bf16Epilogue::kGeluAuxBias || e == Bf16Epilogue::kDGelu; }

// The refusal protocol (bf16_epilogue_gemm.h): cuBLASLt has no algorithm for this epilogue here,
// and the caller runs the separate passes instead. Not an error and not unfinished work.
Status Refused(Bf16Epilogue e) { return UnimplementedError(std::string("cuBLASLt refused epilogue ") + Bf16EpilogueName(e)); }

}  // namespace

Bf16EpilogueGemm::Bf16EpilogueGemm(kernels::cuda::Sm90CublasLtContext* lt) : lt_(lt) {}
Bf16EpilogueGemm::~Bf16EpilogueGemm() = default;

// The epilogue's pointers are set before the heuristic: it reads their alignment from them.
static Status SetEpiloguePointers(cublasLtMatmulDesc_t desc, const Bf16GemmArgs& g) {
  if (UsesBias(g.epilogue)) {
    const void* p = g.bias;
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof(p)));
  }
  if (UsesAux(g.epilogue)) {
    void* p = g.aux;
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof(p)));
  }
  return OkStatus();
}

StatusOr<Bf16EpilogueGemm::Plan*> Bf16EpilogueGemm::GetPlan(const Key& key, const Bf16GemmArgs& g) {
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    if (!it->second) return Refused(g.epilogue);
    return it->second.get();
  }
  auto plan = std::make_unique<Plan>();
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t op_b = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t ep = LtEpilogue(g.epilogue);
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
  if (UsesAux(g.epilogue)) {
    const int64_t ld = g.ld_aux;
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    const int32_t aux_type = CUDA_R_16BF;
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
  }
  FP8_RETURN_IF_ERROR(SetEpiloguePointers(plan->desc, g));
  // Column-major views: cuBLASLt A = our B, [k, n] if op_a is T else [n, k]; B = our A likewise.
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, g.tb ? g.k : g.n, g.tb ? g.n : g.k, g.ldb));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, g.ta ? g.m : g.k, g.ta ? g.k : g.m, g.lda));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, g.d_fp32 ? CUDA_R_32F : CUDA_R_16BF, g.n, g.m, g.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = lt_->workspace_bytes();
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_->handle(), plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED / INVALID_VALUE from the heuristic mean "not for this combination": a refusal.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
    FP8_CUBLAS_RETURN_IF_ERROR(st);
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
    plans_.emplace(key, nullptr);
    refusals_.insert(std::string(Bf16EpilogueName(g.epilogue)) + (g.d_fp32 ? " (fp32 D)" : "") + " m=" + std::to_string(g.m) +
                     " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k));
    return Refused(g.epilogue);
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

Status Bf16EpilogueGemm::Run(const Bf16GemmArgs& g, cudaStream_t s) {
  if (g.a == nullptr || g.b == nullptr || g.d == nullptr) return InvalidArgumentError("epilogue GEMM: null operand");
  if (g.m < 1 || g.n < 1 || g.k < 1) return InvalidArgumentError("epilogue GEMM: empty shape");
  if (UsesBias(g.epilogue) && g.bias == nullptr) return InvalidArgumentError("epilogue GEMM: bias is null");
  if (UsesAux(g.epilogue) && (g.aux == nullptr || g.ld_aux < g.n)) return InvalidArgumentError("epilogue GEMM: aux is null or ld_aux < n");
  const void* c = g.c ? g.c : g.d;
  int align = std::min({Alignment(g.a), Alignment(g.b), Alignment(c), Alignment(g.d)});
  if (UsesBias(g.epilogue)) align = std::min(align, Alignment(g.bias));
  if (UsesAux(g.epilogue)) align = std::min(align, Alignment(g.aux));
  const Key key{static_cast<int>(g.epilogue), g.ta, g.tb, g.d_fp32, g.m, g.n, g.k, g.lda, g.ldb, g.ldd,
                UsesAux(g.epilogue) ? g.ld_aux : 0, align};
  FP8_ASSIGN_OR_RETURN(Plan * plan, GetPlan(key, g));
  FP8_RETURN_IF_ERROR(SetEpiloguePointers(plan->desc, g));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt_->handle(), plan->desc, &g.alpha, g.b, plan->a, g.a, plan->b, &g.beta, c, plan->c,
                                            g.d, plan->c, &plan->algo, lt_->workspace(), lt_->workspace_bytes(), s));
  return OkStatus();
}

std::string Bf16EpilogueGemm::Refusals() const {
  std::string out;
  for (const std::string& r : refusals_) out += (out.empty() ? "" : "; ") + r;
  return out;
}

}  // namespace fp8::train::cuda
