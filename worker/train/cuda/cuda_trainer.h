// SPDX-License-Identifier: Apache-2.0
// `fp8-worker train` on the GPU: the training loop of worker/train/trainer.h over a CUDA
// TrainBackend (CudaGptModel or CudaLlamaModel, FP32 AdamW on the device, NCCL data parallelism).
#pragma once

#include "worker/common/events.h"
#include "worker/train/spec.h"
#include "worker/train/trainer.h"

namespace fp8::train::cuda {

// True when a CUDA device is visible (backend: auto picks CUDA then).
bool CudaDeviceAvailable();

TrainResult RunCudaTraining(const TrainSpec& spec, const TrainOptions& options, const Distributed& dist,
                            fp8::worker::EventWriter& events);

// The dense BF16 peak of an H100/H200 SXM, what MFU is reported against (TrainFlopsPerToken).
constexpr double kH200DenseBf16Flops = 989e12;

}  // namespace fp8::train::cuda
