// SPDX-License-Identifier: Apache-2.0
// fp8d's own GPT checkpoints as calibration sees them: the model's shape, its weights on the CPU
// backend (worker/train's GptModel with the bf16 recipe, the trainer's compute), the fixed
// sequences calibration and evaluation run over, and the weights read back from the FP8 output.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "worker/calibrate/model_input.h"
#include "worker/data/shards.h"
#include "worker/train/model.h"

namespace fp8::calibrate {

// Sequences per forward pass.
inline constexpr int kCalibrationBatch = 8;
// Sample streams of data::TokenDataset::Sample: calibration and evaluation draw different
// sequences from the same shards, so the eval loss is not measured on the data the static
// scales were fitted to.
inline constexpr uint64_t kCalibrationSeed = 0x63616c6962ULL;  // "calib"
inline constexpr uint64_t kEvalSeed = 0x6576616cULL;           // "eval"

// The GPT shape: from trainer_state.json next to the weights (spec.model, what fp8d's trainer
// writes into every step-N directory), else from a GPT-2 style config.json (n_layer, n_head,
// n_embd, n_positions, vocab_size). The head count cannot be inferred from tensor shapes, so a
// model with neither is InvalidArgument naming the directory.
StatusOr<train::ModelConfig> GptConfigOf(const ModelInput& in);

// Builds the model and loads every parameter (F32, BF16 or F16) from the input; a missing
// tensor or another shape is InvalidArgument naming the shard and the tensor.
StatusOr<std::unique_ptr<train::GptModel>> LoadGptModel(const ModelInput& in);

// Runs `model` (training = false) over sequences 0 .. num_samples-1 of stream `seed`, in
// batches of kCalibrationBatch; returns the mean cross-entropy per token.
double MeanLoss(train::GptModel& model, const data::TokenDataset& data, uint64_t seed, int num_samples);

// Replaces every linear weight of `model` that the output directory `dir` holds in FP8
// (`weight_map`: tensor → shard, as in the index) by its dequantization float(q)·scale_inv;
// returns how many were replaced.
StatusOr<int> LoadDequantizedWeights(const std::string& dir, const nlohmann::json& weight_map,
                                     train::GptModel* model);

}  // namespace fp8::calibrate
