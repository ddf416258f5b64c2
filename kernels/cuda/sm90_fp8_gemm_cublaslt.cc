// SPDX-License-Identifier: Apache-2.0
// cuBLASLt scaled GEMMs for sm_90 (see the header for layouts and shape rules).
#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"

#include <string>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::kernels::cuda {

namespace {
enum PlanKind : int { kTensorwise = 0, kBlockwise = 1, kBf16 = 2 };

std::string Dim(const char* name, int64_t v) { return std::string(name) + "=" + std::to_string(v); }

cudaDataType_t Fp8Type(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}
// Local, so this library does not need the CPU reference library at link time.
const char* FormatName(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }
cudaDataType_t OutType(Sm90GemmOut o) { return o == Sm90GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }
}  // namespace

StatusOr<std::unique_ptr<Sm90CublasLtContext>> Sm90CublasLtContext::Create(size_t workspace_bytes) {
  std::unique_ptr<Sm90CublasLtContext> ctx(new Sm90CublasLtContext());
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&ctx->handle_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMalloc(&ctx->workspace_, workspace_bytes));
  ctx->workspace_bytes_ = workspace_bytes;
  return ctx;
}

Sm90CublasLtContext::~Sm90CublasLtContext() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

StatusOr<Sm90CublasLtContext::Plan*> Sm90CublasLtContext::GetPlan(const PlanKey& key,
                                                                 const float* a_scale,
                                                                 const float* b_scale) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const auto [kind, fa_i, fb_i, out_i, m, n, k] = key;
  const auto fa = static_cast<Fp8Format>(fa_i), fb = static_cast<Fp8Format>(fb_i);
  const auto out = static_cast<Sm90GemmOut>(out_i);
  auto plan = std::make_unique<Plan>();

  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (kind == kBlockwise) {
    // cuBLASLt's A is our B (weights, 128x128 blocks); its B is our A (activations, 1x128).
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  }
  if (kind != kBf16) {
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
  }
  if (kind != kBf16) {
    // Promote the FP8 partial sums to FP32 regularly (no "fast accumulation"): the accuracy the
    // DeepSeek-V3 recipe relies on; blockwise modes require it anyway.
    const int8_t fast_accum = 0;
    FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)));
  }
  const cudaDataType_t ta = kind == kBf16 ? CUDA_R_16BF : Fp8Type(fb);  // cuBLASLt A = our B
  const cudaDataType_t tb = kind == kBf16 ? CUDA_R_16BF : Fp8Type(fa);  // cuBLASLt B = our A
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, ta, k, n, k));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, tb, k, m, k));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, OutType(out), n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = workspace_bytes_;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                        pref, 1, &result, &returned);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  FP8_CUBLAS_RETURN_IF_ERROR(st);
  if (returned == 0) {
    return UnimplementedError("cuBLASLt has no algorithm for this GEMM (kind " +
                              std::to_string(kind) + ", a " + FormatName(fa) + ", b " +
                              FormatName(fb) + ", " + Dim("m", m) + " " + Dim("n", n) + " " +
                              Dim("k", k) + ")");
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

Status Sm90ValidateGemmFp8TensorwiseShape(int64_t m, int64_t n, int64_t k) {
  if (m < 1) return InvalidArgumentError("GEMM " + Dim("m", m) + " must be ≥ 1");
  if (n < 16 || n % 16 != 0) return InvalidArgumentError("FP8 GEMM " + Dim("n", n) + " must be a positive multiple of 16");
  if (k < 16 || k % 16 != 0) return InvalidArgumentError("FP8 GEMM " + Dim("k", k) + " must be a positive multiple of 16");
  return OkStatus();
}

Status Sm90ValidateGemmFp8BlockwiseShape(int64_t m, int64_t n, int64_t k) {
  if (m < 4 || m % 4 != 0) return InvalidArgumentError("blockwise FP8 GEMM " + Dim("m", m) + " must be a positive multiple of 4");
  if (n < 128 || n % 128 != 0) return InvalidArgumentError("blockwise FP8 GEMM " + Dim("n", n) + " must be a positive multiple of 128");
  if (k < 128 || k % 128 != 0) return InvalidArgumentError("blockwise FP8 GEMM " + Dim("k", k) + " must be a positive multiple of 128");
  return OkStatus();
}

Status Sm90ValidateGemmBf16Shape(int64_t m, int64_t n, int64_t k) {
  if (m < 1) return InvalidArgumentError("GEMM " + Dim("m", m) + " must be ≥ 1");
  if (n < 8 || n % 8 != 0) return InvalidArgumentError("BF16 GEMM " + Dim("n", n) + " must be a positive multiple of 8");
  if (k < 8 || k % 8 != 0) return InvalidArgumentError("BF16 GEMM " + Dim("k", k) + " must be a positive multiple of 8");
  return OkStatus();
}

namespace {

Status CheckPointers(const void* a, const void* b, const void* c) {
  if (a == nullptr) return InvalidArgumentError("GEMM operand a is null");
  if (b == nullptr) return InvalidArgumentError("GEMM operand b is null");
  if (c == nullptr) return InvalidArgumentError("GEMM output c is null");
  return OkStatus();
}

Status RunScaled(Sm90CublasLtContext& ctx, int kind, const uint8_t* a, Fp8Format fa,
                 const float* a_scale_inv, const uint8_t* b, Fp8Format fb,
                 const float* b_scale_inv, int64_t m, int64_t n, int64_t k, void* c,
                 Sm90GemmOut out, cudaStream_t stream, float beta) {
  FP8_RETURN_IF_ERROR(CheckPointers(a, b, c));
  if (a_scale_inv == nullptr || b_scale_inv == nullptr)
    return InvalidArgumentError("GEMM scale_inv pointer is null");
  if (fa == Fp8Format::kE5M2 && fb == Fp8Format::kE5M2)
    return UnimplementedError("cuBLASLt has no E5M2 x E5M2 GEMM; quantize one side as E4M3");
  FP8_ASSIGN_OR_RETURN(auto* plan, ctx.GetPlan({kind, static_cast<int>(fa), static_cast<int>(fb),
                                                static_cast<int>(out), m, n, k},
                                               b_scale_inv, a_scale_inv));
  // Scale pointers change per call; the descriptor is read when the matmul is enqueued.
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale_inv, sizeof(b_scale_inv)));
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale_inv, sizeof(a_scale_inv)));
  // The heuristic's algo was chosen without knowing beta; cuBLASLt algos take any beta (C and D
  // share one layout here).
  const float alpha = 1.0f;
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(ctx.handle(), plan->desc, &alpha, b, plan->a, a,
                                            plan->b, &beta, c, plan->c, c, plan->c, &plan->algo,
                                            ctx.workspace(), ctx.workspace_bytes(), stream));
  return OkStatus();
}

}  // namespace

Status Sm90GemmFp8TensorwiseCublasLt(Sm90CublasLtContext& ctx, const uint8_t* a, Fp8Format fa,
                                     const float* a_scale_inv, const uint8_t* b, Fp8Format fb,
                                     const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                                     void* c, Sm90GemmOut out, cudaStream_t stream,
                                     float beta) {
  FP8_RETURN_IF_ERROR(Sm90ValidateGemmFp8TensorwiseShape(m, n, k));
  return RunScaled(ctx, kTensorwise, a, fa, a_scale_inv, b, fb, b_scale_inv, m, n, k, c, out, stream, beta);
}

Status Sm90GemmFp8BlockwiseCublasLt(Sm90CublasLtContext& ctx, const uint8_t* a, Fp8Format fa,
                                    const float* a_scale_inv, const uint8_t* b, Fp8Format fb,
                                    const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                                    void* c, Sm90GemmOut out, cudaStream_t stream,
                                    float beta) {
  FP8_RETURN_IF_ERROR(Sm90ValidateGemmFp8BlockwiseShape(m, n, k));
  return RunScaled(ctx, kBlockwise, a, fa, a_scale_inv, b, fb, b_scale_inv, m, n, k, c, out, stream, beta);
}

Status Sm90GemmBf16CublasLt(Sm90CublasLtContext& ctx, const __nv_bfloat16* a,
                            const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k, void* c,
                            Sm90GemmOut out, cudaStream_t stream) {
  FP8_RETURN_IF_ERROR(Sm90ValidateGemmBf16Shape(m, n, k));
  FP8_RETURN_IF_ERROR(CheckPointers(a, b, c));
  FP8_ASSIGN_OR_RETURN(auto* plan, ctx.GetPlan({kBf16, 0, 0, static_cast<int>(out), m, n, k}, nullptr, nullptr));
  const float alpha = 1.0f, beta = 0.0f;
  FP8_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(ctx.handle(), plan->desc, &alpha, b, plan->a, a,
                                            plan->b, &beta, c, plan->c, c, plan->c, &plan->algo,
                                            ctx.workspace(), ctx.workspace_bytes(), stream));
  return OkStatus();
}

}  // namespace fp8::kernels::cuda
