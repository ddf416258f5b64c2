// SPDX-License-Identifier: Apache-2.0
// The training loop (docs/design.md §4), once for every backend (train_backend.h): data-parallel,
// events on an EventWriter, checkpoints on rank 0, SIGTERM handled at step boundaries. A run is
// a pure function of the spec (and the checkpoint it resumed from): batches come from (seed,
// global sample index), reductions run in a fixed order, so a resumed run repeats the
// uninterrupted one bit for bit.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/common/events.h"
#include "worker/train/collective.h"
#include "worker/train/spec.h"
#include "worker/train/train_backend.h"

namespace fp8::train {

// The evaluation set: sequences 0 .. kEvalSequences-1 of the val shards' sample stream
// seed ^ kEvalStream (`fp8-worker evaluate --data` measures the same loss).
inline constexpr uint64_t kEvalStream = 0xe7a1e7a1e7a1ULL;
inline constexpr int kEvalSequences = 32;

struct TrainOptions {
  std::string checkpoint_dir;   // default <output_dir>/checkpoints
  std::string resume_from;      // a step-N dir or a checkpoints dir; empty: fresh start
  int heartbeat_ms = 2000;      // 0: no heartbeat thread
  // Tests: behave as if SIGTERM arrived right after this step completed (0: never).
  int64_t stop_after_step = 0;
  bool tty_progress = false;    // a live progress line on stderr
  // resources.expert_parallel (FP8D_EXPERT_PARALLEL): ranks per group that share out the experts
  // (moe_dispatch.h); 1: every rank computes every expert.
  int expert_parallel = 1;
};

// This process's place among the data-parallel ranks (FP8D_RANK, FP8D_WORLD_SIZE) and where
// they meet (FP8D_RENDEZVOUS_DIR: rank 0 publishes the Gloo or NCCL id there).
struct Distributed {
  int rank = 0, world_size = 1;
  std::string rendezvous_dir;
  std::chrono::milliseconds timeout{300000};
};

struct TrainResult {
  int exit_code = 0;
  int64_t start_step = 0, steps_done = 0;
  std::vector<double> losses;  // per step run in this process, in order
  double eval_loss = -1;       // last evaluation (-1: none)
  bool interrupted = false;
  std::string last_checkpoint;
};

// Makes the backend for the spec as resolved (the model shape taken from init_from or from the
// checkpoint a retry resumes).
using BackendFactory = std::function<std::unique_ptr<TrainBackend>(const TrainSpec& resolved)>;

TrainResult RunTraining(const TrainSpec& spec, const TrainOptions& options, const BackendFactory& backend,
                        fp8::worker::EventWriter& events);
// On the CPU backend over `collective` (cpu_backend.cc).
TrainResult RunTraining(const TrainSpec& spec, const TrainOptions& options, Collective& collective,
                        fp8::worker::EventWriter& events);

// Training FLOPs per token, the nanoGPT/PaLM count: 6·N (every parameter in a multiply-add,
// forward + backward) + 12·L·A·T (attention scores and values, forward + backward, causal
// mask not discounted; A = n_head·head_dim, which is C but for models like Qwen3-0.6B). An
// untied Llama's input embedding is a lookup, not a multiply: it is left out of N (a tied one
// counts once, as the head). MFU = FLOPs/s over the backend's dense peak.
double TrainFlopsPerToken(const ModelConfig& m, int64_t num_params);

// FNV-1a 64 (hex) of the delayed-scaling state as the checkpoint stores it. The `done` event of
// an fp8-tensorwise run carries it (`fp8_scaling_digest`), so it shows that data-parallel ranks
// ended with one and the same scaling state.
std::string ScalingStateDigest(const nlohmann::json& precision_state);

}  // namespace fp8::train
