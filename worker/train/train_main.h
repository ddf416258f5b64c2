// `fp8-worker train --spec FILE [--resume-from DIR]` and `fp8-worker prepare-data --text FILE
// --out DIR`. argv starts after the subcommand. Return the process exit code (sysexits).
#pragma once

#include <string>

#include "worker/common/events.h"
#include "worker/train/spec.h"
#include "worker/train/trainer.h"

namespace fp8::train {

// The CUDA backend (worker/train/cuda, built only with FP8D_CUDA), handed in by main.cc so that
// fp8_train itself never links CUDA. Null members: not built.
struct CudaBackend {
  bool (*available)() = nullptr;
  TrainResult (*run)(const TrainSpec& spec, const TrainOptions& options, const Distributed& dist,
                     worker::EventWriter& events) = nullptr;
};

// backend auto: CUDA when built and a device is visible, else CPU; cuda: CUDA or an error.
int TrainMain(int argc, char** argv, const CudaBackend& cuda = {});
int PrepareDataMain(int argc, char** argv);
}  // namespace fp8::train
