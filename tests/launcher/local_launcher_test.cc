// SPDX-License-Identifier: Apache-2.0
// LocalLauncher with real processes: launch, environment and files, event order and offsets,
// exit codes and signals, process groups, garbage and partial lines.
#include <signal.h>
#include <sys/stat.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/launcher/launcher.h"
#include "tests/launcher/launcher_test_util.h"

namespace fp8d::launcher::testing {
namespace {

namespace fs = std::filesystem;

std::string Type(const WorkerEvent& e) { return e.garbage ? "<garbage>" : EventType(e.event); }

// The events of one rank without heartbeats (their number depends on timing).
std::vector<WorkerEvent> WithoutHeartbeats(const std::vector<WorkerEvent>& events) {
  std::vector<WorkerEvent> out;
  for (const auto& e : events) {
    if (Type(e) != "heartbeat") out.push_back(e);
  }
  return out;
}

TEST_F(LauncherTest, LaunchRunsEveryRankWithItsEnvironmentAndFiles) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-env", 2, {{"FP8_EXTRA", "yes"}});
  req.slots[1].gpu = 3;  // the environment says which GPU; the worker does not need one
  req.resume_from = "";
  auto ranks = LaunchTracked(*launcher, req);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  ASSERT_EQ(ranks->size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*ranks)[r].rank, r);
    EXPECT_GT((*ranks)[r].pid, 0);
    const std::optional<LocalProcessId> id = ParseLocalHandle((*ranks)[r].handle);
    ASSERT_TRUE(id.has_value()) << (*ranks)[r].handle;
    EXPECT_EQ(id->pid, (*ranks)[r].pid);
    EXPECT_GT(id->start_time, 0u);
    EXPECT_EQ((*ranks)[r].events_offset, 0);
  }
  ASSERT_TRUE(listener_.WaitForExit("job-env", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-env", 1, 1));

  EXPECT_EQ(ReadFile(req.attempt_dir + "/spec.json"), req.spec_json);
  EXPECT_TRUE(fs::is_directory(req.attempt_dir + "/rendezvous"));
  EXPECT_FALSE(fs::exists(req.attempt_dir + "/spec.json.tmp"));
  for (int r = 0; r < 2; ++r) {
    std::string log = ReadFile(req.attempt_dir + "/rank-" + std::to_string(r) + ".log");
    SCOPED_TRACE(log);
    EXPECT_NE(log.find("env FP8D_JOB=job-env\n"), std::string::npos);
    EXPECT_NE(log.find("env FP8D_ATTEMPT=1\n"), std::string::npos);
    EXPECT_NE(log.find("env FP8D_RANK=" + std::to_string(r) + "\n"), std::string::npos);
    EXPECT_NE(log.find("env FP8D_WORLD_SIZE=2\n"), std::string::npos);
    EXPECT_NE(log.find("env FP8D_LOCAL_RANK=" + std::to_string(r) + "\n"), std::string::npos);
    EXPECT_NE(log.find(r == 0 ? "env CUDA_VISIBLE_DEVICES=\n" : "env CUDA_VISIBLE_DEVICES=3\n"),
              std::string::npos);
    EXPECT_NE(log.find("env FP8D_RENDEZVOUS_DIR=" + req.attempt_dir + "/rendezvous\n"),
              std::string::npos);
    EXPECT_NE(log.find("env FP8D_CHECKPOINT_DIR=" + req.checkpoint_dir + "\n"), std::string::npos);
    EXPECT_NE(log.find("env FP8D_RESUME_FROM=\n"), std::string::npos);
    // Only stdin, stdout, stderr: nothing of the test process (or daemon) leaks in.
    EXPECT_NE(log.find("fds 0,1,2\n"), std::string::npos);
    const std::string prefix = req.attempt_dir + "/rank-" + std::to_string(r);
    EXPECT_NE(log.find("stdio 0 /dev/null\n"), std::string::npos);
    EXPECT_NE(log.find("stdio 1 " + prefix + ".events append\n"), std::string::npos);
    EXPECT_NE(log.find("stdio 2 " + prefix + ".log append\n"), std::string::npos);
    EXPECT_NE(log.find("mode=succeed"), std::string::npos);
    auto exit = listener_.Exit("job-env", r);
    ASSERT_TRUE(exit.has_value());
    EXPECT_EQ(exit->exit_code, 0);
    EXPECT_EQ(exit->signal, 0);
    EXPECT_FALSE(exit->adopted);
  }
}

TEST_F(LauncherTest, ExtraEnvReachesTheWorker) {
  auto launcher = NewLauncher(&listener_);
  // The environment is the test worker's primary channel: FP8_TEST_STEPS=2 must win over
  // the spec's 3.
  auto ranks = LaunchTracked(*launcher, Request("job-extra", 1, {{"FP8_TEST_STEPS", "2"}}));
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  ASSERT_TRUE(listener_.WaitForExit("job-extra", 1, 0));
  auto events = WithoutHeartbeats(listener_.Events("job-extra", 0));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event.done().result().fields().at("final_step").number_value(), 2);
}

TEST_F(LauncherTest, EventsArriveInOrderWithOffsetsAndBeforeTheExit) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-order", 2, {{"FP8_TEST_STEPS", "6"}, {"FP8_TEST_SAVE_STEPS", "3"}});
  auto ranks = LaunchTracked(*launcher, req);
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  ASSERT_TRUE(listener_.WaitForExit("job-order", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-order", 1, 1));

  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    std::string path = req.attempt_dir + "/rank-" + std::to_string(r) + ".events";
    auto all = listener_.Events("job-order", r);
    ASSERT_FALSE(all.empty());
    int64_t prev = 0;
    for (const auto& e : all) {
      EXPECT_FALSE(e.garbage) << e.raw;
      EXPECT_EQ(e.attempt, 1);
      EXPECT_EQ(e.rank, r);
      EXPECT_GT(e.offset_after, prev);
      prev = e.offset_after;
    }
    // Every line of the file was delivered, exactly once.
    EXPECT_EQ(all.back().offset_after, static_cast<int64_t>(fs::file_size(path)));

    auto events = WithoutHeartbeats(all);
    std::vector<std::string> types;
    for (const auto& e : events) types.push_back(Type(e));
    std::vector<std::string> want = {"started", "progress", "progress", "progress"};
    if (r == 0) want.push_back("checkpoint");  // only rank 0 writes checkpoints
    want.insert(want.end(), {"progress", "progress", "progress"});
    if (r == 0) want.push_back("checkpoint");
    want.push_back("done");
    EXPECT_EQ(types, want);
    EXPECT_EQ(events.front().event.started().pid(), (*ranks)[r].pid);
  }
  // The exit of each rank comes after its last event.
  auto log = listener_.All();
  for (int r = 0; r < 2; ++r) {
    size_t last_event = 0, exit_at = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      if (!log[i].is_exit && log[i].event.rank == r) last_event = i;
      if (log[i].is_exit && log[i].exit.rank == r) exit_at = i;
    }
    EXPECT_GT(exit_at, last_event);
  }
  EXPECT_TRUE(fs::exists(req.checkpoint_dir + "/step-3/trainer_state.json"));
  EXPECT_TRUE(fs::exists(req.checkpoint_dir + "/step-6/trainer_state.json"));
}

TEST_F(LauncherTest, ExitCodesAndSignalsAreReported) {
  auto launcher = NewLauncher(&listener_);
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-65", 1, {{"FP8_TEST_MODE", "exit_code"},
                                                          {"FP8_TEST_EXIT_CODE", "65"},
                                                          {"FP8_TEST_CRASH_STEP", "2"}}))
                  .ok());
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-kill", 1, {{"FP8_TEST_MODE", "crash_at_step"},
                                                            {"FP8_TEST_CRASH_STEP", "2"}}))
                  .ok());
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-segv", 1, {{"FP8_TEST_MODE", "crash_at_step"},
                                                            {"FP8_TEST_CRASH_SIGNAL", "11"},
                                                            {"FP8_TEST_CRASH_STEP", "1"}}))
                  .ok());
  ASSERT_TRUE(listener_.WaitForExit("job-65", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-kill", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-segv", 1, 0));

  auto e65 = listener_.Exit("job-65", 0);
  EXPECT_EQ(e65->exit_code, 65);
  EXPECT_EQ(e65->signal, 0);
  auto events = WithoutHeartbeats(listener_.Events("job-65", 0));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(Type(events.back()), "error");
  EXPECT_EQ(events.back().event.error().class_(), fp8d::v1::WorkerEvent::DATA_ERROR);

  auto ekill = listener_.Exit("job-kill", 0);
  EXPECT_EQ(ekill->exit_code, -1);
  EXPECT_EQ(ekill->signal, SIGKILL);
  auto esegv = listener_.Exit("job-segv", 0);
  EXPECT_EQ(esegv->exit_code, -1);
  EXPECT_EQ(esegv->signal, SIGSEGV);
}

// With a poll interval far beyond the wait, only the pidfd wake-up can deliver the exit.
TEST_F(LauncherTest, ExitWakesTheObserverWithoutWaitingForTheTick) {
  int probe = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (probe < 0) GTEST_SKIP() << "no pidfd_open here: the launcher falls back to polling";
  ::close(probe);
  auto launcher = NewLauncher(&listener_, /*poll_ms=*/600000);
  auto ranks = LaunchTracked(*launcher, Request("job-wake", 1, {{"FP8_TEST_MODE", "hang_after_start"}}));
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  // The observer only looks at the events file when woken; make sure the worker is up
  // (its `started` line is in the file) before killing it.
  std::string path = Request("job-wake", 1).attempt_dir + "/rank-0.events";
  ASSERT_TRUE(PollUntil([&] { return ReadFile(path).find("\"started\"") != std::string::npos; }));
  ::kill(static_cast<pid_t>((*ranks)[0].pid), SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-wake", 1, 0));
  EXPECT_EQ(listener_.Exit("job-wake", 0)->signal, SIGKILL);
  // The lines written before the death were drained first.
  ASSERT_FALSE(listener_.Events("job-wake", 0).empty());
  EXPECT_EQ(Type(listener_.Events("job-wake", 0).front()), "started");
}

// Same for events: with no tick in reach, only the inotify watch on the events file can
// deliver a progress line (WatchJob latency rests on this).
TEST_F(LauncherTest, EventsWakeTheObserverWithoutWaitingForTheTick) {
  int probe = ::inotify_init1(IN_CLOEXEC);
  if (probe < 0) GTEST_SKIP() << "no inotify here: the launcher falls back to polling";
  ::close(probe);
  auto launcher = NewLauncher(&listener_, /*poll_ms=*/600000);
  auto ranks = LaunchTracked(*launcher, Request("job-events", 1, {{"FP8_TEST_STEPS", "100000"},
                                                               {"FP8_TEST_STEP_MS", "200"}}));
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  ASSERT_TRUE(listener_.WaitForEventType("job-events", 0, "progress"));
  ::kill(-static_cast<pid_t>((*ranks)[0].pid), SIGKILL);
}

TEST_F(LauncherTest, EachRankLeadsItsOwnSessionAndGroup) {
  auto launcher = NewLauncher(&listener_);
  auto ranks = LaunchTracked(*launcher, Request("job-pg", 2, {{"FP8_TEST_MODE", "hang_after_start"}}));
  ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
  for (const auto& rp : *ranks) {
    EXPECT_EQ(::getpgid(static_cast<pid_t>(rp.pid)), rp.pid);
    EXPECT_EQ(::getsid(static_cast<pid_t>(rp.pid)), rp.pid);
  }
  EXPECT_NE(::getpgid(static_cast<pid_t>((*ranks)[0].pid)), ::getpgrp());
  launcher->Signal("job-pg", 1, SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-pg", 1, 0));
  ASSERT_TRUE(listener_.WaitForExit("job-pg", 1, 1));
  EXPECT_EQ(listener_.Exit("job-pg", 1)->signal, SIGKILL);
}

TEST_F(LauncherTest, SigtermStopsAtAStepBoundaryWithACheckpoint) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-term", 1, {{"FP8_TEST_STEPS", "100000"},
                                              {"FP8_TEST_STEP_MS", "20"},
                                              {"FP8_TEST_SAVE_STEPS", "1000000"}});
  ASSERT_TRUE(LaunchTracked(*launcher, req).ok());
  ASSERT_TRUE(listener_.WaitForEventType("job-term", 0, "progress"));
  launcher->Signal("job-term", 1, SIGTERM);
  ASSERT_TRUE(listener_.WaitForExit("job-term", 1, 0));
  EXPECT_EQ(listener_.Exit("job-term", 0)->exit_code, 76);
  auto events = WithoutHeartbeats(listener_.Events("job-term", 0));
  ASSERT_GE(events.size(), 4u);
  const auto& done = events.back();
  ASSERT_EQ(Type(done), "done");
  EXPECT_TRUE(done.event.done().result().fields().at("interrupted").bool_value());
  const auto& preempted = events[events.size() - 2];
  ASSERT_EQ(Type(preempted), "preempted");
  const auto& ckpt = events[events.size() - 3];
  ASSERT_EQ(Type(ckpt), "checkpoint");
  EXPECT_EQ(preempted.event.preempted().step(), ckpt.event.checkpoint().step());
  EXPECT_EQ(preempted.event.preempted().checkpoint(), ckpt.event.checkpoint().path());
  EXPECT_EQ(static_cast<double>(ckpt.event.checkpoint().step()),
            done.event.done().result().fields().at("final_step").number_value());
  EXPECT_TRUE(fs::exists(ckpt.event.checkpoint().path() + "/trainer_state.json"));
}

TEST_F(LauncherTest, IgnoredSigtermNeedsSigkill) {
  auto launcher = NewLauncher(&listener_);
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-ign", 1, {{"FP8_TEST_MODE", "ignore_sigterm"},
                                                           {"FP8_TEST_STEPS", "100000"},
                                                           {"FP8_TEST_STEP_MS", "20"}}))
                  .ok());
  ASSERT_TRUE(listener_.WaitForEventType("job-ign", 0, "progress"));
  launcher->Signal("job-ign", 1, SIGTERM);
  launcher->Signal("job-ign", 1, SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-ign", 1, 0));
  // Had SIGTERM been honoured the exit would be 76; SIGKILL ended it instead.
  EXPECT_EQ(listener_.Exit("job-ign", 0)->signal, SIGKILL);
}

// The worker forks a helper into its process group; signalling the rank must reach it.
int64_t ChildPid(RecordingListener& listener, const std::string& job) {
  for (const auto& e : listener.Events(job, 0)) {
    if (!e.garbage && e.event.has_metric() && e.event.metric().name() == "test_child_pid") {
      return static_cast<int64_t>(e.event.metric().value());
    }
  }
  return 0;
}

void ExpectGroupSignalReachesGrandchild(RecordingListener& listener, Launcher& launcher,
                                        const std::string& job, int64_t leader, int sig) {
  ASSERT_TRUE(PollUntil([&] { return ChildPid(listener, job) > 0; }));
  int64_t child = ChildPid(listener, job);
  ASSERT_TRUE(Alive(child));
  EXPECT_EQ(::getpgid(static_cast<pid_t>(child)), leader);
  launcher.Signal(job, 1, sig);
  ASSERT_TRUE(listener.WaitForExit(job, 1, 0));
  EXPECT_TRUE(PollUntil([&] { return !Alive(child); })) << "grandchild " << child << " survived";
}

TEST_F(LauncherTest, SigkillOfTheGroupKillsGrandchildren) {
  auto launcher = NewLauncher(&listener_);
  auto ranks = LaunchTracked(*launcher, Request("job-gk", 1, {{"FP8_TEST_MODE", "hang_after_start"},
                                                           {"FP8_TEST_SPAWN_CHILD", "1"}}));
  ASSERT_TRUE(ranks.ok());
  ExpectGroupSignalReachesGrandchild(listener_, *launcher, "job-gk", (*ranks)[0].pid, SIGKILL);
}

TEST_F(LauncherTest, SigtermOfTheGroupKillsGrandchildren) {
  auto launcher = NewLauncher(&listener_);
  auto ranks = LaunchTracked(*launcher, Request("job-gt", 1, {{"FP8_TEST_STEPS", "100000"},
                                                           {"FP8_TEST_STEP_MS", "20"},
                                                           {"FP8_TEST_SPAWN_CHILD", "1"}}));
  ASSERT_TRUE(ranks.ok());
  ExpectGroupSignalReachesGrandchild(listener_, *launcher, "job-gt", (*ranks)[0].pid, SIGTERM);
  EXPECT_EQ(listener_.Exit("job-gt", 0)->exit_code, 76);
}

TEST_F(LauncherTest, AGroupDoesNotOutliveItsLeader) {
  auto launcher = NewLauncher(&listener_);
  // The worker finishes normally but its helper would sleep on; the launcher ends it.
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-lead", 1, {{"FP8_TEST_SPAWN_CHILD", "1"}})).ok());
  ASSERT_TRUE(listener_.WaitForExit("job-lead", 1, 0));
  EXPECT_EQ(listener_.Exit("job-lead", 0)->exit_code, 0);
  int64_t child = ChildPid(listener_, "job-lead");
  ASSERT_GT(child, 0);
  EXPECT_TRUE(PollUntil([&] { return !Alive(child); })) << "helper " << child << " survived";
}

TEST_F(LauncherTest, GarbageLinesAreFlagged) {
  auto launcher = NewLauncher(&listener_);
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-garbage", 1, {{"FP8_TEST_MODE", "garbage"},
                                                               {"FP8_TEST_STEPS", "2"}}))
                  .ok());
  ASSERT_TRUE(listener_.WaitForExit("job-garbage", 1, 0));
  auto events = WithoutHeartbeats(listener_.Events("job-garbage", 0));
  std::vector<std::string> raws;
  int progress = 0;
  for (const auto& e : events) {
    if (e.garbage) {
      EXPECT_EQ(e.event.payload_case(), fp8d::v1::WorkerEvent::PAYLOAD_NOT_SET);
      raws.push_back(e.raw);
    } else if (Type(e) == "progress") {
      ++progress;
    }
  }
  EXPECT_EQ(progress, 2);
  EXPECT_EQ(raws, (std::vector<std::string>{"this is not json, step 1", "{\"no_type_here\": 1}",
                                            "this is not json, step 2", "{\"no_type_here\": 2}"}));
  EXPECT_EQ(listener_.Exit("job-garbage", 0)->exit_code, 0);
}

// A shell stand-in writes half a line, waits for a file, then finishes the line.
TEST_F(LauncherTest, PartialLineIsDeliveredOnlyOnceComplete) {
  auto launcher = NewLauncher(&listener_);
  std::string go = dir_ + "/go";
  LaunchRequest req = Request("job-partial", 1, {{"GO_FILE", go}});
  req.worker_argv_prefix = {
      "/bin/sh", "-c",
      "printf '{\"heartbeat\":{}}\\n{\"met'; "
      "while [ ! -e \"$GO_FILE\" ]; do sleep 0.01; done; "
      "printf 'ric\":{}}\\n{\"done\":{}}'",
      "sh"};
  ASSERT_TRUE(LaunchTracked(*launcher, req).ok());
  ASSERT_TRUE(listener_.WaitForEventType("job-partial", 0, "heartbeat"));
  // Give the observer many polls over the half line (this can only hide a bug, never fail a
  // correct launcher).
  std::string path = req.attempt_dir + "/rank-0.events";
  ASSERT_TRUE(PollUntil([&] { return fs::file_size(path) > 17; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(listener_.Events("job-partial", 0).size(), 1u);

  std::ofstream(go).put('x');
  ASSERT_TRUE(listener_.WaitForExit("job-partial", 1, 0));
  auto events = listener_.Events("job-partial", 0);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(Type(events[1]), "metric");
  EXPECT_EQ(events[1].offset_after, 17 + 14);
  // The last line had no newline: once the process is gone it is delivered all the same.
  EXPECT_EQ(Type(events[2]), "done");
  EXPECT_EQ(events[2].offset_after, static_cast<int64_t>(fs::file_size(path)));
  EXPECT_EQ(listener_.Exit("job-partial", 0)->exit_code, 0);
}

TEST_F(LauncherTest, LaunchValidatesTheRequest) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-bad", 1);
  req.slots.clear();
  auto r = launcher->Launch(req);
  EXPECT_EQ(r.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("slots"), std::string::npos);

  req = Request("job-bad", 1);
  req.slots[0].node = "elsewhere";
  r = launcher->Launch(req);
  EXPECT_EQ(r.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("slots[0].node"), std::string::npos);

  req = Request("job-bad", 1);
  req.worker_argv_prefix.clear();
  r = launcher->Launch(req);
  EXPECT_EQ(r.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("worker_argv_prefix"), std::string::npos);
}

TEST_F(LauncherTest, MissingWorkerBinaryFailsTheLaunchNamingIt) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-nobin", 2);
  req.worker_argv_prefix = {dir_ + "/no-such-worker"};
  auto r = launcher->Launch(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no-such-worker"), std::string::npos);
  EXPECT_NE(r.status().message().find("rank 0"), std::string::npos);
}

TEST_F(LauncherTest, TheSameAttemptCannotRunTwice) {
  auto launcher = NewLauncher(&listener_);
  LaunchRequest req = Request("job-twice", 1, {{"FP8_TEST_MODE", "hang_after_start"}});
  ASSERT_TRUE(LaunchTracked(*launcher, req).ok());
  auto again = launcher->Launch(req);
  EXPECT_EQ(again.status().code(), fp8::StatusCode::kAlreadyExists);
  launcher->Signal("job-twice", 1, SIGKILL);
  ASSERT_TRUE(listener_.WaitForExit("job-twice", 1, 0));
}

TEST_F(LauncherTest, OtherChildrenOfTheDaemonAreNotReaped) {
  pid_t other = ::fork();
  ASSERT_GE(other, 0);
  if (other == 0) ::_exit(7);
  auto launcher = NewLauncher(&listener_);
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-other", 1)).ok());
  ASSERT_TRUE(listener_.WaitForExit("job-other", 1, 0));
  // The launcher polled many times while `other` was a zombie; its status is still ours.
  int st = 0;
  ASSERT_EQ(::waitpid(other, &st, 0), other);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 7);
}

TEST_F(LauncherTest, StopLeavesWorkersRunning) {
  auto launcher = NewLauncher(&listener_);
  auto ranks = LaunchTracked(*launcher, Request("job-stop", 1, {{"FP8_TEST_MODE", "hang_after_start"}}));
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(listener_.WaitForEventType("job-stop", 0, "started"));
  launcher->Stop();
  launcher->Stop();  // idempotent
  EXPECT_TRUE(HandleAlive((*ranks)[0]));
  EXPECT_EQ(launcher->Launch(Request("job-after-stop", 1)).status().code(),
            fp8::StatusCode::kFailedPrecondition);
  // Signal still works without observation; TearDown reaps.
  launcher->Signal("job-stop", 1, SIGKILL);
  EXPECT_TRUE(PollUntil([&] { return !HandleAlive((*ranks)[0]); }));
  EXPECT_FALSE(listener_.Exit("job-stop", 0).has_value());
}

}  // namespace
}  // namespace fp8d::launcher::testing

namespace fp8d::launcher::testing {
namespace {

// The daemon's shutdown may run from inside a callback; Stop must not join its own thread.
class StoppingListener : public RecordingListener {
 public:
  Launcher* launcher = nullptr;
  void OnWorkerExit(WorkerExit exit) override {
    launcher->Stop();
    RecordingListener::OnWorkerExit(std::move(exit));
  }
};

TEST_F(LauncherTest, StopFromACallbackDoesNotDeadlock) {
  StoppingListener listener;
  auto launcher = NewLauncher(&listener);
  listener.launcher = launcher.get();
  ASSERT_TRUE(LaunchTracked(*launcher, Request("job-cb-stop", 1, {{"FP8_TEST_STEPS", "1"}})).ok());
  ASSERT_TRUE(listener.WaitForExit("job-cb-stop", 1, 0));
  launcher.reset();  // joins the (finished) observer
}

}  // namespace
}  // namespace fp8d::launcher::testing
