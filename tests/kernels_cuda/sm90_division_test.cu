// SPDX-License-Identifier: Apache-2.0
// The quantization kernels divide by the tile scale with the body of nvcc's div.rn.f32, the
// reciprocal hoisted out of the loop and a conservative range check in place of FCHK
// (sm90_fp8_common.cuh). DivideByScale must equal __fdiv_rn bit for bit, and the FP8 cast of
// DivideForFp8Cast must equal the cast of __fdiv_rn — checked here on every one of the 2^32
// float inputs for a set of scales, and on random (x, scale) pairs over the whole float range.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/sm90_fp8_common.cuh"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace fp8::kernels::cuda {
namespace {

struct Mismatch {
  unsigned long long count;
  uint32_t x, s, got, want;
};

__device__ bool SameResult(float a, float b) {
  return __float_as_uint(a) == __float_as_uint(b) || (isnan(a) && isnan(b));
}

__device__ void Record(Mismatch* m, uint32_t x, uint32_t s, float got, float want) {
  if (atomicAdd(&m->count, 1ull) == 0) {
    m->x = x;
    m->s = s;
    m->got = __float_as_uint(got);
    m->want = __float_as_uint(want);
  }
}

// Every float bit pattern x (grid-stride over 2^32) divided by scales[blockIdx.y].
__global__ void AllInputsKernel(const float* scales, Mismatch* m) {
  const float s = scales[blockIdx.y];
  const ScaleDivisor d = MakeScaleDivisor(s);
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const float x[1] = {__uint_as_float(static_cast<uint32_t>(i))};
    float q[1];
    DivideByScale<1>(x, d, q);
    const float want = __fdiv_rn(x[0], s);
    if (!SameResult(q[0], want)) Record(m, static_cast<uint32_t>(i), __float_as_uint(s), q[0], want);
  }
}

// The quantization kernels' cast: FP8(DivideForFp8Cast(x)) must equal FP8(__fdiv_rn(x, s)) for
// both formats, for every x.
__global__ void AllInputsFp8CastKernel(const float* scales, Mismatch* m) {
  const float s = scales[blockIdx.y];
  const ScaleDivisor d = MakeScaleDivisor(s);
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32); i += stride) {
    const float x[1] = {__uint_as_float(static_cast<uint32_t>(i))};
    float q[1];
    DivideForFp8Cast<1>(x, d, AbsBits(x[0]) <= d.hi, q);
    const float want = __fdiv_rn(x[0], s);
    const uint32_t got8 = CvtPairToFp8<Fp8Format::kE4M3>(q[0], 0.0f) | (CvtPairToFp8<Fp8Format::kE5M2>(q[0], 0.0f) << 16);
    const uint32_t want8 = CvtPairToFp8<Fp8Format::kE4M3>(want, 0.0f) | (CvtPairToFp8<Fp8Format::kE5M2>(want, 0.0f) << 16);
    if (got8 != want8) Record(m, static_cast<uint32_t>(i), __float_as_uint(s), q[0], want);
  }
}

// Random pairs, 8 at a time through the tile path (mixed fast/slow decisions per thread).
__global__ void RandomPairsKernel(uint64_t seed, uint64_t n, Mismatch* m) {
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x) {
    uint64_t h = (i + seed) * 0x9E3779B97F4A7C15ull;
    auto next = [&h]() {
      h ^= h >> 31;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 29;
      return static_cast<uint32_t>(h >> 16);
    };
    // Scale: any positive float bit pattern (subnormal, huge, Inf, NaN included) half of the
    // time, otherwise a realistic amax / 448.
    const uint32_t sbits = (next() & 1) ? (next() & 0x7FFFFFFFu) : __float_as_uint(__uint_as_float((next() % 60 + 100) << 23 | (next() & 0x7FFFFF)) / 448.0f);
    const float s = __uint_as_float(sbits);
    float x[8], q[8];
    for (int j = 0; j < 8; ++j) x[j] = __uint_as_float(next());
    DivideByScale<8>(x, MakeScaleDivisor(s), q);
    for (int j = 0; j < 8; ++j) {
      const float want = __fdiv_rn(x[j], s);
      if (!SameResult(q[j], want)) Record(m, __float_as_uint(x[j]), sbits, q[j], want);
    }
  }
}

std::string Describe(const Mismatch& m) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%llu mismatches; first: x=0x%08x s=0x%08x got 0x%08x want 0x%08x",
                m.count, m.x, m.s, m.got, m.want);
  return buf;
}

// Runs an all-2^32-inputs kernel once per scale: the amax floor's scale, typical E4M3/E5M2
// scales, ue8m0 powers of two, the edges of the fast range (2^±60) and beyond it, plus random
// amax / 448.
void RunOverAllInputs(void (*kernel)(const float*, Mismatch*)) {
  std::vector<float> scales = {1e-4f / 448.0f, 1e-4f / 57344.0f, 1.0f / 448.0f, 3.0f / 448.0f,
                               2.5f / 57344.0f, 0x1p-7f, 0x1p-20f, 0x1p10f, 0x1.8p-60f, 0x1.fffffep60f,
                               0x1p61f, 0x1p-61f, 7.0e5f / 448.0f};
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> e(-4.0f, 4.0f);
  for (int i = 0; i < 19; ++i) scales.push_back(std::pow(10.0f, e(rng)) / 448.0f);
  testing::DeviceBuffer<float> d_scales(scales);
  testing::DeviceBuffer<Mismatch> m(1);
  FP8_CHECK_CUDA(cudaMemset(m.get(), 0, sizeof(Mismatch)));
  kernel<<<dim3(2048, scales.size()), 256>>>(d_scales.get(), m.get());
  FP8_CHECK_CUDA(cudaGetLastError());
  const Mismatch got = m.ToHost()[0];
  EXPECT_EQ(got.count, 0u) << Describe(got);
}

TEST(Sm90Division, EqualsFdivRnOnAllFloatInputs) {
  FP8_SKIP_WITHOUT_GPU();
  RunOverAllInputs(AllInputsKernel);
}

TEST(Sm90Division, Fp8CastOfFastQuotientEqualsCastOfFdivRnOnAllFloatInputs) {
  FP8_SKIP_WITHOUT_GPU();
  RunOverAllInputs(AllInputsFp8CastKernel);
}

TEST(Sm90Division, EqualsFdivRnOnRandomPairsOverTheWholeRange) {
  FP8_SKIP_WITHOUT_GPU();
  testing::DeviceBuffer<Mismatch> m(1);
  FP8_CHECK_CUDA(cudaMemset(m.get(), 0, sizeof(Mismatch)));
  RandomPairsKernel<<<4096, 256>>>(testing::TestSeed(), uint64_t{1} << 25, m.get());
  FP8_CHECK_CUDA(cudaGetLastError());
  const Mismatch got = m.ToHost()[0];
  EXPECT_EQ(got.count, 0u) << Describe(got);
}

}  // namespace
}  // namespace fp8::kernels::cuda
