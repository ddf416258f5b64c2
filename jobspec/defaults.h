// SPDX-License-Identifier: Apache-2.0
// The ONE place the defaults of a job spec live. A field left 0, "" or unset means "the
// default" (proto3 cannot tell them apart); ApplyXDefaults writes the default into it, so what
// follows (validation, the worker, GetJob) sees the effective spec. Idempotent, never fails:
// values it does not know (an unknown preset) are left for the validator to refuse.
// Every default is also written in the field's comment in proto/fp8d/v1/job.proto.
#pragma once

#include "fp8d/v1/job.pb.h"

namespace fp8::jobspec {

// Model-level defaults that the worker's model code also uses on its own (worker/train/spec.h).
inline constexpr int kDefaultAmaxHistoryLen = 16;
inline constexpr const char* kDefaultPreset = "tiny";
inline constexpr const char* kDefaultLlamaPreset = "llama-tiny";  // with model.architecture llama
inline constexpr const char* kDefaultRecipe = "bf16";

// Fills training defaults. `model` is left alone with init_from (the shape comes from the
// model it names); otherwise the preset (default tiny, or llama-tiny with architecture llama)
// fills the fields left unset, and the architecture follows the preset's family.
void ApplyTrainDefaults(fp8d::v1::TrainSpec* spec);
void ApplyCalibrateDefaults(fp8d::v1::CalibrateSpec* spec);
// Whichever spec the job has.
void ApplySpecDefaults(fp8d::v1::Job* job);

}  // namespace fp8::jobspec
