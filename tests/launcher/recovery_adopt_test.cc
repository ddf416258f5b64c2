// SPDX-License-Identifier: Apache-2.0
// Recovery after a controller restart: workers found without saved pids, gone ranks judged by
// the rest of their events file, and an attempt that never spawned reported as such.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "daemon/launcher/launcher.h"
#include "tests/launcher/launcher_test_util.h"

namespace fp8d::launcher::testing {
namespace {

std::string Normal(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

TEST_F(LauncherTest, FindWorkersFindsEachRankLeaderByItsEnvironment) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-find", 2, {{"FP8_TEST_MODE", "hang_after_start"},
                                              {"FP8_TEST_SPAWN_CHILD", "1"}});
  auto ranks = LaunchTracked(*launcher, req);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  ASSERT_TRUE(listener_.WaitForEventType("job-find", 0, "started"));
  ASSERT_TRUE(listener_.WaitForEventType("job-find", 1, "started"));
  auto found = launcher->FindWorkers();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  std::map<int, RankProcess> mine;
  for (const auto& w : *found) {
    if (w.attempt_dir == Normal(req.attempt_dir)) mine[w.process.rank] = w.process;
  }
  // The leaders only: each rank's forked helper has the same environment but is no leader.
  ASSERT_EQ(mine.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(mine[r].pid, (*ranks)[r].pid);
    EXPECT_EQ(mine[r].handle, (*ranks)[r].handle);
  }
  launcher->Signal("job-find", 1, SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-find", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-find", 1, 1));
}

TEST_F(LauncherTest, RecoveryAdoptReadsAGoneRankToTheEndAndAdoptsTheLiveOne) {
  RecordingListener first_listener;
  auto first = NewLauncher(&first_listener);
  // Rank 0 finishes at once; rank 1 hangs (alive) until killed.
  LaunchRequest req = Request("job-mixed", 2, {{"FP8_TEST_MODE", "hang_after_start"},
                                               {"FP8_TEST_FAIL_RANK", "1"},
                                               {"FP8_TEST_STEPS", "3"},
                                               {"FP8_TEST_STEP_MS", "10"}});
  auto ranks = LaunchTracked(*first, req);
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(first_listener.WaitForEventType("job-mixed", 1, "started"));
  first->Stop();  // the controller "dies" before reading anything further
  // Rank 0 ends while nobody watches (a zombie of this process: not alive).
  ASSERT_TRUE(PollUntil([&] { return !HandleAlive((*ranks)[0]); }));

  auto second = NewLauncher(&listener_);
  std::vector<RankProcess> saved = *ranks;
  saved[0].events_offset = 0;
  saved[1].events_offset = 0;
  ASSERT_TRUE(second->AdoptForRecovery("job-mixed", 1, req.attempt_dir, saved).ok());
  ASSERT_TRUE(listener_.WaitForExit("job-mixed", 1, 0));
  auto events = listener_.Events("job-mixed", 0);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().event.has_done());
  EXPECT_TRUE(listener_.Exit("job-mixed", 0)->adopted);
  EXPECT_FALSE(listener_.Exit("job-mixed", 1).has_value()) << "the live rank was not adopted";
  second->Signal("job-mixed", 1, SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-mixed", 1, 1));
  for (const auto& r : *ranks) Reap(r.pid);
}

TEST_F(LauncherTest, RecoveryAdoptMarksARankWithoutProcessOrEventsFileAsNeverStarted) {
  RecordingListener first_listener;
  auto first = NewLauncher(&first_listener);
  // One rank was launched before the controller "died"; the attempt was to have two.
  LaunchRequest req = Request("job-half", 1, {{"FP8_TEST_MODE", "hang_after_start"}});
  auto ranks = LaunchTracked(*first, req);
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(first_listener.WaitForEventType("job-half", 0, "started"));
  first->Stop();
  auto second = NewLauncher(&listener_);
  std::vector<RankProcess> saved = {(*ranks)[0], RankProcess{1, "", 0, 0}};
  ASSERT_TRUE(second->AdoptForRecovery("job-half", 1, req.attempt_dir, saved).ok());
  ASSERT_TRUE(listener_.WaitForExit("job-half", 1, 1));
  EXPECT_TRUE(listener_.Exit("job-half", 1)->never_started);
  EXPECT_FALSE(listener_.Exit("job-half", 0).has_value()) << "the live rank was not adopted";
  second->Signal("job-half", 1, SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-half", 1, 0));
  EXPECT_FALSE(listener_.Exit("job-half", 0)->never_started);
  Reap((*ranks)[0].pid);
}

TEST_F(LauncherTest, RecoveryAdoptOfAnAttemptThatNeverSpawnedIsNotFound) {
  auto launcher = NewLauncher(&listener_);
  std::vector<RankProcess> never = {RankProcess{0, "", 0, 0}, RankProcess{1, "", 0, 0}};
  fp8::Status st = launcher->AdoptForRecovery("job-never", 1, dir_ + "/jobs/job-never/attempt-1", never);
  EXPECT_EQ(st.code(), fp8::StatusCode::kNotFound) << st.ToString();
  EXPECT_TRUE(listener_.All().empty());
}

}  // namespace
}  // namespace fp8d::launcher::testing
