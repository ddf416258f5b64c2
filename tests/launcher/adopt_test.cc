// SPDX-License-Identifier: Apache-2.0
// Re-adoption after a controller restart: a second launcher instance takes over live workers
// from the saved offsets; dead or reused pids are refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "daemon/launcher/launcher.h"
#include "tests/launcher/launcher_test_util.h"

namespace fp8d::launcher::testing {
namespace {

std::vector<long> ProgressSteps(const std::vector<WorkerEvent>& events) {
  std::vector<long> steps;
  for (const auto& e : events) {
    if (!e.garbage && e.event.has_progress()) steps.push_back(e.event.progress().step());
  }
  return steps;
}

TEST_F(LauncherTest, SecondLauncherAdoptsFromTheSavedOffsetsAndSeesTheRest) {
  RecordingListener first_listener;
  auto first = NewLauncher(&first_listener);
  LaunchRequest req = Request("job-adopt", 2, {{"FP8_TEST_STEPS", "100000"},
                                               {"FP8_TEST_STEP_MS", "20"}});
  auto ranks = LaunchTracked(*first, req);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  // Wait for a few steps of each rank, then "crash" the controller: observation stops.
  ASSERT_TRUE(first_listener.WaitUntil([&](const auto&) { return true; }));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(PollUntil([&] { return ProgressSteps(first_listener.Events("job-adopt", r)).size() >= 3; }));
  }
  first->Stop();

  // What the manager would have persisted: pid, start time and the offset after the last
  // event it handled.
  std::vector<RankProcess> saved = *ranks;
  std::vector<std::vector<WorkerEvent>> before(2);
  for (int r = 0; r < 2; ++r) {
    before[r] = first_listener.Events("job-adopt", r);
    saved[r].events_offset = before[r].back().offset_after;
    ASSERT_TRUE(HandleAlive(saved[r])) << "worker died with the launcher";
  }

  auto second = NewLauncher(&listener_);
  fp8::Status st = second->Adopt("job-adopt", 1, req.attempt_dir, saved);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(second->Adopt("job-adopt", 1, req.attempt_dir, saved).code(),
            fp8::StatusCode::kAlreadyExists);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(PollUntil([&] { return ProgressSteps(listener_.Events("job-adopt", r)).size() >= 2; }));
  }
  second->Signal("job-adopt", 1, SIGTERM);  // the adopted groups can be signalled too
  ASSERT_TRUE(listener_.WaitForExit("job-adopt", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-adopt", 1, 1));

  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto after = listener_.Events("job-adopt", r);
    ASSERT_FALSE(after.empty());
    EXPECT_GT(after.front().offset_after, saved[r].events_offset);
    // Nothing lost, nothing repeated: the steps run on without a gap across the two launchers.
    std::vector<long> steps = ProgressSteps(before[r]);
    auto more = ProgressSteps(after);
    steps.insert(steps.end(), more.begin(), more.end());
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<long>(i + 1));
    EXPECT_TRUE(after.back().event.has_done());
    auto exit = listener_.Exit("job-adopt", r);
    ASSERT_TRUE(exit.has_value());
    EXPECT_TRUE(exit->adopted);
    EXPECT_EQ(exit->exit_code, -1);  // not our child: the status is unknowable
    EXPECT_EQ(exit->signal, 0);
    // Still this test process's children: reap them (a launcher never reaps what it did not start).
    int status = 0;
    ASSERT_EQ(::waitpid(static_cast<pid_t>(saved[r].pid), &status, 0), saved[r].pid);
    EXPECT_EQ(WEXITSTATUS(status), 76);  // stopped by the SIGTERM above
  }
}

TEST_F(LauncherTest, AdoptRefusesADeadPid) {
  auto first = NewLauncher(&listener_);
  LaunchRequest req = Request("job-dead", 1);
  auto ranks = LaunchTracked(*first, req);
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(listener_.WaitForExit("job-dead", 1, 0));  // reaped by the first launcher
  RecordingListener other;
  auto second = NewLauncher(&other);
  fp8::Status st = second->Adopt("job-dead", 1, req.attempt_dir, *ranks);
  EXPECT_EQ(st.code(), fp8::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("pid " + std::to_string((*ranks)[0].pid)), std::string::npos)
      << st.message();
}

TEST_F(LauncherTest, AdoptRefusesAReusedPidAndAdoptsNothing) {
  auto first = NewLauncher(&listener_);
  LaunchRequest req = Request("job-reused", 2, {{"FP8_TEST_MODE", "hang_after_start"}});
  auto ranks = LaunchTracked(*first, req);
  ASSERT_TRUE(ranks.ok());
  first->Stop();
  RecordingListener other;
  auto second = NewLauncher(&other);
  // Rank 1's pid is alive, but with another start time it is another process.
  std::vector<RankProcess> wrong = *ranks;
  const std::optional<LocalProcessId> id = ParseLocalHandle(wrong[1].handle);
  ASSERT_TRUE(id.has_value()) << wrong[1].handle;
  wrong[1].handle = LocalHandle(id->pid, id->start_time + 1);
  fp8::Status st = second->Adopt("job-reused", 1, req.attempt_dir, wrong);
  EXPECT_EQ(st.code(), fp8::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("pid " + std::to_string(wrong[1].pid)), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("start time"), std::string::npos) << st.message();
  // Nothing was adopted: the right ranks can still be adopted, and signalling works.
  st = second->Adopt("job-reused", 1, req.attempt_dir, *ranks);
  ASSERT_TRUE(st.ok()) << st.ToString();
  second->Signal("job-reused", 1, SIGKILL);
  ASSERT_TRUE(other.WaitForExit("job-reused", 1, 0));
  ASSERT_TRUE(other.WaitForExit("job-reused", 1, 1));
}

TEST_F(LauncherTest, AdoptNeedsTheEventsFile) {
  auto first = NewLauncher(&listener_);
  LaunchRequest req = Request("job-nofile", 1, {{"FP8_TEST_MODE", "hang_after_start"}});
  auto ranks = LaunchTracked(*first, req);
  ASSERT_TRUE(ranks.ok());
  first->Stop();
  RecordingListener other;
  auto second = NewLauncher(&other);
  fp8::Status st = second->Adopt("job-nofile", 1, dir_ + "/elsewhere", *ranks);
  EXPECT_EQ(st.code(), fp8::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("rank-0.events"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace fp8d::launcher::testing
