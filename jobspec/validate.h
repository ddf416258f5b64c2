// SPDX-License-Identifier: Apache-2.0
// The ONE validator per job kind, called by the API at create (daemon/api/validation.cc, prefix
// "job.train" / "job.calibrate") and by fp8-worker on spec.json (prefix ""), so the daemon
// refuses at create everything the worker would refuse. Call it on a spec that went through
// ApplyXDefaults (jobspec/defaults.h): it checks effective values, e.g. a learning_rate left 0
// is the default 1e-3, but -1 is refused.
//
// Each check is a named rule; the error is INVALID_ARGUMENT whose message starts with the full
// field path: "job.train.training.learning_rate: must be in (0, 10]". Checks that need the
// filesystem are not here: the path rule is paths.h's (run by fp8d at create with the owner's
// rights, and by the worker before it opens anything), fp8d checks that init_from names a model
// directory (daemon/api/job_isolation.cc); the worker checks that data globs match shards and
// that the input/checkpoint can be read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8::jobspec {

inline constexpr size_t kMaxPathLength = 4096;

fp8::Status ValidateTrainSpec(const fp8d::v1::TrainSpec& spec, std::string_view prefix);
fp8::Status ValidateCalibrateSpec(const fp8d::v1::CalibrateSpec& spec, std::string_view prefix);
// resources.expert_parallel against the train spec it runs and the ranks the job asks for (both
// defaulted); prefix "job" names "job.resources.expert_parallel".
fp8::Status ValidateExpertParallel(const fp8d::v1::TrainSpec& train, const fp8d::v1::Resources& resources,
                                   std::string_view prefix);

// For the shared case table's coverage test (tests/spec_cases): every rule's id, and the id of
// the first rule a spec breaks ("" when it breaks none).
std::vector<std::string> TrainRuleIds();
std::vector<std::string> CalibrateRuleIds();
std::string FirstBrokenTrainRule(const fp8d::v1::TrainSpec& spec);
std::string FirstBrokenCalibrateRule(const fp8d::v1::CalibrateSpec& spec);
// The same for the expert-parallel rules (spec_cases.json's "expert_parallel_cases").
std::vector<std::string> ExpertParallelRuleIds();
std::string FirstBrokenExpertParallelRule(const fp8d::v1::TrainSpec& train, const fp8d::v1::Resources& resources);

}  // namespace fp8::jobspec
