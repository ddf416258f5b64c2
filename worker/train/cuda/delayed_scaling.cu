// Delayed scaling (kernels/scaling.h) on the device: the amax history and scale update.
// Launchers of train_kernels.h.
#include "worker/train/cuda/train_kernels.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/cuda/train_kernels_common.cuh"

namespace fp8::train::cuda {
namespace {

__global__ void DelayedScalingUpdateKernel(float* state, const float* amax_ptr, DelayedScalingParams p) {
  const float amax = fabsf(*amax_ptr);
  if (!isfinite(amax)) return;
  float* hist = state;
  int count = static_cast<int>(state[p.history_len]);
  if (count < p.history_len) {
    hist[count++] = amax;
  } else {
    for (int i = 1; i < p.history_len; ++i) hist[i - 1] = hist[i];
    hist[p.history_len - 1] = amax;
  }
  state[p.history_len] = static_cast<float>(count);
  float used = hist[count - 1];
  if (!p.most_recent)
    for (int i = 0; i < count; ++i) used = fmaxf(used, hist[i]);
  if (used <= 0.0f) return;
  float a = used;
  if (!(a >= 1e-4f) && !isnan(a)) a = 1e-4f;
  float si = __fdiv_rn(a, p.fp8_max);
  if (p.ue8m0 && isfinite(si)) {
    uint32_t bits = __float_as_uint(si);
    if ((bits & 0x007FFFFFu) != 0) bits = (bits & 0x7F800000u) + 0x00800000u;
    si = __uint_as_float(bits);
  }
  state[p.history_len + 1] = ldexpf(si, p.margin);
}

}  // namespace

Status DelayedScalingUpdate(float* state, const float* amax, DelayedScalingParams p, cudaStream_t s) {
  DelayedScalingUpdateKernel<<<1, 1, 0, s>>>(state, amax, p);
  LAUNCH_CHECK();
}

}  // namespace fp8::train::cuda
