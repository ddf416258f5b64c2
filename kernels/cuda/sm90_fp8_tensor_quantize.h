// SPDX-License-Identifier: Apache-2.0
// Per-tensor FP8 cast fused with amax (delayed scaling), sm_90 — the CUDA twin of
// QuantizeTensor / Amax in kernels/quantize.h. Device pointers; `scale_inv` and `amax` are
// single device floats so a training step never synchronizes with the host for them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/fp8_format.h"

namespace fp8::kernels::cuda {

// q[i] = fp8(x[i] / *scale_inv) (saturating, RNE); *amax = max |x[i]| (NaN propagates).
// n ≥ 1, x and q 16-byte aligned.
Status Sm90Fp8QuantizeTensor(const __nv_bfloat16* x, int64_t n, const float* scale_inv,
                             Fp8Format fmt, uint8_t* q, float* amax, cudaStream_t stream);
Status Sm90Fp8QuantizeTensor(const float* x, int64_t n, const float* scale_inv, Fp8Format fmt,
                             uint8_t* q, float* amax, cudaStream_t stream);

// *amax = max |x[i]|.
Status Sm90Amax(const __nv_bfloat16* x, int64_t n, float* amax, cudaStream_t stream);
Status Sm90Amax(const float* x, int64_t n, float* amax, cudaStream_t stream);

}  // namespace fp8::kernels::cuda
