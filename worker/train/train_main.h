// SPDX-License-Identifier: Apache-2.0
// `fp8-worker train --spec FILE [--resume-from DIR]`. argv starts after the subcommand. Return the process exit code (sysexits).
#pragma once

#include <string>

#include "worker/common/events.h"
#include "worker/train/spec.h"
#include "worker/train/trainer.h"

namespace fp8::train {

// The CUDA trainer's entry points (worker/train/cuda, built only with FP8D_CUDA), handed in by
// main.cc so that fp8_train itself never links CUDA. Null members: not built.
struct CudaTrainerEntryPoints {
  bool (*available)() = nullptr;
  TrainResult (*run)(const TrainSpec& spec, const TrainOptions& options, const Distributed& dist,
                     worker::EventWriter& events) = nullptr;
};

// backend auto: CUDA when built and a device is visible, else CPU; cuda: CUDA or an error.
int TrainMain(int argc, char** argv, const CudaTrainerEntryPoints& cuda = {});
}  // namespace fp8::train
