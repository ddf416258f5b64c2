// SPDX-License-Identifier: Apache-2.0
// Checkpoints (docs/design.md §5): <dir>/step-<N>/{model.safetensors, optimizer.safetensors,
// trainer_state.json}, written into a temporary directory, fsynced, renamed into place and the
// parent fsynced, so a checkpoint is either complete or invisible. The newest `keep` are kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/train/causal_lm.h"
#include "worker/train/optimizer.h"

namespace fp8::train {

struct SavedCheckpoint {
  std::string path;      // absolute path of step-N
  std::string checksum;  // hex FNV-1a 64 of model.safetensors
};

// `state` is trainer_state.json (step, data position, RNG, FP8 scaling state, loss history).
StatusOr<SavedCheckpoint> SaveCheckpoint(const std::string& checkpoint_dir, int64_t step,
                                         const CausalLm& model, const AdamW& opt,
                                         const nlohmann::json& state, int keep);

// At start, before any step: creates `checkpoint_dir`, removes temporary directories
// (.step-N.tmp-PID, .step-N.old-PID) left by writers that are gone (a crash mid-write), and
// checks that a file can be created there. INVALID_ARGUMENT when the directory cannot be used
// at all (permission, read-only file system, a file in the way: retrying cannot help),
// UNAVAILABLE for anything that may pass (a full disk).
Status PrepareCheckpointDir(const std::string& checkpoint_dir);

// A step-N directory (has trainer_state.json) or a directory of them (the newest complete one
// wins). NotFound when there is none.
StatusOr<std::string> FindCheckpoint(const std::string& path);

// Loads weights and moments (names and shapes must match the model: DataLoss otherwise) and
// returns trainer_state.json.
StatusOr<nlohmann::json> LoadCheckpoint(const std::string& step_dir, CausalLm* model, AdamW* opt);

// FNV-1a 64 of a file's bytes, as 16 hex digits.
StatusOr<std::string> Fnv1a64File(const std::string& path);

}  // namespace fp8::train
