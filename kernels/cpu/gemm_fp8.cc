// SPDX-License-Identifier: Apache-2.0
// FP8 GEMMs, CPU reference (docs/design.md §6). Operands decode exactly to FP32 (every FP8 value
// is representable), multiplied with FP32 accumulation by Sgemm, and scaled afterwards —
// per tensor, or per 128-wide K block for the blockwise recipe (DeepGEMM's promotion).
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "kernels/quantize.h"

namespace fp8::kernels {
namespace {

Status CheckGemmArgs(const char* op, const void* a, const void* b, int64_t m, int64_t n,
                     int64_t k, const float* c) {
  if (m < 0) return InvalidArgumentError(std::string(op) + ": m must be >= 0, got " + std::to_string(m));
  if (n < 0) return InvalidArgumentError(std::string(op) + ": n must be >= 0, got " + std::to_string(n));
  if (k < 0) return InvalidArgumentError(std::string(op) + ": k must be >= 0, got " + std::to_string(k));
  if (a == nullptr && m * k > 0) return InvalidArgumentError(std::string(op) + ": a is null");
  if (b == nullptr && n * k > 0) return InvalidArgumentError(std::string(op) + ": b is null");
  if (c == nullptr && m * n > 0) return InvalidArgumentError(std::string(op) + ": c is null");
  return OkStatus();
}

std::vector<float> Decode(const uint8_t* q, int64_t count, Fp8Format fmt) {
  std::vector<float> out(static_cast<size_t>(count));
  const float* table = Fp8DecodeTable(fmt);
  ParallelFor(count, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = table[q[i]];
  });
  return out;
}

}  // namespace

Status GemmFp8Tensorwise(const uint8_t* a, Fp8Format fa, float a_scale_inv, const uint8_t* b,
                         Fp8Format fb, float b_scale_inv, int64_t m, int64_t n, int64_t k,
                         float* c) {
  FP8_RETURN_IF_ERROR(CheckGemmArgs("GemmFp8Tensorwise", a, b, m, n, k, c));
  const std::vector<float> af = Decode(a, m * k, fa);
  const std::vector<float> bf = Decode(b, n * k, fb);
  // Σ in FP32 first, then one multiply by the combined scale (as cuBLASLt applies its scales).
  Sgemm(false, true, m, n, k, a_scale_inv * b_scale_inv, af.data(), k, bf.data(), k, 0.0f, c, n);
  return OkStatus();
}

Status GemmFp8Blockwise(const uint8_t* a, Fp8Format fa, const float* a_scale_inv,
                        const uint8_t* b, Fp8Format fb, const float* b_scale_inv, int64_t m,
                        int64_t n, int64_t k, float* c) {
  constexpr const char* kOp = "GemmFp8Blockwise";
  FP8_RETURN_IF_ERROR(CheckGemmArgs(kOp, a, b, m, n, k, c));
  if (k % kTile != 0) {
    return InvalidArgumentError(std::string(kOp) + ": k must be a multiple of 128 (one scale per 128-wide K block), got k=" +
                                std::to_string(k));
  }
  if (a_scale_inv == nullptr && m * k > 0) return InvalidArgumentError(std::string(kOp) + ": a_scale_inv is null");
  if (b_scale_inv == nullptr && n * k > 0) return InvalidArgumentError(std::string(kOp) + ": b_scale_inv is null");
  std::fill(c, c + m * n, 0.0f);
  if (m == 0 || n == 0 || k == 0) return OkStatus();
  const std::vector<float> af = Decode(a, m * k, fa);
  const std::vector<float> bf = Decode(b, n * k, fb);
  const int64_t k_blocks = k / kTile;
  std::vector<float> partial(static_cast<size_t>(m * n));
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    // One K block accumulated in FP32, then promoted: C += partial · (sa[i] · sb[j/128]).
    Sgemm(false, true, m, n, kTile, 1.0f, af.data() + kb * kTile, k, bf.data() + kb * kTile, k,
          0.0f, partial.data(), n);
    ParallelFor(m, std::max<int64_t>(1, (1 << 15) / n), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float sa = a_scale_inv[i * k_blocks + kb];
        for (int64_t j = 0; j < n; ++j) {
          const float scale = sa * b_scale_inv[(j / kTile) * k_blocks + kb];
          c[i * n + j] += partial[i * n + j] * scale;
        }
      }
    });
  }
  return OkStatus();
}

}  // namespace fp8::kernels
