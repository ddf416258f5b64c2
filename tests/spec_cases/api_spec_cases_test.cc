// SPDX-License-Identifier: Apache-2.0
// The API side of the shared case table: every case, sent through CreateJob on a real fp8d, is
// refused with INVALID_ARGUMENT naming job.<kind>.<field> — so nothing the worker would refuse
// (exit 64) is accepted at create. A spec left to its defaults comes back filled in.
#include <fstream>

#include <google/protobuf/util/json_util.h>

#include <gtest/gtest.h>

#include "tests/integration/daemon_test.h"
#include "tests/spec_cases/spec_cases.h"

namespace fp8d::itest {
namespace {

using fp8::spec_cases::SpecCase;

fp8d::v1::Job JobOf(const std::string& kind, const nlohmann::json& spec) {
  fp8d::v1::Job job;
  const nlohmann::json body = {{kind, spec}, {"resources", {{"ranks", 1}}}};
  const auto st = google::protobuf::util::JsonStringToMessage(body.dump(), &job);
  EXPECT_TRUE(st.ok()) << st.ToString() << " " << body.dump();
  return job;
}

class ApiSpecCasesTest : public DaemonTest {};

TEST_F(ApiSpecCasesTest, CreateJobRefusesEveryCaseNamingTheField) {
  StartDaemon();
  const auto cases = fp8::spec_cases::Load();
  ASSERT_GT(cases.size(), 40u);
  for (const SpecCase& c : cases) {
    SCOPED_TRACE(c.kind + " " + c.rule + ": " + c.spec.dump());
    auto created = client().CreateJob(JobOf(c.kind, c.spec));
    ASSERT_FALSE(created.ok()) << created->name();
    EXPECT_EQ(created.status().code(), fp8::StatusCode::kInvalidArgument) << created.status().ToString();
    const std::string prefix = "job." + c.kind + "." + c.field + ": ";
    EXPECT_EQ(created.status().message().rfind(prefix, 0), 0u) << created.status().message();
    EXPECT_NE(created.status().message().find(c.expect), std::string::npos) << created.status().message();
  }
  auto listed = client().ListJobs(fp8d::v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);
}

// resources.expert_parallel's cases (spec_cases.json "expert_parallel_cases"): the same refusal
// at create, naming job.resources.expert_parallel, and nothing stored.
TEST_F(ApiSpecCasesTest, CreateJobRefusesEveryExpertParallelCase) {
  StartDaemon();
  std::ifstream in(FP8_SPEC_CASES_JSON);
  const nlohmann::json table = nlohmann::json::parse(in);
  ASSERT_GE(table["expert_parallel_cases"].size(), 5u);
  for (const auto& c : table["expert_parallel_cases"]) {
    SCOPED_TRACE(c.dump());
    nlohmann::json train = table["minimal"]["train"];
    train.merge_patch(c["patch"]);
    train["output_dir"] = Out("ep");
    fp8d::v1::Job job;
    const nlohmann::json body = {{"train", train}, {"resources", c["resources"]}};
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(body.dump(), &job).ok()) << body.dump();
    auto created = client().CreateJob(job);
    ASSERT_FALSE(created.ok()) << created->name();
    EXPECT_EQ(created.status().code(), fp8::StatusCode::kInvalidArgument) << created.status().ToString();
    EXPECT_EQ(created.status().message().rfind("job.resources.expert_parallel: ", 0), 0u)
        << created.status().message();
    EXPECT_NE(created.status().message().find(c["expect"].get<std::string>()), std::string::npos)
        << created.status().message();
  }
  auto listed = client().ListJobs(fp8d::v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);
}

TEST_F(ApiSpecCasesTest, GetJobShowsTheEffectiveSpec) {
  StartDaemon();
  nlohmann::json spec = fp8::spec_cases::Minimal("train");
  spec["output_dir"] = Out("effective");
  spec["training"] = {{"max_steps", 2}};
  auto created = client().CreateJob(JobOf("train", spec));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto got = client().GetJob(created->name(), fp8d::v1::JOB_VIEW_BASIC);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& t = got->train();
  EXPECT_EQ(t.precision().recipe(), "bf16");
  EXPECT_EQ(t.model().preset(), "tiny");
  EXPECT_EQ(t.model().d_model(), 128);
  EXPECT_EQ(t.training().max_steps(), 2);
  EXPECT_DOUBLE_EQ(t.training().learning_rate(), 1e-3);
  EXPECT_EQ(t.training().lr_scheduler_type(), "cosine");
  EXPECT_EQ(t.backend(), "auto");
}

}  // namespace
}  // namespace fp8d::itest
