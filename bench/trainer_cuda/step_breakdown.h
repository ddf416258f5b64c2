// SPDX-License-Identifier: Apache-2.0
// bench_trainer_cuda --breakdown: each operation of a bf16 training step timed alone at the
// model's shapes, times how often a step runs it (step_breakdown.cc says how).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "worker/train/spec.h"

namespace fp8::train::cuda {

Status PrintStepBreakdown(const ModelConfig& cfg, int batch, int64_t num_params, double step_ms);

}  // namespace fp8::train::cuda
