// SPDX-License-Identifier: Apache-2.0
// The fleet harness (bench/fleet) at 200 ranks: 25 jobs of 8 ranks played by one thread in
// front of a real JobManager on SQLite. A SIGKILLed rank fails its attempt as WORKER_CRASH and
// a silent one as HUNG (never before the heartbeat timeout); both are retried, the hung rank
// after it ignored SIGTERM and got SIGKILL at the end of the grace; a job whose last attempt
// fails ends FAILED and is not launched again. No timing is checked beyond the timeout's floor.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/fleet/fleet_run.h"
#include "tests/integration/daemon_process.h"

namespace fp8d::bench {
namespace {

constexpr int kJobs = 25;
constexpr int kRanks = 8;
constexpr int64_t kHeartbeatTimeoutMs = 2000;

class FleetSmokeTest : public ::testing::Test {
 protected:
  FleetRunOptions Options() const {
    FleetRunOptions o;
    o.data_dir = dir_.path();
    o.jobs = kJobs;
    o.ranks_per_job = kRanks;
    o.fleet.nodes = kJobs;
    o.fleet.gpus_per_node = kRanks;
    o.fleet.progress_ms = 300;
    o.fleet.heartbeat_ms = 500;
    o.fleet.start_ms = 50;
    o.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
    o.max_attempts = 2;
    o.backoff_ms = 200;
    o.cancel_grace_ms = 1000;
    return o;
  }

  itest::TempDir dir_;
};

TEST_F(FleetSmokeTest, FaultsAreDetectedAndRetriedAsThePolicySays) {
  auto started = FleetRun::Start(Options());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  FleetRun& run = **started;
  ASSERT_TRUE(run.CreateJobs().ok());
  ASSERT_TRUE(run.WaitFor([&] { return run.CountInState(fp8d::v1::RUNNING) == kJobs; }, 20'000))
      << run.CountInState(fp8d::v1::RUNNING) << " of " << kJobs << " RUNNING";
  EXPECT_EQ(run.fleet().counts().live_ranks, kJobs * kRanks);
  EXPECT_EQ(run.fleet().counts().launches, kJobs);

  const std::vector<std::string> names = run.job_names();
  ASSERT_EQ(names.size(), static_cast<size_t>(kJobs));
  for (int j = 0; j < 3; ++j) ASSERT_TRUE(run.InjectFaultInto(names[j], 3, Fault::kSigkill).ok());
  for (int j = 3; j < 6; ++j) ASSERT_TRUE(run.InjectFaultInto(names[j], 5, Fault::kSilence).ok());
  ASSERT_TRUE(run.WaitFor([&] {
    for (const FaultRecord& f : run.faults()) {
      if (f.running_again_us == 0) return false;
    }
    return true;
  }, 20'000)) << "not every faulted job ran again";

  for (const FaultRecord& f : run.faults()) {
    SCOPED_TRACE(f.job);
    EXPECT_EQ(f.attempt, 1);
    EXPECT_EQ(f.state, fp8d::v1::RETRY_WAIT);
    EXPECT_GT(f.detected_us, f.at_us);
    EXPECT_GT(f.running_again_us, f.detected_us);
    if (f.kind == Fault::kSigkill) {
      EXPECT_EQ(f.failure, fp8d::v1::WORKER_CRASH);
      EXPECT_NE(f.message.find("rank 3 was killed by signal 9"), std::string::npos) << f.message;
    } else {
      EXPECT_EQ(f.failure, fp8d::v1::HUNG);
      EXPECT_NE(f.message.find("rank 5 sent no heartbeat"), std::string::npos) << f.message;
      EXPECT_GE(f.detected_us - f.at_us, kHeartbeatTimeoutMs * 1000);
    }
  }
  // Six attempts again, and the other 19 jobs never stopped.
  EXPECT_EQ(run.fleet().counts().launches, kJobs + 6);
  EXPECT_EQ(run.CountInState(fp8d::v1::RUNNING), kJobs);

  // The second attempt of max_attempts 2 fails for good: FAILED, its ranks stopped, no launch.
  ASSERT_TRUE(run.InjectFaultInto(names[0], 0, Fault::kSigkill).ok());
  ASSERT_TRUE(run.WaitFor([&] { return run.faults().back().detected_us != 0; }, 10'000));
  const FaultRecord last = run.faults().back();
  EXPECT_EQ(last.attempt, 2);
  EXPECT_EQ(last.state, fp8d::v1::FAILED);
  EXPECT_EQ(last.failure, fp8d::v1::WORKER_CRASH);
  EXPECT_TRUE(run.WaitFor([&] { return run.fleet().counts().live_ranks == (kJobs - 1) * kRanks; }, 10'000))
      << run.fleet().counts().live_ranks << " live ranks";
  EXPECT_EQ(run.fleet().counts().launches, kJobs + 6);
  EXPECT_EQ(run.CountInState(fp8d::v1::FAILED), 1);
  EXPECT_EQ(run.CountInState(fp8d::v1::RUNNING), kJobs - 1);
}

}  // namespace
}  // namespace fp8d::bench
