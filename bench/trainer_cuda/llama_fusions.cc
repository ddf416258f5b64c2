// SPDX-License-Identifier: Apache-2.0
#include "bench/trainer_cuda/llama_fusions.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/llama_kernels.h"

namespace fp8::train::cuda {
namespace {

namespace kc = kernels::cuda;
using kernels::Fp8Format;
using kernels::ScaleFormat;

double TimeMs(cudaStream_t s, const std::function<Status()>& op) {
  constexpr int kReps = 10;
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

void Row(const char* what, double ms, double bytes) {
  std::printf("  %-58s %8.1f us %7.2f TB/s\n", what, 1e3 * ms, bytes / (ms * 1e-3) / 1e12);
}

}  // namespace

Status PrintLlamaFusionTimes(int64_t n, int64_t c, int64_t in) {
  cudaStream_t s;
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t wide = 2 * in > c ? 2 * in : c;
  DeviceBuffer<float> x, out, w, rstd, sc, sct;
  DeviceBuffer<bf16> y, ln, gu, dout, act, dgu;
  DeviceBuffer<uint8_t> q, qt;
  FP8_RETURN_IF_ERROR(x.Allocate(static_cast<size_t>(n * c), "x"));
  FP8_RETURN_IF_ERROR(out.Allocate(static_cast<size_t>(n * c), "out"));
  FP8_RETURN_IF_ERROR(w.Allocate(static_cast<size_t>(c), "w"));
  FP8_RETURN_IF_ERROR(rstd.Allocate(static_cast<size_t>(n), "rstd"));
  FP8_RETURN_IF_ERROR(y.Allocate(static_cast<size_t>(n * c), "y"));
  FP8_RETURN_IF_ERROR(ln.Allocate(static_cast<size_t>(n * c), "ln"));
  FP8_RETURN_IF_ERROR(gu.Allocate(static_cast<size_t>(2 * n * in), "gate/up"));
  FP8_RETURN_IF_ERROR(dgu.Allocate(static_cast<size_t>(2 * n * in), "d gate/up"));
  FP8_RETURN_IF_ERROR(dout.Allocate(static_cast<size_t>(n * in), "dout"));
  FP8_RETURN_IF_ERROR(act.Allocate(static_cast<size_t>(n * in), "act"));
  FP8_RETURN_IF_ERROR(q.Allocate(static_cast<size_t>(n * wide), "q"));
  FP8_RETURN_IF_ERROR(qt.Allocate(static_cast<size_t>(n * wide), "qt"));
  FP8_RETURN_IF_ERROR(sc.Allocate(static_cast<size_t>(wide / 128 * n + 64), "scales"));
  FP8_RETURN_IF_ERROR(sct.Allocate(static_cast<size_t>(wide / 128 * kc::Sm90BlockScaleLd(n) + wide * (n / 128) + 64), "scales t"));
  // Random inputs (timings of these passes do not depend on the values, zeros aside).
  FP8_RETURN_IF_ERROR(InitNormal(x.get(), n * c, 1, 1.0f, s));
  FP8_RETURN_IF_ERROR(InitNormal(out.get(), n * c, 2, 1.0f, s));
  FP8_RETURN_IF_ERROR(Fill(w.get(), c, 1.0f, s));
  FP8_RETURN_IF_ERROR(CastF32ToBf16(out.get(), n * c, y.get(), s));
  for (int64_t off = 0; off < 2 * n * in; off += n * c) {
    const int64_t len = 2 * n * in - off < n * c ? 2 * n * in - off : n * c;
    FP8_RETURN_IF_ERROR(CastF32ToBf16(x.get(), len, gu.get() + off, s));
    if (off < n * in) FP8_RETURN_IF_ERROR(CastF32ToBf16(out.get(), len < n * in - off ? len : n * in - off, dout.get() + off, s));
  }
  const ScaleFormat sf = ScaleFormat::kFp32;
  const Fp8BlockOperand op{q.get(), sc.get(), qt.get(), sct.get()};
  const bf16* g = gu.get();
  const bf16* u = gu.get() + in;
  const double nc = static_cast<double>(n * c), ni = static_cast<double>(n * in);
  std::printf("fusions at n=%lld, d_model=%lld, intermediate=%lld (fused vs the passes it replaced):\n", static_cast<long long>(n),
              static_cast<long long>(c), static_cast<long long>(in));
  Row("residual add + rmsnorm -> bf16, then cast (plain)",
      TimeMs(s, [&]() -> Status {
        FP8_RETURN_IF_ERROR(ResidualAddRmsNorm(x.get(), y.get(), n, c, out.get(), w.get(), 1e-5f, ln.get(), rstd.get(), s));
        return kc::Sm90Fp8Quantize1x128AndTransposed128x128(ln.get(), n, c, Fp8Format::kE4M3, sf, q.get(), sc.get(), qt.get(), sct.get(),
                                                            kc::Sm90BlockScaleLd(n), s);
      }),
      nc * (4 + 2 + 4 + 2 + 2 + 2));
  Row("residual add + rms stats, then norm + cast (fused)",
      TimeMs(s, [&]() -> Status {
        FP8_RETURN_IF_ERROR(ResidualAddRmsRstd(x.get(), y.get(), n, c, out.get(), 1e-5f, rstd.get(), s));
        return RmsNormCastBlockwise(out.get(), rstd.get(), w.get(), n, c, sf, op, nullptr, s);
      }),
      nc * (4 + 2 + 4 + 4 + 2));
  Row("swiglu -> bf16, then cast (plain)",
      TimeMs(s, [&]() -> Status {
        FP8_RETURN_IF_ERROR(SwiGluForwardRows(g, u, n, in, 2 * in, act.get(), s));
        return kc::Sm90Fp8Quantize1x128AndTransposed128x128(act.get(), n, in, Fp8Format::kE4M3, sf, q.get(), sc.get(), qt.get(), sct.get(),
                                                            kc::Sm90BlockScaleLd(n), s);
      }),
      ni * (4 + 2 + 2 + 2));
  Row("swiglu + cast (fused)", TimeMs(s, [&] { return SwiGluCastBlockwise(g, u, n, in, 2 * in, sf, op, nullptr, s); }), ni * (4 + 2));
  Row("swiglu backward -> bf16 dgate|dup, then dy cast (shipped)",
      TimeMs(s, [&]() -> Status {
        FP8_RETURN_IF_ERROR(SwiGluBackwardRows(dout.get(), g, u, n, in, 2 * in, dgu.get(), dgu.get() + in, s));
        return kc::Sm90Fp8Quantize1x128WithTranspose(dgu.get(), n, 2 * in, Fp8Format::kE4M3, sf, kc::Sm90ScaleLayout::kMnMajor, q.get(),
                                                     sc.get(), qt.get(), sct.get(), s);
      }),
      ni * (2 + 4 + 4 + 4 + 4));
  DeviceBuffer<float> dw, scratch;
  FP8_RETURN_IF_ERROR(dw.Allocate(static_cast<size_t>(c), "dw"));
  FP8_RETURN_IF_ERROR(scratch.Allocate(static_cast<size_t>(ColumnScratchFloats(n, c)), "scratch"));
  Row("rmsnorm backward (one pass)",
      TimeMs(s, [&] { return RmsNormBackward(y.get(), x.get(), w.get(), rstd.get(), n, c, out.get(), ln.get(), dw.get(), scratch.get(), s); }),
      nc * (2 + 4 + 4 + 4 + 2));
  cudaStreamDestroy(s);
  return OkStatus();
}

}  // namespace fp8::train::cuda
