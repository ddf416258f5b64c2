// SPDX-License-Identifier: Apache-2.0
// bench_trainer_cuda --profile, Llama shapes: each fp8-blockwise fusion of the Llama step timed
// against the unfused passes it replaced (CUDA events, mean of several launches after a warm-up),
// at the model's [n, d_model] and [n, intermediate] sizes, with the bytes each side moves and
// the bandwidth that makes.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace fp8::train::cuda {

Status PrintLlamaFusionTimes(int64_t n, int64_t c, int64_t intermediate);

}  // namespace fp8::train::cuda
