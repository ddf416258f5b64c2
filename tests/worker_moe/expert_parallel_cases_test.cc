// SPDX-License-Identifier: Apache-2.0
// resources.expert_parallel's bad values (spec_cases.json, "expert_parallel_cases"): each case is
// refused by the validator fp8d runs at create (jobspec::ValidateExpertParallel, naming
// job.resources.expert_parallel) and by the worker's own check of the spec it resolved
// (moe::CheckExpertParallel), with the same words; and every rule has a case.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "jobspec/defaults.h"
#include "jobspec/validate.h"
#include "worker/common/spec_file.h"
#include "worker/train/moe_dispatch.h"
#include "worker/train/spec.h"

namespace fp8::train {
namespace {

struct Case {
  std::string rule, expect;
  nlohmann::json train, resources;
};

std::vector<Case> Cases() {
  std::ifstream in(FP8_SPEC_CASES_JSON);
  const nlohmann::json table = nlohmann::json::parse(in);
  std::vector<Case> out;
  for (const auto& c : table["expert_parallel_cases"]) {
    Case k{c["rule"], c["expect"], table["minimal"]["train"], c["resources"]};
    k.train.merge_patch(c["patch"]);
    out.push_back(std::move(k));
  }
  return out;
}

TEST(ExpertParallelCases, EveryRuleHasACase) {
  std::set<std::string> covered, rules;
  for (const Case& c : Cases()) covered.insert(c.rule);
  for (const std::string& id : jobspec::ExpertParallelRuleIds()) rules.insert(id);
  EXPECT_EQ(covered, rules);
}

TEST(ExpertParallelCases, TheValidatorAndTheWorkerRefuseEachNamingTheField) {
  const auto cases = Cases();
  ASSERT_EQ(cases.size(), 5u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rule + ": " + c.train.dump() + " " + c.resources.dump());
    fp8d::v1::TrainSpec train;
    ASSERT_TRUE(worker::ParseSpecJson(c.train, &train).ok());
    jobspec::ApplyTrainDefaults(&train);
    ASSERT_TRUE(jobspec::ValidateTrainSpec(train, "").ok()) << "the train spec alone must be valid";
    fp8d::v1::Resources resources;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(c.resources.dump(), &resources).ok());
    EXPECT_EQ(jobspec::FirstBrokenExpertParallelRule(train, resources), c.rule);
    const Status st = jobspec::ValidateExpertParallel(train, resources, "job");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message().rfind("job.resources.expert_parallel: ", 0), 0u) << st.message();
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();

    auto parsed = ParseTrainSpec(c.train);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    const Status worker = moe::CheckExpertParallel(*parsed, resources.expert_parallel(), resources.ranks());
    EXPECT_EQ(worker.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(worker.message().rfind("resources.expert_parallel: ", 0), 0u) << worker.message();
    EXPECT_NE(worker.message().find(c.expect), std::string::npos) << worker.message();
  }
}

TEST(ExpertParallelCases, DegreesThatFitPass) {
  fp8d::v1::TrainSpec train;
  ASSERT_TRUE(worker::ParseSpecJson(nlohmann::json{{"model", {{"preset", "moe-tiny"}}},
                                                   {"data", {{"train", "/d/train_*.bin"}}},
                                                   {"output_dir", "/tmp/out"}},
                                    &train)
                  .ok());
  jobspec::ApplyTrainDefaults(&train);
  auto parsed = ParseTrainSpec(train);
  ASSERT_TRUE(parsed.ok());
  for (const auto& [ranks, degree] : {std::pair{1, 0}, {1, 1}, {4, 2}, {4, 4}, {8, 8}, {6, 2}}) {
    fp8d::v1::Resources r;
    r.set_ranks(ranks);
    r.set_expert_parallel(degree);
    EXPECT_TRUE(jobspec::ValidateExpertParallel(train, r, "job").ok()) << ranks << " " << degree;
    EXPECT_TRUE(moe::CheckExpertParallel(*parsed, degree == 0 ? 1 : degree, ranks).ok()) << ranks << " " << degree;
  }
  // A model from init_from is the worker's to check: its experts are not known at create.
  train.clear_model();
  train.set_init_from("/models/qwen3-moe");
  fp8d::v1::Resources r;
  r.set_ranks(4);
  r.set_expert_parallel(4);
  EXPECT_TRUE(jobspec::ValidateExpertParallel(train, r, "job").ok());
}

}  // namespace
}  // namespace fp8::train
