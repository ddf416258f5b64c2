// SPDX-License-Identifier: Apache-2.0
// `fp8ctl usage` against the real fp8d: the sums are the stored attempts' (end − start) × ranks,
// per owner and per queue, and --since leaves out what ended before the window.
#include <thread>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

using google::protobuf::util::TimeUtil;

class UsageItest : public DaemonTest {
 protected:
  ProcessResult Fp8ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {Fp8ctlPath(), "--server", daemon_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }
};

TEST_F(UsageItest, SumsTheStoredAttemptsPerOwnerAndQueue) {
  StartDaemon();
  fp8d::v1::Job two = TestTrainJob(Out("two"), 6);
  two.mutable_resources()->set_ranks(2);
  std::vector<std::string> names;
  for (const fp8d::v1::Job& spec : {two, TestTrainJob(Out("one"), 4)}) {
    auto created = client().CreateJob(spec);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    names.push_back(created->name());
  }
  double expected = 0;
  std::string owner;
  for (const std::string& name : names) {
    ASSERT_TRUE(WaitTerminal(client(), name).ok());
    auto job = client().GetJob(name, fp8d::v1::JOB_VIEW_FULL);
    ASSERT_TRUE(job.ok());
    ASSERT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
    owner = job->owner();
    for (const auto& a : job->attempts()) {
      const int64_t ms = TimeUtil::TimestampToMilliseconds(a.end_time()) - TimeUtil::TimestampToMilliseconds(a.start_time());
      expected += ms / 1000.0 * a.ranks_size();
    }
  }
  ASSERT_GT(expected, 0);

  ProcessResult by_owner = Fp8ctl({"usage", "-o", "json"});
  ASSERT_EQ(by_owner.exit_code, 0) << by_owner.err;
  auto j = nlohmann::json::parse(by_owner.out);
  ASSERT_EQ(j["rows"].size(), 1u) << by_owner.out;
  EXPECT_EQ(j["rows"][0]["key"], owner);
  EXPECT_NEAR(j["rows"][0]["cpu_slot_seconds"].get<double>(), expected, 1e-6) << by_owner.out;
  EXPECT_FALSE(j["rows"][0].contains("gpu_seconds")) << "CPU slots only: no GPU-seconds";
  EXPECT_EQ(j["rows"][0]["attempts"], "2");

  ProcessResult by_queue = Fp8ctl({"usage", "--by", "queue", "--since", "7d"});
  ASSERT_EQ(by_queue.exit_code, 0) << by_queue.err;
  EXPECT_NE(by_queue.out.find("QUEUE"), std::string::npos) << by_queue.out;
  EXPECT_NE(by_queue.out.find("default"), std::string::npos) << by_queue.out;

  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ProcessResult recent = Fp8ctl({"usage", "--since", "1s", "-o", "json"});
  ASSERT_EQ(recent.exit_code, 0) << recent.err;
  EXPECT_TRUE(nlohmann::json::parse(recent.out)["rows"].empty()) << recent.out;

  ProcessResult bad = Fp8ctl({"usage", "--by", "team"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--by"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace fp8d::itest
