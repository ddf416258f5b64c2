// SPDX-License-Identifier: Apache-2.0
// depends_on through the real fp8d: the owner rule and bad entries at create (named errors,
// nothing stored), a dependent of a failed job ending DEPENDENCY_FAILED, and a pipeline of the
// real fp8-worker: a calibrate job that depends on a train job with `export: hf` runs after it
// and reads its export.
#include <filesystem>
#include <fstream>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "daemon/api/auth_policy.h"
#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

namespace fs = std::filesystem;
using fp8::StatusCode;
using fp8d::v1::Job;

class DependenciesItest : public DaemonTest {
 protected:
  fp8d::client::JobClient WithToken(const std::string& token) {
    fp8d::client::ConnectionOptions options;
    options.address = daemon_->address();
    options.token = token;
    return fp8d::client::JobClient(options);
  }
  int64_t StoredJobs() {
    fp8d::v1::ListJobsRequest list;
    list.set_page_size(1000);
    auto page = client().ListJobs(list);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    return page.ok() ? page->jobs_size() : -1;
  }
};

TEST_F(DependenciesItest, OtherOwnersJobsAndBadEntriesAreRefusedNamingTheField) {
  const std::string tokens = tmp_.path() + "/tokens";
  std::ofstream(tokens) << fp8d::api::Sha256Hex("tok-alice") << " alice submitter\n"
                        << fp8d::api::Sha256Hex("tok-bob") << " bob submitter\n"
                        << fp8d::api::Sha256Hex("tok-ops") << " ops admin\n";
  DaemonOptions options;
  options.extra_args = {"--auth-tokens", tokens};
  StartDaemon(options);
  fp8d::client::JobClient alice = WithToken("tok-alice");
  fp8d::client::JobClient bob = WithToken("tok-bob");
  fp8d::client::JobClient ops = WithToken("tok-ops");
  auto a = alice.CreateJob(TestTrainJob(Out("a"), 3));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int64_t stored = StoredJobs();

  struct Case {
    std::vector<std::string> deps;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{a->name()}, "job.depends_on[0]: " + a->name() + " is owned by alice; only its owner or an admin may depend on it"},
           {{"jobs/"}, "job.depends_on[0]: must have the form jobs/<id>"},
           {{"jobs/9999"}, "job.depends_on[0]: jobs/9999 does not exist"},
       }) {
    Job job = TestTrainJob(Out("b"), 3);
    for (const std::string& d : c.deps) job.add_depends_on(d);
    auto refused = bob.CreateJob(job);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
    EXPECT_EQ(refused.status().message(), c.error);
  }
  EXPECT_EQ(StoredJobs(), stored) << "nothing stored on refusal";

  // Its owner and an admin may.
  for (fp8d::client::JobClient* who : {&alice, &ops}) {
    Job job = TestTrainJob(Out(who == &alice ? "by-alice" : "by-ops"), 3);
    job.add_depends_on(a->name());
    auto created = who->CreateJob(job);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    auto done = WaitTerminal(client(), created->name());
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->state(), fp8d::v1::SUCCEEDED) << done->error().message();
  }
}

TEST_F(DependenciesItest, DependentOfAFailedJobEndsDependencyFailed) {
  StartDaemon();
  Job failing = TestTrainJob(Out("fails"), 10);
  (*failing.mutable_env())["FP8_TEST_MODE"] = "exit_code";  // 64: INVALID_SPEC, not retried
  (*failing.mutable_env())["FP8_TEST_CRASH_STEP"] = "3";
  auto a = client().CreateJob(failing);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Job dependent = TestTrainJob(Out("dependent"), 3);
  dependent.add_depends_on(a->name());
  auto b = client().CreateJob(dependent);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto done = WaitTerminal(client(), b->name());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->state(), fp8d::v1::FAILED);
  EXPECT_EQ(done->error().failure_class(), fp8d::v1::DEPENDENCY_FAILED);
  EXPECT_EQ(done->error().message(), "dependency " + a->name() + " ended FAILED");
  EXPECT_EQ(done->attempt(), 0);
  EXPECT_EQ(client().GetJob(a->name())->state(), fp8d::v1::FAILED);
}

// The real trainer writes its Hugging Face export; the calibrate job, submitted at the same
// time, waits for it and quantizes what it wrote.
TEST_F(DependenciesItest, RealWorkerPipelineCalibratesTheTrainJobsExport) {
  if (!fs::exists(RealWorkerPath())) GTEST_SKIP() << RealWorkerPath() << " not built";
  const std::string corpus = std::string(FP8D_SOURCE_DIR) + "/data/corpus.txt";
  if (!fs::exists(corpus)) GTEST_SKIP() << corpus << " missing";
  const std::string data = tmp_.path() + "/tokens";
  ProcessResult prep = RunProcess({RealWorkerPath(), "prepare-data", "--text", corpus, "--out", data});
  ASSERT_EQ(prep.exit_code, 0) << prep.err;

  DaemonOptions options;
  options.worker = RealWorkerPath();
  options.cpu_slots = 2;  // room for both: only the dependency keeps calibrate waiting
  StartDaemon(options);
  Job train = TestTrainJob(Out("train"), 10);
  train.mutable_train()->mutable_data()->set_train(data + "/train_*.bin");
  train.mutable_train()->mutable_training()->set_export_("hf");
  auto t = client().CreateJob(train);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Job calibrate;
  calibrate.set_display_name("calibrate");
  calibrate.mutable_calibrate()->set_input(Out("train") + "/hf");
  calibrate.mutable_calibrate()->set_output_dir(Out("fp8"));
  calibrate.mutable_calibrate()->set_backend("cpu");
  calibrate.add_depends_on(t->name());
  auto c = client().CreateJob(calibrate);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto waiting = client().GetJob(c->name());
  ASSERT_TRUE(waiting.ok());
  if (waiting->state() == fp8d::v1::QUEUED) {
    EXPECT_EQ(waiting->pending_reason(), "waiting for " + t->name());
  }

  auto trained = WaitTerminal(client(), t->name(), std::chrono::seconds(600));
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  ASSERT_EQ(trained->state(), fp8d::v1::SUCCEEDED) << trained->error().message();
  auto calibrated = WaitTerminal(client(), c->name(), std::chrono::seconds(600));
  ASSERT_TRUE(calibrated.ok()) << calibrated.status().ToString();
  ASSERT_EQ(calibrated->state(), fp8d::v1::SUCCEEDED) << calibrated->error().message();
  using google::protobuf::util::TimeUtil;
  EXPECT_GE(TimeUtil::TimestampToMilliseconds(calibrated->start_time()),
            TimeUtil::TimestampToMilliseconds(trained->end_time()))
      << "calibrate started only after train ended";
  bool wrote_weights = false;
  for (const auto& entry : fs::directory_iterator(Out("fp8"))) {
    wrote_weights = wrote_weights || entry.path().extension() == ".safetensors";
  }
  EXPECT_TRUE(wrote_weights) << "the calibrated export is in " << Out("fp8");
}

}  // namespace
}  // namespace fp8d::itest
