// SPDX-License-Identifier: Apache-2.0
// Kernels: per-tensor FP8 cast with a given scale_inv, fused with amax(|x|) of the input (what
// delayed scaling needs: the cast uses the scale from history, the amax feeds the history).
// Launchers: sm90_fp8_tensor_quantize.cu; API: sm90_fp8_tensor_quantize.h.
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90TensorThreads = 256;
constexpr int kSm90TensorUnroll = 4;

// kCast = false computes only the amax. amax_bits must be zeroed before the launch; blocks
// combine with atomicMax on the bit pattern (non-negative floats order like integers, NaN wins).
template <typename T, Fp8Format F, bool kCast>
__global__ void __launch_bounds__(kSm90TensorThreads)
    Sm90Fp8QuantizeTensorKernel(const T* __restrict__ x, int64_t n,
                                const float* __restrict__ scale_inv, uint8_t* __restrict__ q,
                                unsigned int* __restrict__ amax_bits) {
  constexpr int kElems = InVec<T>::kElems;
  __shared__ uint32_t warp_max[kSm90TensorThreads / 32];
  const int64_t n_vec = n / kElems;
  const float s = kCast ? *scale_inv : 1.0f;
  uint32_t amax = 0;

  uint4 raw[kSm90TensorUnroll];
  int64_t vi[kSm90TensorUnroll];
#pragma unroll
  for (int u = 0; u < kSm90TensorUnroll; ++u) {
    vi[u] = (static_cast<int64_t>(blockIdx.x) * kSm90TensorUnroll + u) * kSm90TensorThreads +
            threadIdx.x;
    raw[u] = vi[u] < n_vec ? LoadStreaming(x + vi[u] * kElems) : make_uint4(0, 0, 0, 0);
  }
  // One scale for everything: divide all kUnroll·kElems values behind a single range check.
  float v[kSm90TensorUnroll * kElems];
#pragma unroll
  for (int u = 0; u < kSm90TensorUnroll; ++u) {
    float part[kElems];
    InVec<T>::Unpack(raw[u], part);
#pragma unroll
    for (int i = 0; i < kElems; ++i) {
      v[u * kElems + i] = part[i];
      amax = max(amax, AbsBits(part[i]));
    }
  }
  if constexpr (kCast) {
    uint32_t words[kSm90TensorUnroll * kElems / 4];
    QuantizeToWords<F, kSm90TensorUnroll * kElems, /*kScaleFromTheseValues=*/false>(v, s, words);
#pragma unroll
    for (int u = 0; u < kSm90TensorUnroll; ++u) {
      if (vi[u] < n_vec) {
        if constexpr (kElems == 8) {
          *reinterpret_cast<uint2*>(q + vi[u] * kElems) = make_uint2(words[2 * u], words[2 * u + 1]);
        } else {
          *reinterpret_cast<uint32_t*>(q + vi[u] * kElems) = words[u];
        }
      }
    }
  }
  // The ragged tail (n % kElems elements) goes to the first threads of block 0.
  if (blockIdx.x == 0 && threadIdx.x < n - n_vec * kElems) {
    const int64_t i = n_vec * kElems + threadIdx.x;
    const float v = static_cast<float>(x[i]);
    amax = max(amax, AbsBits(v));
    if constexpr (kCast) q[i] = static_cast<uint8_t>(CvtPairToFp8<F>(__fdiv_rn(v, s), 0.0f) & 0xFF);
  }

  amax = TeamMaxBits<32>(amax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kSm90TensorThreads / 32; ++w) amax = max(amax, warp_max[w]);
    atomicMax(amax_bits, amax);
  }
}

}  // namespace fp8::kernels::cuda
