// SPDX-License-Identifier: Apache-2.0
// The AdamW update of one parameter, shared by the plain step (train_kernels.cu) and the step
// that also casts the updated weights (adamw_cast.cu), so both compute the same bits.
#pragma once

#include "worker/train/cuda/train_kernels.h"

namespace fp8::train::cuda {

__device__ __forceinline__ void AdamWOne(float& p, float g, float& m, float& v, bool decay, const AdamWArgs& a) {
  const float gi = g * a.grad_scale;
  const float mi = a.beta1 * m + (1.0f - a.beta1) * gi;
  const float vi = a.beta2 * v + (1.0f - a.beta2) * gi * gi;
  m = mi;
  v = vi;
  const float mhat = mi / a.bias_correction1, vhat = vi / a.bias_correction2;
  float pi = p;
  if (decay) pi -= a.lr * a.weight_decay * pi;
  p = pi - a.lr * mhat / (sqrtf(vhat) + a.eps);
}

}  // namespace fp8::train::cuda
