// SPDX-License-Identifier: Apache-2.0
// bench_kernels_cuda: bandwidth of the sm_90 quantization kernels next to a device-to-device
// copy measured in the same run, and TFLOPS of the FP8 blockwise GEMMs (cuBLASLt and the own
// wgmma kernel, with their ratio and calc_diff) next to the cuBLASLt BF16 GEMM.
// Timing: CUDA events around each repetition after a warm-up, median of the repetitions; GEMM
// operands rotate over enough copies that the working set exceeds the L2 cache several times.
// Prints markdown tables (docs/performance.md, "GPU: kernels and trainer").
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_dequantize.h"
#include "kernels/cuda/sm90_fp8_gemm_blockwise.h"
#include "kernels/cuda/sm90_fp8_gemm_cublaslt.h"
#include "kernels/cuda/sm90_fp8_quantize.cuh"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.cuh"
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"
#include "kernels/cuda/sm90_fp8_tensor_quantize.h"

namespace fp8::kernels::cuda {
namespace {

// Deterministic pseudo-random bf16 in about [-4, 4), never all zero (zeros time optimistically).
__global__ void FillRandomBf16(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t h = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    x[i] = __float2bfloat16((u - 0.5f) * 8.0f);
  }
}
__global__ void Bf16ToF32(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

template <typename T>
T* Alloc(size_t n) {
  void* p = nullptr;
  FP8_CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

void FillBf16(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  FillRandomBf16<<<4096, 256>>>(x, n, seed);
  FP8_CHECK_CUDA(cudaGetLastError());
}

// Holds the GPU for `ns` nanoseconds on one thread, so that the host enqueues every timed call
// behind it and the events time GPU work back to back. Without it a call that runs shorter on
// the GPU than it takes to enqueue (cuBLASLt: ~13 us of host time per call, more than a small
// GEMM runs) is timed with the GPU idle waiting for the host; the host cost is printed apart.
__global__ void HoldGpu(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Median milliseconds of `reps` timed calls of fn(rep) after `warmup` untimed ones; the timed
// calls are enqueued behind HoldGpu (100 us of hold per call covers enqueue costs up to that).
double MedianMs(const std::function<void(int)>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) FP8_CHECK_CUDA(cudaEventCreate(&e));
  HoldGpu<<<1, 1>>>(static_cast<uint64_t>(reps) * 100000);
  for (int i = 0; i < reps; ++i) {
    FP8_CHECK_CUDA(cudaEventRecord(ev[2 * i]));
    fn(warmup + i);
    FP8_CHECK_CUDA(cudaEventRecord(ev[2 * i + 1]));
  }
  FP8_CHECK_CUDA(cudaDeviceSynchronize());
  FP8_CHECK_CUDA(cudaGetLastError());
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    FP8_CHECK_CUDA(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

struct MemRow {
  std::string name;
  double bytes;
  double ms;
};

void BenchMemoryBound() {
  const int64_t rows = 16384, cols = 7168, n = rows * cols, g = cols / 128;
  const int kSets = 2;  // each input (235 MB bf16) is already ~4x the L2; alternate two anyway
  __nv_bfloat16* x[kSets];
  float* xf[kSets];
  for (int s = 0; s < kSets; ++s) {
    x[s] = Alloc<__nv_bfloat16>(n);
    xf[s] = Alloc<float>(n);
    FillBf16(x[s], n, 1234 + s);
    Bf16ToF32<<<4096, 256>>>(x[s], xf[s], n);
    FP8_CHECK_CUDA(cudaGetLastError());
  }
  __nv_bfloat16* copy_dst = Alloc<__nv_bfloat16>(n);
  __nv_bfloat16* deq = Alloc<__nv_bfloat16>(n);
  uint8_t* q = Alloc<uint8_t>(n);
  uint8_t* qt = Alloc<uint8_t>(n);
  float* s = Alloc<float>(rows * g);
  float* st = Alloc<float>(cols * (rows / 128));
  float* sw = Alloc<float>((rows / 128) * g);
  float* tensor_scale = Alloc<float>(1);
  float* amax = Alloc<float>(1);
  const float one_over = 4.0f / 448.0f;
  FP8_CHECK_CUDA(cudaMemcpy(tensor_scale, &one_over, 4, cudaMemcpyHostToDevice));
  const auto e4 = Fp8Format::kE4M3;
  const auto f32s = ScaleFormat::kFp32;
  const int warm = 5, reps = 30;
  const double N = static_cast<double>(n);

  std::vector<MemRow> out;
  out.push_back({"D2D copy (cudaMemcpyAsync), bf16 16384x7168", 4 * N, MedianMs([&](int i) {
                   FP8_CHECK_CUDA(cudaMemcpyAsync(copy_dst, x[i % kSets], n * 2, cudaMemcpyDeviceToDevice));
                 }, warm, reps)});
  out.push_back({"1x128 quant bf16 -> e4m3, row-major scales", 3 * N + 4 * N / 128, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128(x[i % kSets], rows, cols, e4, f32s, Sm90ScaleLayout::kRowMajor, q, s, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 quant bf16 -> e4m3, MN-major scales", 3 * N + 4 * N / 128, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128(x[i % kSets], rows, cols, e4, f32s, Sm90ScaleLayout::kMnMajor, q, s, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 quant bf16 -> e4m3, ue8m0 scales", 3 * N + 4 * N / 128, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128(x[i % kSets], rows, cols, e4, ScaleFormat::kUe8m0, Sm90ScaleLayout::kRowMajor, q, s, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 quant fp32 -> e4m3", 5 * N + 4 * N / 128, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128(xf[i % kSets], rows, cols, e4, f32s, Sm90ScaleLayout::kRowMajor, q, s, nullptr));
                 }, warm, reps)});
  // The transposing casts: the lean one-tile-per-CTA kernel (the launchers' bf16 default), the
  // kernels it replaced (launched directly), and the lean kernel at other register caps.
  const int64_t rt = rows / 128, ld_t = Sm90BlockScaleLd(rows);
  const double xt_bytes = 4 * N + 8 * N / 128, x1_xt128_bytes = 4 * N + 4 * N / 128, xt128_bytes = 3 * N + 4 * N / 16384;
  const dim3 tiles(static_cast<unsigned>(g), static_cast<unsigned>(rt));
  out.push_back({"1x128 quant X and X^T fused, bf16 (lean)", xt_bytes, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128WithTranspose(x[i % kSets], rows, cols, e4, f32s, Sm90ScaleLayout::kRowMajor, q, s, qt, st, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 quant X and X^T fused, bf16, MN-major scales (trainer's dy) (lean)", xt_bytes, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128WithTranspose(x[i % kSets], rows, cols, e4, f32s, Sm90ScaleLayout::kMnMajor, q, s, qt, st, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 quant X and X^T fused, bf16 (old kernel)", xt_bytes, MedianMs([&](int i) {
                   Sm90Fp8Quantize1x128TransposeKernel<__nv_bfloat16, Fp8Format::kE4M3><<<tiles, kSm90TransposeThreads>>>(
                       x[i % kSets], rows, cols, false, q, s, g, 1, qt, st, rt, 1);
                 }, warm, reps)});
  out.push_back({"128x128 quant of X^T from X (written transposed), bf16 (lean)", xt128_bytes, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize128x128WithTranspose(x[i % kSets], rows, cols, e4, f32s, nullptr, nullptr, 0, qt, sw,
                                                                    ld_t, nullptr));
                 }, warm, reps)});
  out.push_back({"128x128 quant of X^T from X, bf16 (old kernel)", xt128_bytes, MedianMs([&](int i) {
                   Sm90Fp8Quantize128x128Kernel<__nv_bfloat16, Fp8Format::kE4M3><<<tiles, kSm90QuantThreads, 128 * 128>>>(
                       x[i % kSets], rows, cols, false, nullptr, nullptr, 0, qt, sw, ld_t, nullptr, nullptr);
                 }, warm, reps)});
  out.push_back({"1x128 of X + 128x128 of X^T in one read, bf16 (lean)", x1_xt128_bytes, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize1x128AndTransposed128x128(x[i % kSets], rows, cols, e4, f32s, q, s, qt, sw,
                                                                        ld_t, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 of X + 128x128 of X^T in one read, bf16 (old kernel)", x1_xt128_bytes, MedianMs([&](int i) {
                   Sm90Fp8Quantize128x128Kernel<__nv_bfloat16, Fp8Format::kE4M3><<<tiles, kSm90QuantThreads, 128 * 128>>>(
                       x[i % kSets], rows, cols, false, nullptr, nullptr, 0, qt, sw, ld_t, q, s);
                 }, warm, reps)});
  {
    const Sm90TransposeCastArgs a1{x[0], rows, cols, false, q, s, g, 1, qt, st, rt, 1};
    const Sm90TransposeCastArgs a128{x[0], rows, cols, false, q, s, 1, rows, qt, sw, ld_t, 1};
    using Tiles = Sm90TransposedTiles;
    constexpr auto E4 = Fp8Format::kE4M3;
    auto lean = [&](const char* label, double bytes, auto launch) {
      out.push_back({label, bytes, MedianMs([&](int) { FP8_CHECK_CUDA((launch())); }, warm, reps)});
    };
    lean("variant: lean X and X^T 1x128, launch bounds (256, 3)", xt_bytes,
         [&] { return Sm90LaunchTransposeCast<E4, Tiles::k1x128, 3>(a1, nullptr); });
    lean("variant: lean X and X^T 1x128, launch bounds (256, 5)", xt_bytes,
         [&] { return Sm90LaunchTransposeCast<E4, Tiles::k1x128, 5>(a1, nullptr); });
    lean("variant: lean X 1x128 + X^T 128x128, launch bounds (256, 3)", x1_xt128_bytes,
         [&] { return Sm90LaunchTransposeCast<E4, Tiles::k128x128, 3>(a128, nullptr); });
    lean("variant: lean X 1x128 + X^T 128x128, launch bounds (256, 5)", x1_xt128_bytes,
         [&] { return Sm90LaunchTransposeCast<E4, Tiles::k128x128, 5>(a128, nullptr); });
  }
  out.push_back({"128x128 weight quant bf16 -> e4m3", 3 * N + 4 * N / 16384, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8Quantize128x128(x[i % kSets], rows, cols, e4, f32s, q, sw, g, nullptr));
                 }, warm, reps)});
  out.push_back({"variant: 128x128 weight quant, the instance with the X^T / 1x128 outputs' code (before)", 3 * N + 4 * N / 16384,
                 MedianMs([&](int i) {
                   Sm90Fp8Quantize128x128Kernel<__nv_bfloat16, Fp8Format::kE4M3, false><<<tiles, kSm90QuantThreads>>>(
                       x[i % kSets], rows, cols, false, q, sw, g, nullptr, nullptr, 0, nullptr, nullptr);
                 }, warm, reps)});
  out.push_back({"128x128 dequant e4m3 -> bf16", 3 * N + 4 * N / 16384, MedianMs([&](int) {
                   FP8_CHECK_OK(Sm90Fp8Dequantize128x128(q, sw, g, rows, cols, e4, deq, nullptr));
                 }, warm, reps)});
  out.push_back({"1x128 dequant e4m3 -> bf16", 3 * N + 4 * N / 128, MedianMs([&](int) {
                   FP8_CHECK_OK(Sm90Fp8Dequantize1x128(q, s, Sm90ScaleLayout::kRowMajor, rows, cols, e4, deq, nullptr));
                 }, warm, reps)});
  out.push_back({"per-tensor cast + amax bf16 -> e4m3", 3 * N, MedianMs([&](int i) {
                   FP8_CHECK_OK(Sm90Fp8QuantizeTensor(x[i % kSets], n, tensor_scale, e4, q, amax, nullptr));
                 }, warm, reps)});

  // Tuning variants of the 1x128 kernel (vectors per thread, groups per thread), launched
  // directly; the launcher uses the best (sm90_fp8_quantize.cu, Config1x128).
  auto variant = [&](auto kernel_ptr, auto* input, int per_block, bool mn_order, bool mn_major,
                     double bytes, const char* label) {
    const uint32_t gpr = static_cast<uint32_t>(g), groups = static_cast<uint32_t>(rows) * gpr;
    const uint32_t blocks = (groups + per_block - 1) / per_block;
    const FastDiv outer(mn_order ? static_cast<uint32_t>(rows) : gpr);
    out.push_back({label, bytes, MedianMs([&](int) {
                     kernel_ptr<<<blocks, kSm90QuantThreads>>>(input, rows, cols, gpr, groups, outer,
                                                               mn_order, mn_major, false, q, s);
                   }, warm, reps)});
  };
  using BF = __nv_bfloat16;
  constexpr auto E4 = Fp8Format::kE4M3;
  const double bf_bytes = 3 * N + 4 * N / 128, f_bytes = 5 * N + 4 * N / 128;
#define FP8_VARIANT(T, V, U, MB, input, mn_order, mn_major, bytes, label)                           \
  variant(Sm90Fp8Quantize1x128Kernel<T, E4, V, U, MB>, input, Team1x128<T, V>::kPerBlock * U, \
          mn_order, mn_major, bytes, label)
  FP8_VARIANT(BF, 1, 4, 1, x[0], false, false, bf_bytes, "variant: bf16, 1 vec x 4 groups / thread");
  FP8_VARIANT(BF, 2, 2, 1, x[0], false, false, bf_bytes, "variant: bf16, 2 vecs x 2 groups / thread");
  FP8_VARIANT(BF, 2, 4, 1, x[0], false, false, bf_bytes, "variant: bf16, 2 vecs x 4 groups / thread");
  FP8_VARIANT(BF, 4, 2, 1, x[0], false, false, bf_bytes, "variant: bf16, 4 vecs x 2 groups / thread");
  FP8_VARIANT(BF, 4, 2, 4, x[0], false, false, bf_bytes, "variant: bf16, 4 vecs x 2 groups, <= 64 regs (spills)");
  FP8_VARIANT(BF, 2, 2, 1, x[0], true, true, bf_bytes, "variant: bf16, 2x2, MN order, MN-major scales");
  FP8_VARIANT(BF, 2, 2, 1, x[0], false, true, bf_bytes, "variant: bf16, 2x2, memory order, MN-major scales (before)");
  {
    const uint32_t gpr = static_cast<uint32_t>(g);
    auto tile = [&](auto kernel_ptr, auto* input, double bytes, int tile_rows, int tile_cols, bool mn_major, const char* label) {
      const dim3 grid((gpr + tile_cols - 1) / tile_cols, static_cast<unsigned>((rows + tile_rows - 1) / tile_rows));
      out.push_back({label, bytes, MedianMs([&](int) {
                       kernel_ptr<<<grid, kSm90QuantThreads>>>(input, rows, cols, gpr, mn_major, false, q, s);
                     }, warm, reps)});
    };
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 8, 8>, x[0], bf_bytes, 8, 8, true, "variant: bf16, 8 x 8 group tiles, MN-major scales (launcher)");
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 8, 8>, x[0], bf_bytes, 8, 8, false, "variant: bf16, 8 x 8 group tiles, row-major scales (launcher)");
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 4, 16>, x[0], bf_bytes, 4, 16, true, "variant: bf16, 4 x 16 group tiles, MN-major scales");
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 16, 4>, x[0], bf_bytes, 16, 4, true, "variant: bf16, 16 x 4 group tiles, MN-major scales");
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 16, 8>, x[0], bf_bytes, 16, 8, true, "variant: bf16, 16 x 8 group tiles, MN-major scales");
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 8, 16>, x[0], bf_bytes, 8, 16, true, "variant: bf16, 8 x 16 group tiles, MN-major scales");
    tile(Sm90Fp8Quantize1x128TileKernel<BF, E4, 2, 8, 64>, x[0], bf_bytes, 8, 64, true, "variant: bf16, 8 x 64 group tiles, MN-major scales");
    FP8_VARIANT(float, 4, 2, 1, xf[0], false, true, f_bytes, "variant: fp32, 4 x 2, memory order, MN-major scales (before)");
    tile(Sm90Fp8Quantize1x128TileKernel<float, E4, 4, 8, 8>, xf[0], f_bytes, 8, 8, true,
         "variant: fp32, 8 x 8 group tiles, MN-major scales (launcher)");
  }
  FP8_VARIANT(float, 4, 2, 1, xf[0], false, false, f_bytes, "variant: fp32, 4 vecs x 2 groups / thread");
  FP8_VARIANT(float, 8, 1, 1, xf[0], false, false, f_bytes, "variant: fp32, 8 vecs x 1 group / thread");

#undef FP8_VARIANT
  FP8_CHECK_CUDA(cudaGetLastError());

  const double copy_tbps = out[0].bytes / (out[0].ms * 1e-3) / 1e12;
  std::printf("\n### Memory-bound kernels, 16384x7168 (bytes = each input read once + each output written once)\n\n");
  std::printf("| kernel | time (us) | TB/s | vs D2D copy |\n|---|---:|---:|---:|\n");
  for (const auto& r : out) {
    const double tbps = r.bytes / (r.ms * 1e-3) / 1e12;
    std::printf("| %s | %.1f | %.2f | %.0f%% |\n", r.name.c_str(), r.ms * 1e3, tbps, 100.0 * tbps / copy_tbps);
  }
  std::fflush(stdout);
  for (int k = 0; k < kSets; ++k) {
    cudaFree(x[k]);
    cudaFree(xf[k]);
  }
  for (void* p : std::initializer_list<void*>{copy_dst, deq, q, qt, s, st, sw, tensor_scale, amax}) cudaFree(p);
}

// DeepSeek's calc_diff between two bf16 device outputs (1 - 2Σxy / Σ(x² + y²)).
double CalcDiffBf16(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n) {
  std::vector<uint16_t> hx(n), hy(n);
  FP8_CHECK_CUDA(cudaDeviceSynchronize());
  FP8_CHECK_CUDA(cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost));
  FP8_CHECK_CUDA(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
  auto to_float = [](uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;  // bf16 = the top half of a float
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  double xy = 0, xx_yy = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = to_float(hx[i]), b = to_float(hy[i]);
    xy += a * b;
    xx_yy += a * a + b * b;
  }
  return xx_yy == 0 ? 0.0 : 1.0 - 2.0 * xy / xx_yy;
}

void BenchGemms() {
  auto ctx_or = Sm90CublasLtContext::Create();
  FP8_CHECK_OK(ctx_or.status());
  auto& ctx = *ctx_or.value();
  cudaDeviceProp prop{};
  FP8_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double l2 = prop.l2CacheSize;
  struct Shape { int64_t n, k; };
  const Shape shapes[] = {{7168, 16384}, {4096, 7168}, {7168, 2048}, {24576, 1536}};
  // Every tile kAuto chooses from, each measured alone beside the headline columns.
  constexpr int kVariants = 8;
  struct Row {
    int64_t m, n, k;
    std::string cublas, own, bf16, ratio_cublas, ratio_bf16, diff;
    std::string variants[kVariants];
  };
  std::vector<Row> rows;
  const struct {
    Sm90BlockwiseGemmTile tile;
    const char* label;
  } variants[kVariants] = {
      {Sm90BlockwiseGemmTile::kN128ScalesTma6Stages, "128x128"},
      {Sm90BlockwiseGemmTile::kN64ScalesTma, "128x64"},
      {Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints, "128x64 L2 hints"},
      {Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints, "128x128 split-K 2 L2 hints"},
      {Sm90BlockwiseGemmTile::kN128SplitK4, "128x128 split-K 4"},
      {Sm90BlockwiseGemmTile::kN128SplitK8, "128x128 split-K 8"},
      {Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma, "128x64 split-K 2"},
      {Sm90BlockwiseGemmTile::kM256N128MulticastA, "256x128 multicast A"}};
  for (int64_t m : {128, 4096}) {
    for (const Shape& sh : shapes) {
      const int64_t n = sh.n, k = sh.k;
      const double set_bytes = double(m * k + n * k) * 2 + double(m * n) * 2;
      const int sets = static_cast<int>(std::clamp(3.0 * l2 / set_bytes + 1.0, 1.0, 8.0));
      std::vector<__nv_bfloat16*> a(sets), b(sets), c(sets), d(sets);
      std::vector<uint8_t*> qa(sets), qb(sets);
      std::vector<float*> sa(sets), sb(sets);
      const int64_t ld = Sm90BlockScaleLd(k);
      for (int s = 0; s < sets; ++s) {
        a[s] = Alloc<__nv_bfloat16>(m * k);
        b[s] = Alloc<__nv_bfloat16>(n * k);
        c[s] = Alloc<__nv_bfloat16>(m * n);
        d[s] = Alloc<__nv_bfloat16>(m * n);
        qa[s] = Alloc<uint8_t>(m * k);
        qb[s] = Alloc<uint8_t>(n * k);
        sa[s] = Alloc<float>(m * (k / 128));
        sb[s] = Alloc<float>((n / 128) * ld);
        FillBf16(a[s], m * k, 77 + 2 * s);
        FillBf16(b[s], n * k, 78 + 2 * s);
        FP8_CHECK_OK(Sm90Fp8Quantize1x128(a[s], m, k, Fp8Format::kE4M3, ScaleFormat::kFp32, Sm90ScaleLayout::kMnMajor, qa[s], sa[s], nullptr));
        FP8_CHECK_OK(Sm90Fp8Quantize128x128(b[s], n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, qb[s], sb[s], ld, nullptr));
      }
      const double flops = 2.0 * m * n * k;
      // One checked call first: an unsupported configuration prints its error in the table
      // instead of aborting the whole benchmark.
      auto fp8 = [&](int i) {
        const int s = i % sets;
        return Sm90GemmFp8BlockwiseCublasLt(ctx, qa[s], Fp8Format::kE4M3, sa[s], qb[s], Fp8Format::kE4M3,
                                            sb[s], m, n, k, c[s], Sm90GemmOut::kBf16, nullptr);
      };
      auto own = [&](Sm90BlockwiseGemmTile tile) {
        return [&, tile](int i) {
          const int s = i % sets;
          return Sm90GemmFp8Blockwise(qa[s], sa[s], qb[s], sb[s], m, n, k, d[s], nullptr, tile);
        };
      };
      auto bf16 = [&](int i) {
        const int s = i % sets;
        return Sm90GemmBf16CublasLt(ctx, a[s], b[s], m, n, k, c[s], Sm90GemmOut::kBf16, nullptr);
      };
      auto measure = [&](const std::function<Status(int)>& fn) -> std::pair<double, std::string> {
        Status st = fn(0);
        if (st.ok()) st = (cudaDeviceSynchronize() == cudaSuccess) ? OkStatus() : InternalError("sync failed");
        if (!st.ok()) return {0.0, st.ToString()};
        const double ms = MedianMs([&](int i) { FP8_CHECK_OK(fn(i)); }, 5, 30);
        return {flops / (ms * 1e-3) / 1e12, ""};
      };
      auto cell = [](double tf, const std::string& err) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.0f", tf);
        return err.empty() ? std::string(buf) : "error: " + err.substr(0, 120);
      };
      auto ratio = [](double x, double y) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.2f", y > 0 ? x / y : 0.0);
        return std::string(buf);
      };
      Row row{m, n, k};
      // Three rounds, the order rotated each round (each GEMM once first, once after each of
      // the others), best median of each: the first FP8 GEMM after a cuBLASLt FP8 run measured
      // up to 12% lower than the same kernel later in the run (power/clock state), which would
      // otherwise favour whichever runs first.
      double fp8_tf = 0, own_tf = 0, bf16_tf = 0;
      std::string fp8_err, own_err, bf16_err;
      const auto own_auto = own(Sm90BlockwiseGemmTile::kAuto);
      for (int round = 0; round < 3; ++round) {
        auto best = [&](const std::function<Status(int)>& fn, double& tf, std::string& err) {
          const auto [t, e] = measure(fn);
          tf = std::max(tf, t);
          if (!e.empty()) err = e;
        };
        for (int j = 0; j < 3; ++j) {
          switch ((round + j) % 3) {
            case 0: best(fp8, fp8_tf, fp8_err); break;
            case 1: best(own_auto, own_tf, own_err); break;
            default: best(bf16, bf16_tf, bf16_err); break;
          }
        }
      }
      row.cublas = cell(fp8_tf, fp8_err);
      row.own = cell(own_tf, own_err);
      row.bf16 = cell(bf16_tf, bf16_err);
      row.ratio_cublas = ratio(own_tf, fp8_tf);
      row.ratio_bf16 = ratio(own_tf, bf16_tf);
      // Same operands (set 0) through both FP8 paths: the outputs must agree.
      if (fp8_err.empty() && own_err.empty()) {
        FP8_CHECK_OK(fp8(0));
        FP8_CHECK_OK(own(Sm90BlockwiseGemmTile::kAuto)(0));
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.1e", CalcDiffBf16(c[0], d[0], m * n));
        row.diff = buf;
      }
      // Host cost of one call (enqueue only): small GEMMs take a few microseconds on the GPU,
      // and events measure an idle GPU waiting for the host as kernel time.
      auto host_us = [&](const std::function<Status(int)>& fn) {
        FP8_CHECK_CUDA(cudaDeviceSynchronize());
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 100; ++i) FP8_CHECK_OK(fn(i));
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 100;
        FP8_CHECK_CUDA(cudaDeviceSynchronize());
        return us;
      };
      std::printf("host enqueue per call: cuBLASLt %.1f us, own %.1f us\n", host_us(fp8),
                  host_us(own(Sm90BlockwiseGemmTile::kAuto)));
      // Variants: best of two rounds, the second in reverse order (as the headline columns).
      double variant_tf[kVariants] = {};
      std::string variant_err[kVariants];
      for (int round = 0; round < 2; ++round) {
        for (int i = 0; i < kVariants; ++i) {
          const int v = round == 0 ? i : kVariants - 1 - i;
          const auto [tf, err] = measure(own(variants[v].tile));
          variant_tf[v] = std::max(variant_tf[v], tf);
          if (!err.empty()) variant_err[v] = err;
        }
      }
      for (int v = 0; v < kVariants; ++v) row.variants[v] = cell(variant_tf[v], variant_err[v]);
      std::printf("gemm m=%lld n=%lld k=%lld: cuBLASLt %s, own %s (%s x), bf16 %s, calc_diff %s, tiles",
                  static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                  row.cublas.c_str(), row.own.c_str(), row.ratio_cublas.c_str(), row.bf16.c_str(), row.diff.c_str());
      for (int v = 0; v < kVariants; ++v) std::printf("%s %s", v == 0 ? "" : " /", row.variants[v].c_str());
      std::printf("\n");
      std::fflush(stdout);
      rows.push_back(row);
      for (int s = 0; s < sets; ++s) {
        for (void* p : std::initializer_list<void*>{a[s], b[s], c[s], d[s], qa[s], qb[s], sa[s], sb[s]}) cudaFree(p);
      }
    }
  }
  std::printf("\n### GEMMs, C[M,N] = A[M,K] * B[N,K]^T, BF16 output, TFLOPS\n\n");
  std::printf("| M | N | K | FP8 blockwise cuBLASLt | FP8 blockwise own (auto tile) | own / cuBLASLt | BF16 cuBLASLt | own / BF16 | calc_diff own vs cuBLASLt |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %lld | %lld | %lld | %s | **%s** | %s | %s | %s | %s |\n", static_cast<long long>(r.m),
                static_cast<long long>(r.n), static_cast<long long>(r.k), r.cublas.c_str(), r.own.c_str(),
                r.ratio_cublas.c_str(), r.bf16.c_str(), r.ratio_bf16.c_str(), r.diff.c_str());
  }
  std::printf("\n### Own blockwise GEMM, each tile kAuto chooses from (best of two rounds), TFLOPS\n\n");
  std::printf("| M | N | K |");
  for (const auto& v : variants) std::printf(" %s |", v.label);
  std::printf("\n|---:|---:|---:|");
  for (int v = 0; v < kVariants; ++v) std::printf("---:|");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("| %lld | %lld | %lld |", static_cast<long long>(r.m), static_cast<long long>(r.n),
                static_cast<long long>(r.k));
    for (int v = 0; v < kVariants; ++v) std::printf(" %s |", r.variants[v].c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

// One launch each of the cuBLASLt blockwise GEMM and of the own kernel's kAuto and tile variants
// (all with the scales through the pipeline) on one shape, for a profiler (scripts/gpu/gemm.sh
// runs it under ncu).
void ProfileGemm(int64_t m, int64_t n, int64_t k) {
  auto ctx_or = Sm90CublasLtContext::Create();
  FP8_CHECK_OK(ctx_or.status());
  const int64_t ld = Sm90BlockScaleLd(k);
  auto* a = Alloc<__nv_bfloat16>(m * k);
  auto* b = Alloc<__nv_bfloat16>(n * k);
  auto* d = Alloc<__nv_bfloat16>(m * n);
  auto* qa = Alloc<uint8_t>(m * k);
  auto* qb = Alloc<uint8_t>(n * k);
  auto* sa = Alloc<float>(m * (k / 128));
  auto* sb = Alloc<float>((n / 128) * ld);
  FillBf16(a, m * k, 77);
  FillBf16(b, n * k, 78);
  FP8_CHECK_OK(Sm90Fp8Quantize1x128(a, m, k, Fp8Format::kE4M3, ScaleFormat::kFp32, Sm90ScaleLayout::kMnMajor, qa, sa, nullptr));
  FP8_CHECK_OK(Sm90Fp8Quantize128x128(b, n, k, Fp8Format::kE4M3, ScaleFormat::kFp32, qb, sb, ld, nullptr));
  FP8_CHECK_OK(Sm90GemmFp8BlockwiseCublasLt(**ctx_or, qa, Fp8Format::kE4M3, sa, qb, Fp8Format::kE4M3, sb, m, n, k, d,
                                            Sm90GemmOut::kBf16, nullptr));
  for (auto tile : {Sm90BlockwiseGemmTile::kAuto, Sm90BlockwiseGemmTile::kN128ScalesTma6Stages,
                    Sm90BlockwiseGemmTile::kN64ScalesTma, Sm90BlockwiseGemmTile::kM256N128MulticastA}) {
    FP8_CHECK_OK(Sm90GemmFp8Blockwise(qa, sa, qb, sb, m, n, k, d, nullptr, tile));
  }
  FP8_CHECK_CUDA(cudaDeviceSynchronize());
  for (void* p : std::initializer_list<void*>{a, b, d, qa, qb, sa, sb}) cudaFree(p);
}

}  // namespace
}  // namespace fp8::kernels::cuda

// `bench_kernels_cuda gemm` runs only the GEMM tables (the own-GEMM GPU script, scripts/gpu/gemm.sh),
// `bench_kernels_cuda mem` only the memory-bound kernels;
// `bench_kernels_cuda gemm-profile M N K` one launch of each GEMM variant for ncu.
int main(int argc, char** argv) {
  const bool gemm_only = argc > 1 && std::string(argv[1]) == "gemm";
  const bool mem_only = argc > 1 && std::string(argv[1]) == "mem";
  const bool profile = argc > 4 && std::string(argv[1]) == "gemm-profile";
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_kernels_cuda: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  FP8_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("device: %s, %d SMs, L2 %.0f MB, sm_%d%d, driver %d, runtime %d\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.major, prop.minor, driver, runtime);
  if (profile) {
    fp8::kernels::cuda::ProfileGemm(std::stoll(argv[2]), std::stoll(argv[3]), std::stoll(argv[4]));
    return 0;
  }
  if (!gemm_only) fp8::kernels::cuda::BenchMemoryBound();
  if (!mem_only) fp8::kernels::cuda::BenchGemms();
  return 0;
}
