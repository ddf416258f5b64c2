// SPDX-License-Identifier: Apache-2.0
// Scalar conversions (docs/design.md §6). FP8 encoding shares its code with the quantize loops
// (fp8_encode_inl.h); BF16/FP16 follow cuda_bf16.h / cuda_fp16.h host code so every format
// behaves the same on the CPU reference and the GPU.
#include "kernels/fp8_format.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/fp8_encode_inl.h"

namespace fp8::kernels {
namespace {

constexpr uint32_t kCanonicalNanBits = 0x7FFFFFFFu;

float DecodeExact(uint8_t v, Fp8Format fmt) {
  const int mant_bits = fmt == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = fmt == Fp8Format::kE4M3 ? 7 : 15;
  const bool negative = (v & 0x80u) != 0;
  const int exp_field = (v & 0x7Fu) >> mant_bits;
  const int mant = v & ((1 << mant_bits) - 1);
  if (fmt == Fp8Format::kE4M3 && (v & 0x7Fu) == 0x7Fu) return std::bit_cast<float>(kCanonicalNanBits);
  if (fmt == Fp8Format::kE5M2 && exp_field == 0x1F) {
    if (mant != 0) return std::bit_cast<float>(kCanonicalNanBits);
    return negative ? -INFINITY : INFINITY;
  }
  // Subnormals have exponent 1 - bias and no implicit bit; normals have the implicit bit.
  const float magnitude =
      exp_field == 0
          ? std::ldexp(static_cast<float>(mant), 1 - bias - mant_bits)
          : std::ldexp(static_cast<float>((1 << mant_bits) | mant), exp_field - bias - mant_bits);
  return negative ? -magnitude : magnitude;
}

struct DecodeTables {
  std::array<float, 256> e4m3;
  std::array<float, 256> e5m2;
  DecodeTables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = DecodeExact(static_cast<uint8_t>(i), Fp8Format::kE4M3);
      e5m2[i] = DecodeExact(static_cast<uint8_t>(i), Fp8Format::kE5M2);
    }
  }
};

const DecodeTables& Tables() {
  static const DecodeTables tables;
  return tables;
}

}  // namespace

const char* Fp8FormatName(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

uint8_t FloatToFp8(float x, Fp8Format fmt, Saturation sat) {
  const bool saturate = sat == Saturation::kSatFinite;
  if (fmt == Fp8Format::kE4M3) {
    return saturate ? internal::EncodeFp8<Fp8Format::kE4M3, true>(x)
                    : internal::EncodeFp8<Fp8Format::kE4M3, false>(x);
  }
  return saturate ? internal::EncodeFp8<Fp8Format::kE5M2, true>(x)
                  : internal::EncodeFp8<Fp8Format::kE5M2, false>(x);
}

const float* Fp8DecodeTable(Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? Tables().e4m3.data() : Tables().e5m2.data();
}

float Fp8ToFloat(uint8_t v, Fp8Format fmt) { return Fp8DecodeTable(fmt)[v]; }

uint16_t FloatToBf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  const uint32_t upper = bits >> 16;
  const uint32_t remainder = bits << 16;
  const bool round_up = remainder > 0x80000000u || (remainder == 0x80000000u && (upper & 1u));
  return static_cast<uint16_t>(upper + (round_up ? 1u : 0u));
}

float Bf16ToFloat(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

uint16_t FloatToHalf(float x) {
  // Port of cuda_fp16.hpp's __internal_float2half + RNE step.
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  uint32_t u = bits & 0x7FFFFFFFu;
  const uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t result;
  uint32_t remainder;
  if (u >= 0x7F800000u) {
    remainder = 0;
    result = u == 0x7F800000u ? (sign | 0x7C00u) : 0x7FFFu;
  } else if (u > 0x477FEFFFu) {  // rounds to Inf
    remainder = 0x80000000u;
    result = sign | 0x7BFFu;
  } else if (u >= 0x38800000u) {  // normal
    remainder = u << 19;
    u -= 0x38000000u;
    result = sign | (u >> 13);
  } else if (u < 0x33000001u) {  // rounds to ±0
    remainder = u;
    result = sign;
  } else {  // subnormal
    const uint32_t exponent = u >> 23;
    const uint32_t shift = 0x7Eu - exponent;
    const uint32_t mantissa = (u & 0x7FFFFFu) | 0x800000u;
    remainder = mantissa << (32u - shift);
    result = (sign | (mantissa >> shift)) & 0xFFFFu;
  }
  if (remainder > 0x80000000u || (remainder == 0x80000000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(result);
}

float HalfToFloat(uint16_t h) {
  // Port of cuda_fp16.hpp's __internal_half2float: NaN loses its sign and payload.
  uint32_t sign = (h >> 15) & 1u;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = (h & 0x3FFu) << 13;
  if (exponent == 0x1Fu) {
    sign = mantissa != 0 ? 0u : sign;
    mantissa = mantissa != 0 ? 0x7FFFFFu : 0u;
    exponent = 0xFFu;
  } else if (exponent == 0) {
    if (mantissa != 0) {
      exponent = 0x71u;
      uint32_t msb;
      do {
        msb = mantissa & 0x400000u;
        mantissa <<= 1;
        --exponent;
      } while (msb == 0);
      mantissa &= 0x7FFFFFu;
    }
  } else {
    exponent += 0x70u;
  }
  return std::bit_cast<float>((sign << 31) | (exponent << 23) | mantissa);
}

}  // namespace fp8::kernels
