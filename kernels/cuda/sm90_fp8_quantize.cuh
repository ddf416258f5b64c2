// Kernels: 1x128 (activations) and 128x128 (weights) FP8 quantization on sm_90.
// Launchers: sm90_fp8_quantize.cu; public API: sm90_fp8_quantize.h.
//
// Both kernels are memory-bound (3 bytes moved per bf16 element, ~0.1 flop per byte), so they
// are built for bandwidth: every thread issues 16-byte streaming loads, several tiles' loads are
// in flight before the first one is used, and stores are 4/8-byte wide and coalesced.
#pragma once

#include "kernels/cuda/sm90_fp8_common.cuh"

namespace fp8::kernels::cuda {

constexpr int kSm90QuantThreads = 256;

// ---- 1x128 ----------------------------------------------------------------------------------
// A "team" of 128/kElems consecutive lanes (16 for bf16, 32 for fp32) owns one 1x128 group: one
// 16-byte load per lane, amax by shuffles inside the team. Each thread handles kUnroll groups,
// all loads issued first. Groups are numbered so that consecutive teams write consecutive
// scale_inv entries: along the row for the row-major layout, down the rows for the MN-major
// (cuBLASLt VEC128) layout.
template <typename T, Fp8Format F, int kUnroll>
__global__ void __launch_bounds__(kSm90QuantThreads)
    Sm90Fp8Quantize1x128Kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                               uint32_t groups_per_row, uint32_t num_groups, bool mn_major,
                               bool ue8m0, uint8_t* __restrict__ q,
                               float* __restrict__ scale_inv) {
  constexpr int kElems = InVec<T>::kElems;
  constexpr int kTeam = 128 / kElems;
  constexpr int kTeamsPerBlock = kSm90QuantThreads / kTeam;
  const int lane_in_team = threadIdx.x % kTeam;
  const uint32_t team = threadIdx.x / kTeam;

  uint4 raw[kUnroll];
  int64_t offset[kUnroll];
  int64_t scale_index[kUnroll];
  bool valid[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t g = (blockIdx.x * kUnroll + u) * kTeamsPerBlock + team;
    uint32_t r, gc;
    if (mn_major) {
      gc = g / static_cast<uint32_t>(rows);
      r = g - gc * static_cast<uint32_t>(rows);
    } else {
      r = g / groups_per_row;
      gc = g - r * groups_per_row;
    }
    const int64_t col = static_cast<int64_t>(gc) * 128 + lane_in_team * kElems;
    valid[u] = g < num_groups && col < cols;
    offset[u] = static_cast<int64_t>(r) * cols + col;
    scale_index[u] = mn_major ? static_cast<int64_t>(gc) * rows + r
                              : static_cast<int64_t>(r) * groups_per_row + gc;
    raw[u] = valid[u] ? LoadStreaming(x + offset[u]) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float v[kElems];
    InVec<T>::Unpack(raw[u], v);
    uint32_t amax = 0;
#pragma unroll
    for (int i = 0; i < kElems; ++i) amax = max(amax, AbsBits(v[i]));
    amax = TeamMaxBits<kTeam>(amax);
    const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
    uint32_t words[kElems / 4];
    QuantizeToWords<F, kElems>(v, s, words);
    const uint32_t g = (blockIdx.x * kUnroll + u) * kTeamsPerBlock + team;
    if (valid[u]) {
      if constexpr (kElems == 8) {
        *reinterpret_cast<uint2*>(q + offset[u]) = make_uint2(words[0], words[1]);
      } else {
        *reinterpret_cast<uint32_t*>(q + offset[u]) = words[0];
      }
    }
    if (lane_in_team == 0 && g < num_groups) scale_inv[scale_index[u]] = s;
  }
}

// ---- 128x128 --------------------------------------------------------------------------------
// One CTA per 128x128 block: 256 threads load the whole block into registers (128 bytes each,
// all loads in flight at once), reduce amax across the CTA, then cast from registers.
template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kSm90QuantThreads)
    Sm90Fp8Quantize128x128Kernel(const T* __restrict__ x, int64_t rows, int64_t cols, bool ue8m0,
                                 uint8_t* __restrict__ q, float* __restrict__ scale_inv,
                                 int64_t scale_ld) {
  constexpr int kElems = InVec<T>::kElems;
  constexpr int kThreadsPerRow = 128 / kElems;
  constexpr int kRowsPerPass = kSm90QuantThreads / kThreadsPerRow;
  constexpr int kPasses = 128 / kRowsPerPass;
  __shared__ uint32_t warp_max[kSm90QuantThreads / 32];

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * 128;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 128 + (threadIdx.x % kThreadsPerRow) * kElems;
  const int row_in_pass = threadIdx.x / kThreadsPerRow;

  uint4 raw[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t r = row0 + p * kRowsPerPass + row_in_pass;
    raw[p] = (r < rows && col < cols) ? LoadStreaming(x + r * cols + col) : make_uint4(0, 0, 0, 0);
  }
  uint32_t amax = 0;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    float v[kElems];
    InVec<T>::Unpack(raw[p], v);
#pragma unroll
    for (int i = 0; i < kElems; ++i) amax = max(amax, AbsBits(v[i]));
  }
  amax = TeamMaxBits<32>(amax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kSm90QuantThreads / 32; ++w) amax = max(amax, warp_max[w]);
  const float s = ScaleInvFromAmaxBits<F>(amax, ue8m0);
  if (threadIdx.x == 0) scale_inv[static_cast<int64_t>(blockIdx.y) * scale_ld + blockIdx.x] = s;

#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t r = row0 + p * kRowsPerPass + row_in_pass;
    float v[kElems];
    InVec<T>::Unpack(raw[p], v);
    uint32_t words[kElems / 4];
    QuantizeToWords<F, kElems>(v, s, words);
    if (r < rows && col < cols) {
      if constexpr (kElems == 8) {
        *reinterpret_cast<uint2*>(q + r * cols + col) = make_uint2(words[0], words[1]);
      } else {
        *reinterpret_cast<uint32_t*>(q + r * cols + col) = words[0];
      }
    }
  }
}

}  // namespace fp8::kernels::cuda
