// SPDX-License-Identifier: Apache-2.0
// Round-trip statistics of a 128x128-block quantization on the GPU, for the calibration job's
// CUDA backend: the sums the CPU path computes (tensor_convert.h's RoundTripSums), here from the
// source, the FP8 bytes and the scales already on the device (double sums per thread; the CPU
// path sums floats per 128 elements, so the two agree to rounding, the counts exactly).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/fp8_format.h"

namespace fp8::calibrate {

// One CUDA block's share; the host adds them up in order (deterministic, no float atomics).
struct RoundTripPartial {
  double sum_x2, sum_e2;
  unsigned long long saturated, flushed, nonzero;
  unsigned int amax_bits;  // max |x| as FP32 bits
  unsigned int pad;
};

// Number of partials RoundTripStats128x128 writes for `rows` rows (at most this many).
int RoundTripPartials(int64_t rows);

// x: [rows, ld] (bf16 or f32 per `bf16`), q: [rows, ld] FP8, scale_inv: [ceil(rows/128), tiles];
// only the first `cols` columns count (the rest is padding). `clip`: ClipThreshold(fmt).
Status RoundTripStats128x128(const void* x, bool bf16, const uint8_t* q, const float* scale_inv, int64_t rows,
                             int64_t cols, int64_t ld, int64_t tiles, kernels::Fp8Format fmt, float clip,
                             RoundTripPartial* partials, cudaStream_t stream);

}  // namespace fp8::calibrate
