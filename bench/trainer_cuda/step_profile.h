// SPDX-License-Identifier: Apache-2.0
// bench_trainer_cuda --profile: a training step's device time by operation (OpTimer's totals),
// largest first, with each one's share of the step and totals by kind (GEMMs, FP8 casts, the
// rest), so the table says where the next millisecond is.
#pragma once

#include <vector>

#include "worker/train/cuda/op_timer.h"

namespace fp8::train::cuda {

void PrintStepProfile(const std::vector<OpTimer::Total>& totals, int dropped);

}  // namespace fp8::train::cuda
