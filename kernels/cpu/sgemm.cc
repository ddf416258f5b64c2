// SPDX-License-Identifier: Apache-2.0
// FP32 GEMM for the CPU trainer: BLIS-style blocking (KC x MC block of op(A) packed into
// MR-row micro-panels, KC x NC block of op(B) packed into NR-column micro-panels, an MR x NR
// register-blocked micro-kernel). Two micro-kernels: a portable one (GCC vector extensions,
// SSE-width) and an AVX2+FMA one picked at run time with __builtin_cpu_supports, so the
// library is built for a portable baseline ISA and still uses FMA where the machine has it.
//
// Determinism: threads split C into disjoint blocks and every element's K reduction runs in
// the same order whatever the thread count, so results do not depend on FP8_NUM_THREADS.
// They do depend on the micro-kernel (FMA rounds once), i.e. on the machine's ISA.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/cpu/sgemm_microkernels_inl.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace fp8::kernels {
namespace {

using internal::Epilogue;
using internal::GenericKernel;
using internal::kMR;
using internal::kRawTile;
#ifdef FP8_HAVE_X86
using internal::Avx2Kernel;
#endif

constexpr int64_t kKC = 256;   // packed B micro-panel (KC x 16 floats = 16 KiB) stays in L1
constexpr int64_t kMC = 144;   // packed A block (144 x 256 floats = 144 KiB) stays in L2
constexpr int64_t kNC = 3072;  // packed B block (3 MiB) in L3

bool CpuHasAvx2Fma() {
#ifdef FP8_HAVE_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// kAuto: the AVX2+FMA kernel wherever the CPU has it, the portable one elsewhere.
SgemmKernel Resolve(SgemmKernel requested) {
  const bool wants_avx2 = requested == SgemmKernel::kAuto || requested == SgemmKernel::kAvx2;
  return wants_avx2 && CpuHasAvx2Fma() ? SgemmKernel::kAvx2 : SgemmKernel::kGeneric;
}

std::atomic<int> g_requested{static_cast<int>(SgemmKernel::kAuto)};

SgemmKernel Current() {
  static const SgemmKernel auto_choice = Resolve(SgemmKernel::kAuto);
  const auto requested = static_cast<SgemmKernel>(g_requested.load(std::memory_order_relaxed));
  return requested == SgemmKernel::kAuto ? auto_choice : Resolve(requested);
}

// 64-byte aligned scratch, reused per thread (the trainer calls Sgemm thousands of times).
float* Scratch(int slot, size_t floats) {
  struct Buffer {
    std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local Buffer buffers[2];
  Buffer& buf = buffers[slot];
  if (buf.size < floats) {
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buf.data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    FP8_CHECK(buf.data != nullptr);
    buf.size = floats;
  }
  return buf.data.get();
}

struct Problem {
  bool trans_a, trans_b;
  float alpha, beta;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
};

// op(A)[i0:i0+mc, p0:p0+kc] → MR-row micro-panels, zero-padded to a multiple of MR rows.
// Both layouts read the stored A sequentially (row by row): a strided walk down a column
// strip misses the cache on every row once the rows are pages apart.
void PackA(const Problem& p, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* out) {
  if (!p.trans_a) {
    for (int64_t ip = 0; ip < mc; ip += kMR) {
      const int64_t rows = std::min<int64_t>(kMR, mc - ip);
      float* dst = out + ip * kc;
      const float* src[kMR];
      for (int64_t r = 0; r < kMR; ++r) src[r] = p.a + (i0 + ip + std::min(r, rows - 1)) * p.lda + p0;
      if (rows == kMR) {
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t r = 0; r < kMR; ++r) dst[k * kMR + r] = src[r][k];
      } else {
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t r = 0; r < kMR; ++r) dst[k * kMR + r] = r < rows ? src[r][k] : 0.0f;
      }
    }
    return;
  }
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = p.a + (p0 + k) * p.lda + i0;
    for (int64_t ip = 0; ip < mc; ip += kMR) {
      const int64_t rows = std::min<int64_t>(kMR, mc - ip);
      float* dst = out + ip * kc + k * kMR;
      for (int64_t r = 0; r < kMR; ++r) dst[r] = r < rows ? src[ip + r] : 0.0f;
    }
  }
}

// op(B)[p0:p0+kc, j0:j0+nc] → NR-column micro-panels, zero-padded. Reads the stored B row by
// row, as PackA does.
template <int kNR>
void PackB(const Problem& p, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  if (!p.trans_b) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = p.b + (p0 + k) * p.ldb + j0;
      for (int64_t jp = 0; jp < nc; jp += kNR) {
        const int64_t cols = std::min<int64_t>(kNR, nc - jp);
        float* d = out + jp * kc + k * kNR;
        if (cols == kNR) {
          std::memcpy(d, src + jp, sizeof(float) * kNR);
        } else {
          for (int64_t j = 0; j < kNR; ++j) d[j] = j < cols ? src[jp + j] : 0.0f;
        }
      }
    }
    return;
  }
  for (int64_t jp = 0; jp < nc; jp += kNR) {
    const int64_t cols = std::min<int64_t>(kNR, nc - jp);
    float* dst = out + jp * kc;
    // Rows of the stored B are columns of op(B): NR of them are read side by side.
    const float* src[kNR];
    for (int64_t j = 0; j < kNR; ++j) src[j] = p.b + (j0 + jp + std::min<int64_t>(j, cols - 1)) * p.ldb + p0;
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < kNR; ++j) dst[k * kNR + j] = j < cols ? src[j][k] : 0.0f;
  }
}

// Scalar epilogue for edge tiles, same operations as EpilogueV4 / EpilogueAvx.
void StoreEdgeTile(const float* t, int nr, int64_t rows, int64_t cols, const Epilogue& e, float* c, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    const float* ti = t + i * nr;
    if (!e.first) {
      for (int64_t j = 0; j < cols; ++j) ci[j] = ci[j] + e.alpha * ti[j];
    } else if (e.beta == 0.0f) {
      for (int64_t j = 0; j < cols; ++j) ci[j] = e.alpha * ti[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) ci[j] = e.alpha * ti[j] + e.beta * ci[j];
    }
  }
}

// Single-threaded blocked GEMM on C[i_begin:i_end, j_begin:j_end].
template <class Kernel>
void GemmBlock(const Problem& p, int64_t k, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  constexpr int kNR = Kernel::kNR;
  const int64_t nc_max = std::min<int64_t>(kNC, (j_end - j_begin + kNR - 1) / kNR * kNR);
  const int64_t mc_max = std::min<int64_t>(kMC, (i_end - i_begin + kMR - 1) / kMR * kMR);
  const int64_t kc_max = std::min<int64_t>(kKC, k);
  float* b_pack = Scratch(0, static_cast<size_t>(nc_max * kc_max));
  float* a_pack = Scratch(1, static_cast<size_t>(mc_max * kc_max));
  alignas(64) float tile[kMR * kNR];
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kNC) {
    const int64_t nc = std::min<int64_t>(kNC, j_end - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKC) {
      const int64_t kc = std::min<int64_t>(kKC, k - p0);
      const Epilogue epi{p.alpha, p.beta, p0 == 0};
      PackB<kNR>(p, p0, kc, j0, nc, b_pack);
      for (int64_t i0 = i_begin; i0 < i_end; i0 += kMC) {
        const int64_t mc = std::min<int64_t>(kMC, i_end - i0);
        PackA(p, i0, mc, p0, kc, a_pack);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t cols = std::min<int64_t>(kNR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t rows = std::min<int64_t>(kMR, mc - ir);
            float* c = p.c + (i0 + ir) * p.ldc + j0 + jr;
            if (rows == kMR && cols == kNR) {
              Kernel::Run(kc, a_pack + ir * kc, b_pack + jr * kc, c, p.ldc, epi);
            } else {
              Kernel::Run(kc, a_pack + ir * kc, b_pack + jr * kc, tile, kNR, kRawTile);
              StoreEdgeTile(tile, kNR, rows, cols, epi, c, p.ldc);
            }
          }
        }
      }
    }
  }
}

void ScaleC(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
  }
}

template <class Kernel>
void SgemmWith(const Problem& p, int64_t m, int64_t n, int64_t k) {
  // Split C along its longer side into one strip per thread, aligned to the micro-tile so no
  // strip gets a ragged edge it does not need. Small products stay on the caller's thread.
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = flops < 2e6 ? 1 : NumThreads();
  if (m >= n) {
    const int64_t units = (m + kMR - 1) / kMR;
    ParallelFor(units, std::max<int64_t>(1, units / threads), [&](int64_t u0, int64_t u1) {
      GemmBlock<Kernel>(p, k, u0 * kMR, std::min(m, u1 * kMR), 0, n);
    });
  } else {
    const int64_t units = (n + Kernel::kNR - 1) / Kernel::kNR;
    ParallelFor(units, std::max<int64_t>(1, units / threads), [&](int64_t u0, int64_t u1) {
      GemmBlock<Kernel>(p, k, 0, m, u0 * Kernel::kNR, std::min(n, u1 * Kernel::kNR));
    });
  }
}

}  // namespace

void SetSgemmKernel(SgemmKernel kernel) { g_requested.store(static_cast<int>(kernel)); }

const char* SgemmKernelName() {
#ifdef FP8_HAVE_X86
  if (Current() == SgemmKernel::kAvx2) return Avx2Kernel::kName;
#endif
  return GenericKernel::kName;
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    ScaleC(m, n, beta, c, ldc);
    return;
  }
  const Problem p{trans_a, trans_b, alpha, beta, a, lda, b, ldb, c, ldc};
#ifdef FP8_HAVE_X86
  if (Current() == SgemmKernel::kAvx2) {
    SgemmWith<Avx2Kernel>(p, m, n, k);
    return;
  }
#endif
  SgemmWith<GenericKernel>(p, m, n, k);
}

}  // namespace fp8::kernels
