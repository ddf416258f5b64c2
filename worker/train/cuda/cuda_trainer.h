// `fp8-worker train` on the GPU: the loop of worker/train/trainer.cc (same spec, data sampler,
// checkpoints, events, exit codes, resume semantics) around CudaGptModel, with FP32 AdamW on
// the device and NCCL data parallelism. Checkpoints go through the CPU trainer's writer: the
// device weights and moments are copied into a host GptModel/AdamW of the same layout, so a
// CUDA checkpoint resumes on the CPU backend and vice versa.
#pragma once

#include <chrono>
#include <string>

#include "worker/common/events.h"
#include "worker/train/spec.h"
#include "worker/train/trainer.h"

namespace fp8::train::cuda {

struct CudaDistributed {
  int rank = 0, world_size = 1;
  std::string rendezvous_dir;  // FP8D_RENDEZVOUS_DIR: where rank 0 publishes the NCCL id
  std::chrono::milliseconds timeout{300000};
};

// True when a CUDA device is visible (backend: auto picks CUDA then).
bool CudaDeviceAvailable();

TrainResult RunCudaTraining(const TrainSpec& spec, const TrainOptions& options,
                            const CudaDistributed& dist, fp8::worker::EventWriter& events);

// Training FLOPs per token, the nanoGPT/PaLM count: 6·N (every parameter in a multiply-add,
// forward + backward) + 12·L·C·T (attention scores and values, forward + backward, causal
// mask not discounted). MFU = FLOPs/s over the dense BF16 peak of an H100/H200 SXM.
double TrainFlopsPerToken(const ModelConfig& m, int64_t num_params);
constexpr double kH200DenseBf16Flops = 989e12;

}  // namespace fp8::train::cuda
