// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by the sm_90 FP8 kernels: 16-byte vector loads of bf16/fp32, the FP8
// casts, and the scale rule. Every function here reproduces the CPU reference
// (kernels/cpu/scaling.cc, kernels/cpu/quantize_inl.h) bit for bit:
//   * amax compares |x| as integer bit patterns (NaN wins, like the CPU),
//   * scale_inv = max(amax, 1e-4) / fp8_max as an IEEE division (__fdiv_rn), ue8m0 rounds the
//     bit pattern up to a power of two,
//   * q = cvt.rn.satfinite(x / scale_inv) with a true IEEE division.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/fp8_format.h"

namespace fp8::kernels::cuda {

// ---- input vectors: one 16-byte load = kElems values ---------------------------------------
template <typename T>
struct InVec;

template <>
struct InVec<float> {
  static constexpr int kElems = 4;
  __device__ static void Unpack(const uint4& v, float (&out)[4]) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
  }
};

template <>
struct InVec<__nv_bfloat16> {
  static constexpr int kElems = 8;
  // bf16 → fp32 is exact: the bf16 bits are the top half of the float.
  __device__ static void Unpack(const uint4& v, float (&out)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
};

// Read-once data: streaming load that does not keep the line in L1.
__device__ __forceinline__ uint4 LoadStreaming(const void* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));
}

// ---- FP8 format traits ----------------------------------------------------------------------
template <Fp8Format F>
struct Fp8Dev;
template <>
struct Fp8Dev<Fp8Format::kE4M3> {
  static constexpr float kMax = 448.0f;
  static constexpr __nv_fp8_interpretation_t kInterp = __NV_E4M3;
};
template <>
struct Fp8Dev<Fp8Format::kE5M2> {
  static constexpr float kMax = 57344.0f;
  static constexpr __nv_fp8_interpretation_t kInterp = __NV_E5M2;
};

// Two floats → two FP8 bytes (low byte = a), round to nearest even, saturating to ±max.
template <Fp8Format F>
__device__ __forceinline__ uint32_t CvtPairToFp8(float a, float b) {
  return static_cast<uint32_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, Fp8Dev<F>::kInterp));
}

// Two FP8 bytes (low byte first) → two exact floats.
template <Fp8Format F>
__device__ __forceinline__ float2 Fp8PairToFloat2(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xFFFFu), Fp8Dev<F>::kInterp);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// ---- amax and scale -------------------------------------------------------------------------
__device__ __forceinline__ uint32_t AbsBits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

// Same rule as ScaleInvFromAmax (kernels/cpu/scaling.cc).
template <Fp8Format F>
__device__ __forceinline__ float ScaleInvFromAmaxBits(uint32_t amax_bits, bool ue8m0) {
  float amax = __uint_as_float(amax_bits);
  if (!(amax >= 1e-4f) && !isnan(amax)) amax = 1e-4f;
  const float scale_inv = __fdiv_rn(amax, Fp8Dev<F>::kMax);
  if (!ue8m0 || !isfinite(scale_inv)) return scale_inv;
  uint32_t bits = __float_as_uint(scale_inv);
  if ((bits & 0x007FFFFFu) != 0) bits = (bits & 0x7F800000u) + 0x00800000u;
  return __uint_as_float(bits);
}

// Max over `kWidth` consecutive lanes (a power of two ≤ 32); every lane of the warp must call.
template <int kWidth>
__device__ __forceinline__ uint32_t TeamMaxBits(uint32_t v) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

// ---- x / scale_inv, bit-exact with __fdiv_rn, at a third of the cost -----------------------
// nvcc's IEEE division (div.rn.f32) is: y0 = MUFU.RCP(b); y1 = fma(y0, fma(y0, -b, 1), y0);
// q0 = a*y1; r = fma(q0, -b, a); q = fma(y1, r, q0); plus an FCHK range check that sends
// operands near the ends of the float range to a slow subroutine (and BSSY/BSYNC around it).
// The quotient is correctly rounded whenever the range check passes. Every element of a tile
// divides by the same scale, so the reciprocal part is computed once per tile, and the range
// check is replaced by a conservative per-thread one: s within [2^-60, 2^60] and every |x|
// either 0 or within 2^±100 of s and within [2^-100, 2^100] (so quotient and residual stay far
// from overflow, underflow and subnormals). Anything else takes __fdiv_rn. tests/kernels_cuda/sm90_division_test.cu
// compares this against __fdiv_rn on all 2^32 float inputs for a set of scales.
struct ScaleDivisor {
  float s;
  float y;              // refined reciprocal of s, as div.rn.f32 computes it
  uint32_t lo_minus_1;  // fast path: every |x| bits is 0 or ≥ lo ...
  uint32_t hi;          // ... and ≤ hi
  bool fast;
};

__device__ __forceinline__ ScaleDivisor MakeScaleDivisor(float s) {
  ScaleDivisor d;
  d.s = s;
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(s));
  d.y = __fmaf_rn(y0, __fmaf_rn(y0, -s, 1.0f), y0);
  const int32_t sb = static_cast<int32_t>(__float_as_uint(s));  // negative/NaN/Inf: not fast
  const int32_t es = sb >> 23;
  d.fast = es >= 127 - 60 && es <= 127 + 60;
  // |x| ≥ 2^-100 as well: the residual r ≈ 2^-24·x must stay a normal float to be exact
  // (an earlier bound of 2^-125 failed the exhaustive test: 1-ulp errors for |x| < 2^-100).
  // 64-bit: sb ± 2^(100+23) leaves int32 for large scales (a wrapped bound once let x = Inf
  // through the fast path in the exhaustive test).
  const int64_t lo = max(int64_t{sb} - (int64_t{100} << 23), int64_t{27} << 23);
  const int64_t hi = min(int64_t{sb} + (int64_t{100} << 23), int64_t{227} << 23);  // ≤ 2^100
  d.lo_minus_1 = static_cast<uint32_t>(lo) - 1u;
  d.hi = static_cast<uint32_t>(hi);
  return d;
}

// x / s by one multiply with the refined reciprocal and one FMA residual step; exact (equal to
// __fdiv_rn) inside the range MakeScaleDivisor computes. copysign: ±0 / s must keep the sign of
// the zero (the residual step would give +0).
__device__ __forceinline__ float FastQuotient(float x, const ScaleDivisor& d) {
  const float q0 = __fmul_rn(x, d.y);
  const float r = __fmaf_rn(q0, -d.s, x);
  return copysignf(__fmaf_rn(d.y, r, q0), x);
}

// For an FP8 cast only the FP8 byte of x / s has to match, which relaxes the lower end of the
// range check: when |x| < 2^-100 or |x / s| < 2^-100 the fast sequence may be off by an ulp,
// but the quotient is then below 2^-40 (s ≤ 2^60), and every FP8 format rounds it to ±0 (the
// smallest E5M2 subnormal is 2^-16), sign included thanks to copysign. So the cast needs only
// the scale range and |x| ≤ hi — and when s comes from this very tile's amax, |x| ≤ amax ≤ hi
// holds by construction (amax ≤ 2^60·57344 < 2^100 = hi's cap, and amax < s·2^100), leaving no
// per-element check at all. tests/kernels_cuda/sm90_division_test.cu checks the FP8 bytes
// against casts of __fdiv_rn on all 2^32 inputs.
template <int kN>
__device__ __forceinline__ void DivideForFp8Cast(const float (&x)[kN], const ScaleDivisor& d,
                                                 bool all_below_hi, float (&q)[kN]) {
  if (d.fast && all_below_hi) {
#pragma unroll
    for (int i = 0; i < kN; ++i) q[i] = FastQuotient(x[i], d);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) q[i] = __fdiv_rn(x[i], d.s);
  }
}

// x / s, bitwise __fdiv_rn: the fast sequence where every |x| lies in the divisor's exact range.
template <int kN>
__device__ __forceinline__ void DivideByScale(const float (&x)[kN], const ScaleDivisor& d,
                                              float (&q)[kN]) {
  uint32_t mn = 0xFFFFFFFFu, mx = 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const uint32_t ax = AbsBits(x[i]);
    mn = min(mn, ax - 1u);  // 0 wraps to 0xFFFFFFFF: zeros always pass
    mx = max(mx, ax);
  }
  DivideForFp8Cast(x, d, mn >= d.lo_minus_1 && mx <= d.hi, q);
}

template <int kN>
__device__ __forceinline__ bool AllBelow(const float (&x)[kN], uint32_t hi) {
  uint32_t mx = 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) mx = max(mx, AbsBits(x[i]));
  return mx <= hi;
}

// Quantizes kN floats (kN even) with one scale into kN bytes packed little-endian into words.
// kScaleFromTheseValues: the scale was derived from the amax of (a superset of) x, so no
// element can exceed the fast path's upper bound (see DivideForFp8Cast).
template <Fp8Format F, int kN, bool kScaleFromTheseValues = true>
__device__ __forceinline__ void QuantizeToWords(const float (&x)[kN], const ScaleDivisor& d,
                                                uint32_t (&words)[(kN + 3) / 4]) {
  float v[kN];
  DivideForFp8Cast<kN>(x, d, kScaleFromTheseValues || AllBelow<kN>(x, d.hi), v);
#pragma unroll
  for (int w = 0; w < (kN + 3) / 4; ++w) words[w] = 0;
#pragma unroll
  for (int i = 0; i < kN; i += 2) words[i / 4] |= CvtPairToFp8<F>(v[i], v[i + 1]) << (16 * ((i / 2) % 2));
}
template <Fp8Format F, int kN, bool kScaleFromTheseValues = true>
__device__ __forceinline__ void QuantizeToWords(const float (&x)[kN], float scale_inv,
                                                uint32_t (&words)[(kN + 3) / 4]) {
  QuantizeToWords<F, kN, kScaleFromTheseValues>(x, MakeScaleDivisor(scale_inv), words);
}

// ---- n / d for 32-bit n < 2^31 without a division instruction (index math) -----------------
// Round-up multiplier method: q = umulhi(n, m) >> shift with m = ceil(2^p / d), p = 31 +
// ceil(log2 d); exact for every n < 2^31.
struct FastDiv {
  uint32_t d = 1, m = 0, shift = 0;
  FastDiv() = default;
  __host__ __device__ explicit FastDiv(uint32_t divisor) : d(divisor) {
    if (d <= 1) return;
    uint32_t log2 = 0;
    while ((uint64_t{1} << log2) < d) ++log2;
    const uint32_t p = 31 + log2;
    m = static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d);
    shift = p - 32;
  }
  __device__ __forceinline__ uint32_t Div(uint32_t n) const {
    return d == 1 ? n : (__umulhi(n, m) >> shift);
  }
};

}  // namespace fp8::kernels::cuda
