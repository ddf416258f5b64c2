// SPDX-License-Identifier: Apache-2.0
// PrepareNewJob (daemon/core/new_job.h): the one preparation of a new job.
#include "daemon/core/new_job.h"

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

namespace fp8d::core {
namespace {

using fp8d::v1::Job;
using google::protobuf::util::TimeUtil;

constexpr int64_t kNowMs = 1764600000250;

Job TrainJob() {
  Job job;
  auto* t = job.mutable_train();
  t->mutable_model()->set_preset("tiny");
  t->mutable_data()->set_train("/data/*.bin");
  t->mutable_precision()->set_recipe("fp8-blockwise");
  t->set_output_dir("out/run1");
  job.set_request_id("req-1");
  job.set_owner("alice");
  return job;
}

TEST(PrepareNewJob, ClearsOutputOnlyFieldsAndFillsTheEffectiveJob) {
  Job job = TrainJob();
  job.set_name("jobs/x");
  job.set_state(fp8d::v1::RUNNING);
  job.set_version(7);
  job.set_attempt(3);
  job.set_pending_reason("Resources");
  job.mutable_error()->set_message("old");
  job.add_events()->set_message("old");
  ASSERT_TRUE(PrepareNewJob(&job, "/srv/fp8d", kNowMs).ok());
  EXPECT_EQ(job.name(), "");
  EXPECT_EQ(job.state(), fp8d::v1::QUEUED);
  EXPECT_EQ(job.version(), 1);
  EXPECT_EQ(job.attempt(), 0);
  EXPECT_EQ(job.pending_reason(), "");
  EXPECT_FALSE(job.has_error());
  EXPECT_EQ(job.events_size(), 0);
  EXPECT_EQ(job.kind(), fp8d::v1::TRAIN);
  EXPECT_EQ(job.resources().ranks(), 1);
  EXPECT_EQ(job.owner(), "alice");        // the API's fields are kept
  EXPECT_EQ(job.request_id(), "req-1");
  // The stored spec is the effective one (jobspec's defaults), so GetJob shows what runs.
  EXPECT_EQ(job.train().model().d_model(), 128);
  EXPECT_DOUBLE_EQ(job.train().training().learning_rate(), 1e-3);
  EXPECT_EQ(job.train().output_dir(), "/srv/fp8d/out/run1");  // the worker runs elsewhere
  EXPECT_EQ(job.retry().max_attempts(), 3);
  EXPECT_EQ(TimeUtil::DurationToMilliseconds(job.timeouts().heartbeat_timeout()), 30000);
  EXPECT_EQ(TimeUtil::DurationToMilliseconds(job.timeouts().progress_timeout()), 300000);
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(job.create_time()), kNowMs);
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(job.update_time()), kNowMs);
}

TEST(PrepareNewJob, RanksComeFromNodesTimesRanksPerNode) {
  Job job = TrainJob();
  job.mutable_resources()->set_nodes(2);
  job.mutable_resources()->set_ranks_per_node(3);
  ASSERT_TRUE(PrepareNewJob(&job, "/", kNowMs).ok());
  EXPECT_EQ(job.resources().ranks(), 6);
  Job one_per_node = TrainJob();
  one_per_node.mutable_resources()->set_nodes(4);
  ASSERT_TRUE(PrepareNewJob(&one_per_node, "/", kNowMs).ok());
  EXPECT_EQ(one_per_node.resources().ranks(), 4);
}

TEST(PrepareNewJob, IsIdempotentAndHashesTheEffectiveBody) {
  Job job = TrainJob();
  auto hash = PrepareNewJob(&job, "/srv", kNowMs);
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(hash->size(), 32u);
  // Preparing a prepared job changes nothing.
  Job again = job;
  ASSERT_TRUE(PrepareNewJob(&again, "/srv", kNowMs).ok());
  EXPECT_EQ(again.SerializeAsString(), job.SerializeAsString());
  // The same body sent again hashes the same.
  Job resent = TrainJob();
  EXPECT_EQ(*PrepareNewJob(&resent, "/srv", kNowMs), *hash);

  // Sending a default explicitly is the same body; another value is another body; the time
  // and the daemon's directory are not part of the body.
  Job explicit_default = TrainJob();
  explicit_default.mutable_train()->mutable_model()->set_d_model(128);
  EXPECT_EQ(*PrepareNewJob(&explicit_default, "/elsewhere", kNowMs + 5), *hash);
  Job other = TrainJob();
  other.mutable_train()->mutable_model()->set_d_model(64);
  EXPECT_NE(*PrepareNewJob(&other, "/srv", kNowMs), *hash);
  // Map fields hash in key order.
  Job a = TrainJob(), b = TrainJob();
  (*a.mutable_labels())["x"] = "1";
  (*a.mutable_labels())["y"] = "2";
  (*b.mutable_labels())["y"] = "2";
  (*b.mutable_labels())["x"] = "1";
  EXPECT_EQ(*PrepareNewJob(&a, "/", kNowMs), *PrepareNewJob(&b, "/", kNowMs));
}

TEST(PrepareNewJob, NoRequestIdMeansNoHash) {
  Job job = TrainJob();
  job.clear_request_id();
  auto hash = PrepareNewJob(&job, "/", kNowMs);
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(*hash, "");
}

TEST(PrepareNewJob, AJobWithoutASpecIsRefusedNamingTheField) {
  Job job;
  auto hash = PrepareNewJob(&job, "/", kNowMs);
  EXPECT_EQ(hash.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(hash.status().message().rfind("job.spec:", 0), 0u) << hash.status().message();
}

}  // namespace
}  // namespace fp8d::core
