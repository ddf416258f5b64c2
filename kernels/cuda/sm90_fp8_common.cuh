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

// Quantizes kN floats (kN even) with one scale into kN bytes packed little-endian into words.
template <Fp8Format F, int kN>
__device__ __forceinline__ void QuantizeToWords(const float (&x)[kN], float scale_inv,
                                                uint32_t (&words)[(kN + 3) / 4]) {
#pragma unroll
  for (int w = 0; w < (kN + 3) / 4; ++w) words[w] = 0;
#pragma unroll
  for (int i = 0; i < kN; i += 2) {
    const uint32_t pair =
        CvtPairToFp8<F>(__fdiv_rn(x[i], scale_inv), __fdiv_rn(x[i + 1], scale_inv));
    words[i / 4] |= pair << (16 * ((i / 2) % 2));
  }
}

}  // namespace fp8::kernels::cuda
