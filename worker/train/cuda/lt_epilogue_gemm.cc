#include "worker/train/cuda/lt_epilogue_gemm.h"

#include <string>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::train::cuda {

namespace {
#define LT_RETURN_IF_ERROR(expr)                                                                      \
  do {                                                                                                \
    const cublasStatus_t _st = (expr);                                                                \
    if (_st != CUBLAS_STATUS_SUCCESS)                                                                 \
      return ::fp8::kernels::cuda::CublasErrorStatus(_st, #expr, __FILE__, __LINE__);                 \
  } while (0)

template <typename T>
cublasStatus_t SetAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  return cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v));
}
}  // namespace

// Row-major y[m, n] is column-major yᵀ [n, m]: cuBLASLt's A is the weight, its B the activation.
struct LtEpilogueGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

StatusOr<std::unique_ptr<LtEpilogueGemm>> LtEpilogueGemm::Create(size_t workspace_bytes) {
  std::unique_ptr<LtEpilogueGemm> g(new LtEpilogueGemm());
  LT_RETURN_IF_ERROR(cublasLtCreate(&g->handle_));
  FP8_CUDA_RETURN_IF_ERROR(cudaMalloc(&g->workspace_, workspace_bytes));
  g->workspace_bytes_ = workspace_bytes;
  return g;
}

LtEpilogueGemm::~LtEpilogueGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

bool LtEpilogueGemm::Supported(LtEpilogue e, int64_t m, int64_t n, int64_t k) const {
  auto it = plans_.find(Key{static_cast<int>(e), m, n, k});
  return it == plans_.end() || it->second != nullptr;
}

StatusOr<LtEpilogueGemm::Plan*> LtEpilogueGemm::GetPlan(LtEpilogue e, int64_t m, int64_t n, int64_t k) {
  const Key key{static_cast<int>(e), m, n, k};
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    if (!it->second) return UnimplementedError("cuBLASLt has no kernel for this epilogue GEMM");
    return it->second.get();
  }
  auto plan = std::make_unique<Plan>();
  const bool dgelu = e == LtEpilogue::kDGelu;
  const bool f32_out = e == LtEpilogue::kBiasResidualF32;
  LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_RETURN_IF_ERROR(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, dgelu ? CUBLAS_OP_N : CUBLAS_OP_T));
  LT_RETURN_IF_ERROR(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N));
  const cublasLtEpilogue_t epi = e == LtEpilogue::kGeluAuxBias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                 : dgelu                       ? CUBLASLT_EPILOGUE_DGELU
                                                               : CUBLASLT_EPILOGUE_BIAS;
  LT_RETURN_IF_ERROR(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi));
  if (!dgelu) LT_RETURN_IF_ERROR(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F));
  if (e == LtEpilogue::kGeluAuxBias || dgelu)
    LT_RETURN_IF_ERROR(SetAttr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(n)));
  // Forward: A = W [n, k] row-major = column-major k×n, transposed. dgrad: A = W [k, n] row-major
  // = column-major n×k, as is. B = the activation [m, k] = column-major k×m.
  LT_RETURN_IF_ERROR(dgelu ? cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, n, k, n)
                           : cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, k, n, k));
  LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, k, m, k));
  LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, f32_out ? CUDA_R_32F : CUDA_R_16BF, n, m, n));
  cublasLtMatmulPreference_t pref = nullptr;
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    plans_[key] = nullptr;
    return UnimplementedError("cuBLASLt has no kernel for epilogue " + std::to_string(static_cast<int>(e)) + " at m=" +
                              std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  plan->algo = result.algo;
  Plan* p = plan.get();
  plans_[key] = std::move(plan);
  return p;
}

Status LtEpilogueGemm::Run(LtEpilogue e, const __nv_bfloat16* a, const __nv_bfloat16* w, int64_t m, int64_t n,
                           int64_t k, const float* bias, __nv_bfloat16* aux, const float* residual, void* y,
                           cudaStream_t s) {
  FP8_ASSIGN_OR_RETURN(Plan * p, GetPlan(e, m, n, k));
  if (e != LtEpilogue::kDGelu) LT_RETURN_IF_ERROR(SetAttr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
  if (e == LtEpilogue::kGeluAuxBias || e == LtEpilogue::kDGelu)
    LT_RETURN_IF_ERROR(SetAttr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux)));
  const float alpha = 1.0f;
  const float beta = e == LtEpilogue::kBiasResidualF32 ? 1.0f : 0.0f;
  const void* c = e == LtEpilogue::kBiasResidualF32 ? static_cast<const void*>(residual) : y;
  LT_RETURN_IF_ERROR(cublasLtMatmul(handle_, p->desc, &alpha, w, p->a, a, p->b, &beta, c, p->c, y, p->c, &p->algo, workspace_,
                                    workspace_bytes_, s));
  return OkStatus();
}

}  // namespace fp8::train::cuda
