// What the FP8 casts of a reported step saw on the device (progress's fp8_amax_max and
// fp8_saturation_fraction, as LinearPrecision counts them on the CPU). Counted only on the steps
// that report, by a read-only pass over each cast's input: it writes nothing the step computes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {

struct DeviceFp8CastStats {
  unsigned long long saturated;  // elements with |x| > fp8_max · scale_inv
  unsigned int amax_bits;        // max |x| as float bits (non-negative floats order as integers)
};

// stats += the cast of x[0..n) scaled by *scale_inv (device; null: a blockwise cast, whose
// per-block scales clip nothing, so only the amax counts).
Status AccumulateFp8CastStats(const float* x, int64_t n, const float* scale_inv, float fp8_max,
                              DeviceFp8CastStats* stats, cudaStream_t s);
Status AccumulateFp8CastStats(const bf16* x, int64_t n, const float* scale_inv, float fp8_max,
                              DeviceFp8CastStats* stats, cudaStream_t s);

}  // namespace fp8::train::cuda
