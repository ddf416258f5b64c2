// SPDX-License-Identifier: Apache-2.0
// Sgemm's register-blocked micro-kernels (see sgemm.cc for the blocking around them): an
// MR x NR tile of C from an MR-row micro-panel of packed A and an NR-column micro-panel of
// packed B. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FP8_HAVE_X86 1
#endif

namespace fp8::kernels::internal {

constexpr int kMR = 6;

// What a micro-kernel does with its MR x NR accumulator tile T:
//   first K block: C = alpha·T + beta·C (beta == 0: C = alpha·T, C never read — BLAS rule)
//   later blocks:  C = C + alpha·T
// Always a multiply then an add, never fused, in the vector and the scalar (edge) paths alike:
// an element's result must not depend on whether the thread split put it in an edge tile.
struct Epilogue {
  float alpha;
  float beta;
  bool first;
};
// Writing T itself to a scratch tile (alpha = 1 is exact).
constexpr Epilogue kRawTile{1.0f, 0.0f, true};

typedef float V4 __attribute__((vector_size(16)));

inline V4 LoadV4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreV4(float* p, V4 v) { std::memcpy(p, &v, sizeof(v)); }

inline void EpilogueV4(float* c, V4 t, const Epilogue& e) {
  const V4 alpha = {e.alpha, e.alpha, e.alpha, e.alpha};
  if (!e.first) {
    StoreV4(c, LoadV4(c) + alpha * t);
  } else if (e.beta == 0.0f) {
    StoreV4(c, alpha * t);
  } else {
    const V4 beta = {e.beta, e.beta, e.beta, e.beta};
    StoreV4(c, alpha * t + beta * LoadV4(c));
  }
}

// Portable kernel: MR=6, NR=8, 12 four-wide accumulators (fits the 16 SSE registers).
struct GenericKernel {
  static constexpr int kNR = 8;
  static constexpr const char* kName = "generic-sse";
  static void Run(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, const Epilogue& e) {
    V4 c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {};
    V4 c30 = {}, c31 = {}, c40 = {}, c41 = {}, c50 = {}, c51 = {};
    for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
      const V4 b0 = LoadV4(b), b1 = LoadV4(b + 4);
      // Broadcast by initializer (not V4{} + a: adding +0 is not an identity for -0, so the
      // compiler would have to keep the add).
      V4 av;
      av = V4{a[0], a[0], a[0], a[0]}; c00 += av * b0; c01 += av * b1;
      av = V4{a[1], a[1], a[1], a[1]}; c10 += av * b0; c11 += av * b1;
      av = V4{a[2], a[2], a[2], a[2]}; c20 += av * b0; c21 += av * b1;
      av = V4{a[3], a[3], a[3], a[3]}; c30 += av * b0; c31 += av * b1;
      av = V4{a[4], a[4], a[4], a[4]}; c40 += av * b0; c41 += av * b1;
      av = V4{a[5], a[5], a[5], a[5]}; c50 += av * b0; c51 += av * b1;
    }
    EpilogueV4(c + 0 * ldc, c00, e); EpilogueV4(c + 0 * ldc + 4, c01, e);
    EpilogueV4(c + 1 * ldc, c10, e); EpilogueV4(c + 1 * ldc + 4, c11, e);
    EpilogueV4(c + 2 * ldc, c20, e); EpilogueV4(c + 2 * ldc + 4, c21, e);
    EpilogueV4(c + 3 * ldc, c30, e); EpilogueV4(c + 3 * ldc + 4, c31, e);
    EpilogueV4(c + 4 * ldc, c40, e); EpilogueV4(c + 4 * ldc + 4, c41, e);
    EpilogueV4(c + 5 * ldc, c50, e); EpilogueV4(c + 5 * ldc + 4, c51, e);
  }
};

#ifdef FP8_HAVE_X86
__attribute__((target("avx2,fma"), always_inline)) inline void EpilogueAvx(float* c, __m256 t, const Epilogue& e) {
  const __m256 at = _mm256_mul_ps(_mm256_set1_ps(e.alpha), t);
  if (!e.first) {
    _mm256_storeu_ps(c, _mm256_add_ps(_mm256_loadu_ps(c), at));
  } else if (e.beta == 0.0f) {
    _mm256_storeu_ps(c, at);
  } else {
    _mm256_storeu_ps(c, _mm256_add_ps(at, _mm256_mul_ps(_mm256_set1_ps(e.beta), _mm256_loadu_ps(c))));
  }
}

// AVX2+FMA kernel: MR=6, NR=16, 12 eight-wide accumulators.
struct Avx2Kernel {
  static constexpr int kNR = 16;
  static constexpr const char* kName = "avx2-fma";
  __attribute__((target("avx2,fma"))) static void Run(int64_t kc, const float* a, const float* b, float* c,
                                                      int64_t ldc, const Epilogue& e) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
      const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
      __m256 av;
      av = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
      av = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
      av = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
      av = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
      av = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
      av = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
    }
    EpilogueAvx(c + 0 * ldc, c00, e); EpilogueAvx(c + 0 * ldc + 8, c01, e);
    EpilogueAvx(c + 1 * ldc, c10, e); EpilogueAvx(c + 1 * ldc + 8, c11, e);
    EpilogueAvx(c + 2 * ldc, c20, e); EpilogueAvx(c + 2 * ldc + 8, c21, e);
    EpilogueAvx(c + 3 * ldc, c30, e); EpilogueAvx(c + 3 * ldc + 8, c31, e);
    EpilogueAvx(c + 4 * ldc, c40, e); EpilogueAvx(c + 4 * ldc + 8, c41, e);
    EpilogueAvx(c + 5 * ldc, c50, e); EpilogueAvx(c + 5 * ldc + 8, c51, e);
  }
};
#endif

}  // namespace fp8::kernels::internal
