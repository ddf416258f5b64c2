// SPDX-License-Identifier: Apache-2.0
// FP8 (E4M3fn, E5M2), BF16 and FP16 scalar conversions (docs/design.md §6). CPU reference: the CUDA
// kernels must reproduce these bit for bit. Semantics match cuda_fp8.h's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE | __NV_NOSAT, __NV_E4M3 | __NV_E5M2).
#pragma once

#include <cstdint>

namespace fp8::kernels {

enum class Fp8Format : uint8_t {
  kE4M3,  // `fn`: max 448, no infinities, NaN = 0x7F / 0xFF
  kE5M2,  // max 57344, has infinities
};

enum class Saturation : uint8_t {
  kSatFinite,  // out-of-range finite values (and ±Inf) clamp to ±max finite
  kNoSat,      // out of range → Inf (E5M2) or NaN (E4M3); like __NV_NOSAT
};

constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;
constexpr float Fp8Max(Fp8Format f) { return f == Fp8Format::kE4M3 ? kE4M3Max : kE5M2Max; }
const char* Fp8FormatName(Fp8Format f);

// Round to nearest even. NaN → 0x7F in both formats (CUDA canonicalizes to +NaN); ±Inf →
// ±max with kSatFinite, NaN (E4M3) / ±Inf (E5M2) with kNoSat; -0 keeps its sign.
uint8_t FloatToFp8(float x, Fp8Format fmt, Saturation sat = Saturation::kSatFinite);
// Exact decode (table lookup). NaN codes decode to +NaN 0x7FFFFFFF, like cuda_fp8.h's
// __nv_cvt_fp8_to_halfraw followed by __half2float.
float Fp8ToFloat(uint8_t v, Fp8Format fmt);
// The 256-entry decode table behind Fp8ToFloat, for hot loops: Fp8DecodeTable(f)[byte].
const float* Fp8DecodeTable(Fp8Format fmt);

// BF16: round to nearest even; any NaN becomes 0x7FFF (as cuda_bf16.h's host __float2bfloat16).
uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t v);

// IEEE binary16, used by the exhaustive tests (every fp16 value) and by readers of F16 tensors.
// RNE, overflow → ±Inf, NaN → 0x7FFF; HalfToFloat maps NaN to 0x7FFFFFFF (cuda_fp16.h host).
uint16_t FloatToHalf(float x);
float HalfToFloat(uint16_t v);

}  // namespace fp8::kernels
