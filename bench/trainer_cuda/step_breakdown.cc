// SPDX-License-Identifier: Apache-2.0
// Where a bf16 training step's time goes, without a profiler (none reads kernel times on the
// GPU machine's image but ncu): each operation the step runs, timed alone at the model's shapes
// with CUDA events (mean of several launches after one warm-up) and multiplied by how often one
// step runs it. The sum next to the measured step time shows what the list leaves out (launch
// gaps, host work). Inputs are random; timings of these kernels do not depend on the values.
#include "bench/trainer_cuda/step_breakdown.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "worker/train/cuda/adamw_cast.h"
#include "worker/train/cuda/bf16_epilogue_gemm.h"
#include "worker/train/cuda/cuda_model.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/sm90_flash_attention.h"
#include "worker/train/cuda/token_groups.h"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {
namespace {

struct Row {
  std::string what;
  int per_step;
  double ms;
};

double TimeMs(cudaStream_t s, const std::function<Status()>& op) {
  constexpr int kReps = 5;
  if (!op().ok()) return -1;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < kReps; ++i) (void)op();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return cudaGetLastError() == cudaSuccess ? ms / kReps : -1;
}

}  // namespace

Status PrintStepBreakdown(const ModelConfig& cfg, int batch, int64_t num_params, double step_ms) {
  const int64_t n = static_cast<int64_t>(batch) * cfg.seq_len, c = cfg.d_model, v = cfg.vocab_size, L = cfg.n_layer;
  const int64_t h = cfg.n_head, hd = c / h, vld = (v + 7) / 8 * 8;
  cudaStream_t s;
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t cublas;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return InternalError("cublasCreate");
  cublasSetStream(cublas, s);
  DeviceBuffer<bf16> a, b, wb, logits;
  DeviceBuffer<float> f1, f2, w32, g32, m32, v32, stats1, stats2, scratch, lse, delta;
  DeviceBuffer<double> partial, out;
  DeviceBuffer<int32_t> tokens;
  FP8_RETURN_IF_ERROR(a.Allocate(static_cast<size_t>(4 * n * c), "a"));
  FP8_RETURN_IF_ERROR(b.Allocate(static_cast<size_t>(4 * n * c), "b"));
  FP8_RETURN_IF_ERROR(wb.Allocate(static_cast<size_t>(std::max(12 * c * c, v * c)), "wb"));
  FP8_RETURN_IF_ERROR(logits.Allocate(static_cast<size_t>(n * vld), "logits"));
  FP8_RETURN_IF_ERROR(f1.Allocate(static_cast<size_t>(n * c), "f1"));
  FP8_RETURN_IF_ERROR(f2.Allocate(static_cast<size_t>(n * c), "f2"));
  FP8_RETURN_IF_ERROR(w32.Allocate(static_cast<size_t>(num_params), "w32"));
  FP8_RETURN_IF_ERROR(g32.Allocate(static_cast<size_t>(num_params), "g32"));
  FP8_RETURN_IF_ERROR(m32.Allocate(static_cast<size_t>(num_params), "m32"));
  FP8_RETURN_IF_ERROR(v32.Allocate(static_cast<size_t>(num_params), "v32"));
  FP8_RETURN_IF_ERROR(stats1.Allocate(static_cast<size_t>(n), "mean"));
  FP8_RETURN_IF_ERROR(stats2.Allocate(static_cast<size_t>(n), "rstd"));
  FP8_RETURN_IF_ERROR(scratch.Allocate(static_cast<size_t>(ColumnScratchFloats(n, 4 * c)), "scratch"));
  FP8_RETURN_IF_ERROR(lse.Allocate(static_cast<size_t>(batch * h * cfg.seq_len), "lse"));
  FP8_RETURN_IF_ERROR(delta.Allocate(static_cast<size_t>(FlashAttentionBackwardScratchFloats({batch, h, cfg.seq_len, hd})), "attention scratch"));
  FP8_RETURN_IF_ERROR(partial.Allocate(1024, "partial"));
  FP8_RETURN_IF_ERROR(out.Allocate(1, "out"));
  FP8_RETURN_IF_ERROR(tokens.Allocate(static_cast<size_t>(n), "tokens"));
  // Tokens spread over the vocabulary (the embedding gradient groups positions by token).
  std::vector<int32_t> host_tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host_tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % v);
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(tokens.get(), host_tokens.data(), sizeof(int32_t) * n, cudaMemcpyHostToDevice, s));
  TokenGroups groups;
  FP8_RETURN_IF_ERROR(groups.Allocate(n, c));
  FP8_RETURN_IF_ERROR(groups.Build(host_tokens.data(), n, v, s));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(m32.get(), 0, sizeof(float) * num_params, s));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(v32.get(), 0, sizeof(float) * num_params, s));
  FP8_RETURN_IF_ERROR(InitNormal(w32.get(), num_params, 3, 0.02f, s));
  FP8_RETURN_IF_ERROR(InitNormal(f1.get(), n * c, 4, 1.0f, s));
  FP8_RETURN_IF_ERROR(CastF32ToBf16(w32.get(), 4 * n * c < num_params ? 4 * n * c : num_params, a.get(), s));
  FP8_RETURN_IF_ERROR(CastF32ToBf16(w32.get(), 4 * n * c < num_params ? 4 * n * c : num_params, b.get(), s));
  FP8_RETURN_IF_ERROR(CastF32ToBf16(w32.get(), std::min(num_params, std::max(12 * c * c, v * c)), wb.get(), s));
  const float* w = w32.get();
  std::vector<Row> rows;
  auto add = [&](const std::string& what, int per_step, const std::function<Status()>& op) {
    rows.push_back({what, per_step, TimeMs(s, op)});
  };
  // The four linear layers: forward, dgrad, wgrad (FP32 accumulate), with the epilogues the bf16
  // step fuses into them (cuda_linear.h): qkv fwd + bias, fc fwd + bias + GELU (pre-activation as
  // aux), fc_proj dgrad + GELU backward. A fusion cuBLASLt refuses is timed as
  // the plain GEMM plus its separate pass (the rows further down), as the step runs it.
  FP8_ASSIGN_OR_RETURN(auto lt, kernels::cuda::Sm90CublasLtContext::Create());
  Bf16EpilogueGemm epi(lt.get());
  DeviceBuffer<bf16> aux, bias16;
  FP8_RETURN_IF_ERROR(aux.Allocate(static_cast<size_t>(4 * n * c), "aux"));
  FP8_RETURN_IF_ERROR(bias16.Allocate(static_cast<size_t>(4 * c), "bias"));
  const int64_t shapes[4][2] = {{c, 3 * c}, {c, c}, {c, 4 * c}, {4 * c, c}};
  const char* names[4] = {"qkv", "proj", "fc", "fc_proj"};
  std::vector<std::string> unfused;
  // Times `fused` (or, refused, `plain`); true when the fused one ran.
  auto add_gemm = [&](const std::string& what, const Bf16GemmArgs& fused, const Bf16GemmArgs& plain) {
    const bool epilogue = fused.epilogue != Bf16Epilogue::kNone;
    const std::string fused_name = what + (epilogue ? std::string(" +") + Bf16EpilogueName(fused.epilogue) : "");
    const double ms = TimeMs(s, [&] { return epi.Run(fused, s); });
    if (ms >= 0) {
      rows.push_back({fused_name, static_cast<int>(L), ms});
      return epilogue;
    }
    unfused.push_back(fused_name);
    rows.push_back({what, static_cast<int>(L), TimeMs(s, [&] { return epi.Run(plain, s); })});
    return false;
  };
  bool fused_bias = false, fused_gelu = false, fused_dgelu = false;
  for (int i = 0; i < 4; ++i) {
    const int64_t in = shapes[i][0], o = shapes[i][1];
    Bf16GemmArgs fwd;
    fwd.tb = true, fwd.m = n, fwd.n = o, fwd.k = in, fwd.a = a.get(), fwd.lda = in, fwd.b = wb.get(), fwd.ldb = in;
    fwd.d = b.get(), fwd.ldd = o;
    Bf16GemmArgs fwd_fused = fwd;
    if (i == 0) fwd_fused.epilogue = Bf16Epilogue::kBias, fwd_fused.bias = bias16.get();
    if (i == 2) fwd_fused.epilogue = Bf16Epilogue::kGeluAuxBias, fwd_fused.bias = bias16.get(), fwd_fused.aux = aux.get(), fwd_fused.ld_aux = o;
    const bool f = add_gemm(std::string("gemm ") + names[i] + " fwd", fwd_fused, fwd);
    (i == 0 ? fused_bias : fused_gelu) |= f;
    Bf16GemmArgs dgrad;
    dgrad.m = n, dgrad.n = in, dgrad.k = o, dgrad.a = a.get(), dgrad.lda = o, dgrad.b = wb.get(), dgrad.ldb = in;
    dgrad.d = b.get(), dgrad.ldd = in;
    Bf16GemmArgs dgrad_fused = dgrad;
    if (i == 3) dgrad_fused.epilogue = Bf16Epilogue::kDGelu, dgrad_fused.aux = aux.get(), dgrad_fused.ld_aux = in;
    fused_dgelu |= add_gemm(std::string("gemm ") + names[i] + " dgrad", dgrad_fused, dgrad);
    Bf16GemmArgs wgrad;
    wgrad.ta = true, wgrad.m = o, wgrad.n = in, wgrad.k = n, wgrad.a = a.get(), wgrad.lda = o, wgrad.b = b.get(), wgrad.ldb = in;
    wgrad.d = g32.get(), wgrad.ldd = in, wgrad.d_fp32 = true, wgrad.beta = 1.0f;
    add_gemm(std::string("gemm ") + names[i] + " wgrad", wgrad, wgrad);
  }
  add("flash attention fwd", static_cast<int>(L), [&] {
    return FlashAttentionForward({batch, h, cfg.seq_len, hd}, a.get(), a.get() + c, a.get() + 2 * c, RowMajorHeads(cfg.seq_len, hd, 3 * c),
                                 b.get(), RowMajorHeads(cfg.seq_len, hd, c), lse.get(), s);
  });
  add("flash attention bwd", static_cast<int>(L), [&] {
    return FlashAttentionBackward({batch, h, cfg.seq_len, hd}, a.get(), a.get() + c, a.get() + 2 * c, RowMajorHeads(cfg.seq_len, hd, 3 * c),
                                  b.get(), b.get(), RowMajorHeads(cfg.seq_len, hd, c), lse.get(), delta.get(), b.get() + n * c,
                                  b.get() + n * c + c, b.get() + n * c + 2 * c, s);
  });
  add("layernorm fwd (first ln_1)", 1, [&] {
    return LayerNormForward(f1.get(), w, w, n, c, a.get(), stats1.get(), stats2.get(), s);
  });
  add("residual add + layernorm fwd", static_cast<int>(2 * L), [&] {
    return ResidualAddLayerNorm(f1.get(), a.get(), w, n, c, f2.get(), w, w, b.get(), stats1.get(), stats2.get(), s);
  });
  add("layernorm bwd", static_cast<int>(2 * L + 1), [&] {
    return LayerNormBackward(a.get(), f1.get(), w, stats1.get(), stats2.get(), n, c, f2.get(), a.get(), g32.get(), g32.get() + c, scratch.get(), s);
  });
  const int li = static_cast<int>(L);
  if (fused_bias || fused_gelu) add("cast bias fp32->bf16 (fused epilogues)", li * ((fused_bias ? 1 : 0) + (fused_gelu ? 1 : 0)), [&] {
    return CastF32ToBf16(w, 4 * c, bias16.get(), s);
  });
  if (!fused_bias) add("bias add [n,3C]", li, [&] { return AddBias(b.get(), w, n, 3 * c, s); });
  if (!fused_gelu) add("bias+gelu fwd [n,4C]", li, [&] { return BiasGeluForward(b.get(), w, n, 4 * c, a.get(), s); });
  if (!fused_dgelu) add("gelu bwd", li, [&] { return GeluBackward(a.get(), b.get(), n * 4 * c, a.get(), s); });
  // No W casts: the optimizer writes the BF16 copies of W and wte (CudaGptModel::OptimizerStep).
  add("bias grads (column sums)", li, [&] {
    for (int64_t o : {3 * c, c, 4 * c, c}) FP8_RETURN_IF_ERROR(ColumnSumAccumulate(a.get(), n, o, g32.get(), scratch.get(), s));
    return OkStatus();
  });
  add("head gemm fwd", 1, [&] {
    return GemmBf16(cublas, false, true, n, v, c, 1.0f, a.get(), c, wb.get(), c, 0.0f, logits.get(), vld, false);
  });
  add("head gemm dgrad+wgrad", 1, [&] {
    FP8_RETURN_IF_ERROR(GemmBf16(cublas, false, false, n, c, v, 1.0f, logits.get(), vld, wb.get(), c, 0.0f, a.get(), c, false));
    return GemmBf16(cublas, true, false, v, c, n, 1.0f, logits.get(), vld, a.get(), c, 1.0f, g32.get(), c, true);
  });
  add("cross-entropy fwd+grad", 1, [&] {
    return CrossEntropy(logits.get(), tokens.get(), n, v, vld, 1.0f, true, f2.get(), s);
  });
  add("embedding fwd+bwd", 1, [&] {
    FP8_RETURN_IF_ERROR(EmbeddingForward(tokens.get(), w, w, n, cfg.seq_len, c, f1.get(), s));
    FP8_RETURN_IF_ERROR(groups.AccumulateWteGrad(f1.get(), g32.get(), s));
    return EmbeddingWpeBackward(f1.get(), n, cfg.seq_len, c, g32.get() + v * c, s);
  });
  const AdamWArgs args{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
  DeviceBuffer<bf16> copies;  // the fused step's BF16 copies (all parameters: an upper bound)
  FP8_RETURN_IF_ERROR(copies.Allocate(static_cast<size_t>(num_params), "bf16 copies"));
  add("grad norm + AdamW + bf16 copies", 1, [&] {
    FP8_RETURN_IF_ERROR(SumSquares(g32.get(), num_params, partial.get(), out.get(), s));
    return AdamWStepTensor(w32.get(), g32.get(), m32.get(), v32.get(), num_params, true, args, copies.get(), s);
  });
  // fp8-blockwise's weight update of one block: AdamW then the 128x128 W/Wᵀ cast the forward
  // runs, against the fused step (adamw_cast.h). Not part of the bf16 sum.
  double update_ms[2] = {0, 0};
  for (int i = 0; i < 4; ++i) {
    const int64_t rows_w = shapes[i][1], cols_w = shapes[i][0], nw = rows_w * cols_w;
    const int64_t ld = kernels::cuda::Sm90BlockScaleLd(cols_w), ld_t = kernels::cuda::Sm90BlockScaleLd(rows_w);
    uint8_t* q = reinterpret_cast<uint8_t*>(a.get());
    uint8_t* qt = q + nw;
    float* sc = f1.get();
    float* sct = f1.get() + (rows_w + 127) / 128 * ld;
    update_ms[0] += TimeMs(s, [&] {
      FP8_RETURN_IF_ERROR(AdamWStepTensor(w32.get(), g32.get(), m32.get(), v32.get(), nw, true, args, nullptr, s));
      return kernels::cuda::Sm90Fp8Quantize128x128WithTranspose(w32.get(), rows_w, cols_w, kernels::Fp8Format::kE4M3,
                                                                kernels::ScaleFormat::kFp32, q, sc, ld, qt, sct, ld_t, s);
    });
    update_ms[1] += TimeMs(s, [&] {
      return AdamWStepCast128x128(w32.get(), g32.get(), m32.get(), v32.get(), rows_w, cols_w, true, args, kernels::Fp8Format::kE4M3,
                                  kernels::ScaleFormat::kFp32, q, sc, ld, qt, sct, ld_t, s);
    });
  }
  double total = 0;
  std::printf("  breakdown of a bf16 step (L%d C%d T%d B%d): op, runs per step, ms each, ms per step\n",
              static_cast<int>(L), static_cast<int>(c), cfg.seq_len, batch);
  for (const Row& r : rows) {
    total += r.ms * r.per_step;
    std::printf("    %-44s x%-3d %9.3f %9.2f\n", r.what.c_str(), r.per_step, r.ms, r.ms * r.per_step);
  }
  std::printf("    %-44s      %9s %9.2f  (measured step %.2f ms)\n", "sum", "", total, step_ms);
  std::printf("  fp8-blockwise weight update of one block's 4 linears: AdamW then W/Wᵀ cast %.3f ms, fused %.3f ms (x%d layers)\n",
              update_ms[0], update_ms[1], li);
  for (const std::string& u : unfused) std::printf("    (cuBLASLt refused %s: timed unfused)\n", u.c_str());
  cublasDestroy(cublas);
  cudaStreamDestroy(s);
  return OkStatus();
}

}  // namespace fp8::train::cuda
