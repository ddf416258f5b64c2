// SPDX-License-Identifier: Apache-2.0
// JobManager: create → SUCCEEDED, watch ordering and resume, idempotent create, group commit,
// list, gang scheduling, unschedulable jobs.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "daemon/core/job_fields.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

TEST_F(ManagerTest, CreateFillsDefaultsAndRunsToSuccess) {
  StartManager();
  auto created = Create(TrainJob());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const Job& job = *created;
  const std::string name = job.name();
  EXPECT_EQ(name.rfind("jobs/", 0), 0u);
  EXPECT_EQ(job.state(), fp8d::v1::QUEUED);
  EXPECT_EQ(job.kind(), fp8d::v1::TRAIN);
  EXPECT_EQ(job.retry().max_attempts(), 3);
  EXPECT_EQ(MsFromDuration(job.retry().initial_backoff()), 1000);
  EXPECT_EQ(MsFromDuration(job.retry().max_backoff()), 60000);
  EXPECT_DOUBLE_EQ(job.retry().multiplier(), 2.0);
  EXPECT_DOUBLE_EQ(job.retry().jitter(), 0.2);
  EXPECT_EQ(MsFromDuration(job.timeouts().heartbeat_timeout()), 30000);
  EXPECT_EQ(MsFromDuration(job.timeouts().progress_timeout()), 300000);

  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 1; }));
  const launcher::LaunchRequest launch = launcher_->Launch(0);
  EXPECT_EQ(launch.job_id, JobIdOf(name));
  EXPECT_EQ(launch.attempt, 1);
  EXPECT_EQ(launch.kind, "train");
  EXPECT_EQ(launch.attempt_dir, data_dir_ + "/jobs/" + JobIdOf(name) + "/attempt-1");
  EXPECT_EQ(launch.checkpoint_dir, data_dir_ + "/out/checkpoints");
  EXPECT_EQ(launch.resume_from, "");
  EXPECT_EQ(launch.worker_argv_prefix, std::vector<std::string>{"/bin/fake-worker"});
  ASSERT_EQ(launch.slots.size(), 1u);
  auto spec = nlohmann::json::parse(launch.spec_json);
  EXPECT_EQ(spec["output_dir"], data_dir_ + "/out");
  EXPECT_EQ(spec["model"]["preset"], "tiny");
  EXPECT_TRUE(spec["training"].contains("max_steps"));  // snake_case names

  ASSERT_TRUE(WaitState(name, fp8d::v1::STARTING));
  Emit(name, 1, 0, {{"type", "started"}, {"rank", 0}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));

  Emit(name, 1, 0,
       {{"type", "progress"}, {"step", 5}, {"total_steps", 10}, {"loss", 2.5}, {"lr", 1e-3},
        {"grad_norm", 0.7}, {"tokens_per_sec", 1000.0}, {"eta_seconds", 3.0}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->progress().step() == 5; }));
  Job mid = *Get(name);
  EXPECT_EQ(mid.progress().total_steps(), 10);
  EXPECT_DOUBLE_EQ(mid.progress().loss(), 2.5);
  EXPECT_DOUBLE_EQ(mid.progress().learning_rate(), 1e-3);
  EXPECT_DOUBLE_EQ(mid.progress().grad_norm(), 0.7);
  EXPECT_DOUBLE_EQ(mid.progress().tokens_per_second(), 1000.0);
  EXPECT_DOUBLE_EQ(mid.progress().eta_seconds(), 3.0);

  Emit(name, 1, 0, {{"type", "checkpoint"}, {"step", 5}, {"path", "/ck/step-5"}, {"checksum", "abc"}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->checkpoint().step() == 5; }));
  EXPECT_EQ(Get(name)->checkpoint().path(), "/ck/step-5");

  FinishAttempt(name, 1, 1);
  ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
  auto full = Get(name, /*full=*/true);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_DOUBLE_EQ(full->result().fields().at("final_loss").number_value(), 1.25);
  EXPECT_TRUE(full->has_end_time());
  EXPECT_EQ(full->checkpoint().path(), "/ck/step-5");
  ASSERT_EQ(full->attempts_size(), 1);
  EXPECT_EQ(full->attempts(0).ranks(0).exit_status(), 0);
  EXPECT_EQ(full->attempts(0).ranks(0).pid(), 4000);
  EXPECT_EQ(full->attempts(0).ranks(0).node(), "node-a");
  std::vector<fp8d::v1::JobState> to;
  for (const auto& ev : full->events()) to.push_back(ev.to_state());
  ASSERT_GE(to.size(), 3u);
  EXPECT_EQ(std::vector<fp8d::v1::JobState>(to.end() - 3, to.end()),
            (std::vector<fp8d::v1::JobState>{fp8d::v1::STARTING, fp8d::v1::RUNNING,
                                             fp8d::v1::SUCCEEDED}));
  EXPECT_TRUE(launcher_->Signals().empty());
}

TEST_F(ManagerTest, RelativeOutputDirIsMadeAbsoluteAtCreate) {
  StartManager();
  Job job = TrainJob();
  job.mutable_train()->set_output_dir("runs/a");
  auto created = Create(job);
  ASSERT_TRUE(created.ok());
  const std::string out = created->train().output_dir();
  EXPECT_EQ(out, (std::filesystem::current_path() / "runs/a").string());
}

// The output-dir admission keys on the output_dir as the API's path check resolved it, and
// resolves it itself where that answer may not be the stored path's: a caller without one, or
// an output_dir PrepareNewJob rewrote (`sub/../x` is `x` lexically, not through a symlink).
TEST_F(ManagerTest, AnOutputDirInUseIsFoundByTheKeyTheApiResolvedOrByItsStoredPath) {
  StartManager();
  const auto create = [&](const std::string& output_dir, std::optional<std::string> key) {
    fp8d::v1::CreateJobRequest request;
    *request.mutable_job() = TrainJob();
    request.mutable_job()->mutable_train()->set_output_dir(output_dir);
    std::optional<fp8::StatusOr<Job>> result;
    manager_->CreateJob(std::move(request), std::move(key), [&](fp8::StatusOr<Job> r) { result = std::move(r); });
    EXPECT_TRUE(RunUntil([&] { return result.has_value(); }));
    return result.value_or(fp8::InternalError("create timed out"));
  };
  auto a = create(data_dir_ + "/alias-a", data_dir_ + "/real");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = create(data_dir_ + "/alias-b", data_dir_ + "/real");
  EXPECT_EQ(b.status().code(), fp8::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.status().message().rfind("output_dir " + data_dir_ + "/alias-b is used by " + a->name(), 0), 0u)
      << b.status().message();
  EXPECT_TRUE(create(data_dir_ + "/real-2", data_dir_ + "/real-2").ok());

  // Stored as <data>/c: the key resolved from what was written is not taken.
  auto c = create(data_dir_ + "/sub/../c", data_dir_ + "/elsewhere");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->train().output_dir(), data_dir_ + "/c");
  auto d = create(data_dir_ + "/c", std::nullopt);
  EXPECT_EQ(d.status().code(), fp8::StatusCode::kFailedPrecondition) << d.status().ToString();
  EXPECT_TRUE(create(data_dir_ + "/d", data_dir_ + "/elsewhere").ok()) << "the unused key was claimed";
}

TEST_F(ManagerTest, CreateWithoutSpecIsInvalidArgument) {
  StartManager();
  Job job;
  job.set_display_name("nothing to run");
  auto created = Create(job);
  EXPECT_EQ(created.status().code(), fp8::StatusCode::kInvalidArgument);
}

TEST_F(ManagerTest, WatchSendsEveryVersionInOrderAndResumes) {
  StartManager();
  auto created = Create(TrainJob());
  ASSERT_TRUE(created.ok());
  const std::string name = created->name();
  auto rec = WatchJob(name);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 1; }));
  Emit(name, 1, 0, {{"type", "started"}});
  ASSERT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  // Late subscriber resuming from the current version: only what comes after.
  const int64_t now_version = Get(name)->version();
  auto late = WatchJob(name, now_version);
  for (int step = 1; step <= 3; ++step) {
    Emit(name, 1, 0, {{"type", "progress"}, {"step", step}, {"total_steps", 3}, {"loss", 3.0 - step}});
  }
  FinishAttempt(name, 1, 1);
  ASSERT_TRUE(RunUntil([&] { return rec->ended && late->ended; }));
  EXPECT_TRUE(rec->end_status.ok());

  ASSERT_FALSE(rec->updates.empty());
  for (size_t i = 1; i < rec->updates.size(); ++i) {
    EXPECT_EQ(rec->updates[i].version(), rec->updates[i - 1].version() + 1)
        << "every version, in order";
  }
  std::vector<fp8d::v1::JobState> states;
  std::vector<int64_t> steps;
  for (const auto& u : rec->updates) {
    if (states.empty() || states.back() != u.state()) states.push_back(u.state());
    if (u.progress().step() > 0 && (steps.empty() || steps.back() != u.progress().step()))
      steps.push_back(u.progress().step());
  }
  // The first snapshot is QUEUED or, if the write of STARTING won the race with the
  // subscription, STARTING; from there on nothing is skipped.
  if (!states.empty() && states.front() == fp8d::v1::QUEUED) states.erase(states.begin());
  EXPECT_EQ(states, (std::vector<fp8d::v1::JobState>{fp8d::v1::STARTING, fp8d::v1::RUNNING,
                                                     fp8d::v1::SUCCEEDED}));
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));

  ASSERT_FALSE(late->updates.empty());
  EXPECT_EQ(late->updates.front().version(), now_version + 1);
  EXPECT_EQ(late->updates.front().progress().step(), 1);
  EXPECT_EQ(late->updates.back().state(), fp8d::v1::SUCCEEDED);

  // Resume on a finished job: the final snapshot when newer, then the end; nothing otherwise.
  const int64_t last = rec->updates.back().version();
  auto again = WatchJob(name, last - 1);
  auto none = WatchJob(name, last);
  ASSERT_TRUE(RunUntil([&] { return again->ended && none->ended; }));
  ASSERT_EQ(again->updates.size(), 1u);
  EXPECT_EQ(again->updates[0].version(), last);
  EXPECT_TRUE(none->updates.empty());
  EXPECT_TRUE(none->end_status.ok());

  auto missing = WatchJob("jobs/does-not-exist");
  ASSERT_TRUE(RunUntil([&] { return missing->ended; }));
  EXPECT_EQ(missing->end_status.code(), fp8::StatusCode::kNotFound);
}

TEST_F(ManagerTest, UnwatchStopsUpdates) {
  StartManager();
  const std::string name = CreateRunning(TrainJob());
  auto rec = WatchJob(name);
  ASSERT_TRUE(RunUntil([&] { return !rec->updates.empty(); }));
  manager_->Unwatch(rec->id);
  const size_t seen = rec->updates.size();
  Emit(name, 1, 0, {{"type", "progress"}, {"step", 1}});
  ASSERT_TRUE(RunUntil([&] { return Get(name)->progress().step() == 1; }));
  EXPECT_EQ(rec->updates.size(), seen);
  EXPECT_FALSE(rec->ended);
}

TEST_F(ManagerTest, RankLogOpensTheRankLogOfAnAttemptThroughTheLauncher) {
  StartManager();
  const std::string name = CreateRunning(TrainJob(2));
  const std::string dir = data_dir_ + "/jobs/" + JobIdOf(name) + "/attempt-1";
  struct Answer {
    fp8::StatusOr<JobManager::RankLogSource> source = fp8::InternalError("unset");
    bool terminal = true;
    bool done = false;
  };
  auto ask = [&](int rank, int attempt) {
    Answer a;
    manager_->RankLog(name, rank, attempt, [&](fp8::StatusOr<JobManager::RankLogSource> s, bool terminal) {
      a.source = std::move(s);
      a.terminal = terminal;
      a.done = true;
    });
    EXPECT_TRUE(RunUntil([&] { return a.done; }));
    return a;
  };
  // The FakeLauncher starts no process, so the rank has written no log yet.
  Answer none = ask(0, 0);
  ASSERT_TRUE(none.source.ok()) << none.source.status().ToString();
  EXPECT_EQ(none.source->attempt, 1);
  EXPECT_EQ(none.source->open().status().code(), fp8::StatusCode::kNotFound);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/rank-1.log") << "hello\n";
  Answer a = ask(1, 0);
  ASSERT_TRUE(a.source.ok()) << a.source.status().ToString();
  EXPECT_FALSE(a.terminal);
  auto stream = a.source->open();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  EXPECT_EQ((*stream)->Read(3).value(), "hel");
  EXPECT_EQ((*stream)->Read(100).value(), "lo\n");
  EXPECT_EQ((*stream)->Read(100).value(), "") << "at the end, until the rank writes more";
  std::ofstream(dir + "/rank-1.log", std::ios::app) << "more\n";
  EXPECT_EQ((*stream)->Read(100).value(), "more\n") << "a follower reads on from where it stopped";
  EXPECT_EQ(ask(1, 1).source->attempt, 1);
  EXPECT_EQ(ask(2, 0).source.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(ask(0, 2).source.status().code(), fp8::StatusCode::kNotFound);
}

TEST_F(ManagerTest, CreateIsIdempotentOnRequestId) {
  StartManager();
  const Job job = TrainJob();
  auto first = Create(job, "req-1");
  ASSERT_TRUE(first.ok());
  auto second = Create(job, "req-1");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->name(), second->name());
  Job other = TrainJob();
  other.set_display_name("another body");
  auto third = Create(other, "req-1");
  EXPECT_EQ(third.status().code(), fp8::StatusCode::kInvalidArgument);
  auto list = List(100);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs_size(), 1);
}

TEST_F(ManagerTest, ConcurrentCreatesAreGroupCommitted) {
  launcher_->slots.clear();  // nothing runs: only the creates matter here
  StartManager();
  constexpr int kJobs = 20;
  std::vector<std::optional<fp8::StatusOr<Job>>> results(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    fp8d::v1::CreateJobRequest request;
    *request.mutable_job() = TrainJob();
    manager_->CreateJob(request, [&results, i](fp8::StatusOr<Job> r) { results[i] = std::move(r); });
  }
  ASSERT_TRUE(RunUntil([&] {
    for (const auto& r : results) if (!r) return false;
    return true;
  }));
  std::set<std::string> names;
  for (const auto& r : results) {
    ASSERT_TRUE(r->ok()) << r->status().ToString();
    names.insert((*r)->name());
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kJobs));
  // The first create goes alone; the 19 that queued behind it share one transaction.
  EXPECT_EQ(create_calls_->load(), 2);
}

// Closed-loop clients come back one by one after their batch is answered: the next batch waits
// (briefly) for as many callers as the last one had instead of going out with the first.
TEST_F(ManagerTest, AfterABigBatchTheNextWaitsForAsManyCallers) {
  launcher_->slots.clear();
  StartManager();
  auto create_all = [&](int n) {
    std::vector<std::optional<fp8::StatusOr<Job>>> results(n);
    for (int i = 0; i < n; ++i) {  // no io in between: they arrive "at once"
      fp8d::v1::CreateJobRequest request;
      *request.mutable_job() = TrainJob();
      manager_->CreateJob(request, [&results, i](fp8::StatusOr<Job> r) { results[i] = std::move(r); });
    }
    EXPECT_TRUE(RunUntil([&] {
      for (const auto& r : results) if (!r) return false;
      return true;
    }));
    for (const auto& r : results) EXPECT_TRUE(r && r->ok());
  };
  create_all(20);
  ASSERT_EQ(create_calls_->load(), 2);  // 1, then the 19 queued behind it
  // 19 callers again: the first no longer goes alone, all 19 share one transaction.
  create_all(19);
  EXPECT_EQ(create_calls_->load(), 3);
  // Fewer callers than last time: the batch goes once the short wait is over.
  create_all(3);
  EXPECT_EQ(create_calls_->load(), 4);
  // A lone caller after a batch of 3 waits at most the same short time, then goes alone.
  create_all(1);
  EXPECT_EQ(create_calls_->load(), 5);
}

TEST_F(ManagerTest, ListPagesPassThrough) {
  launcher_->slots.clear();
  StartManager();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(TrainJob()).ok());
  auto page1 = List(2);
  ASSERT_TRUE(page1.ok()) << page1.status().ToString();
  EXPECT_EQ(page1->jobs_size(), 2);
  ASSERT_FALSE(page1->next_page_token().empty());
  auto page2 = List(2, page1->next_page_token());
  ASSERT_TRUE(page2.ok());
  EXPECT_EQ(page2->jobs_size(), 1);
  EXPECT_TRUE(page2->next_page_token().empty());
  EXPECT_EQ(List(2, "garbage-token").status().code(), fp8::StatusCode::kInvalidArgument);
}

TEST_F(ManagerTest, GangHoldsAllSlotsUntilEveryRankExits) {
  StartManager();  // two slots
  const std::string big = CreateRunning(TrainJob(2));
  ASSERT_EQ(launcher_->Launch(0).slots.size(), 2u);
  auto small = Create(TrainJob(1));
  ASSERT_TRUE(small.ok());
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
  EXPECT_EQ(StateOf(small->name()), fp8d::v1::QUEUED);

  // One rank done is not enough: the gang holds both slots until both exit.
  Emit(big, 1, 0, {{"type", "done"}, {"result", {{"final_loss", 1.0}}}});
  Exit(big, 1, 0, 0);
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
  Emit(big, 1, 1, {{"type", "done"}});
  Exit(big, 1, 1, 0);
  ASSERT_TRUE(WaitState(big, fp8d::v1::SUCCEEDED));
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).job_id, JobIdOf(small->name()));
}

TEST_F(ManagerTest, HigherPriorityGoesFirst) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(TrainJob());
  Job low = TrainJob();
  low.set_priority(1);
  Job high = TrainJob();
  high.set_priority(5);
  auto l = Create(low);
  auto h = Create(high);
  ASSERT_TRUE(l.ok() && h.ok());
  FinishAttempt(running, 1, 1);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).job_id, JobIdOf(h->name()));
}

TEST_F(ManagerTest, JobLargerThanTheClusterFails) {
  StartManager();  // two slots
  auto created = Create(TrainJob(3));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(WaitState(created->name(), fp8d::v1::FAILED));
  Job job = *Get(created->name());
  EXPECT_EQ(job.error().failure_class(), fp8d::v1::INVALID_SPEC);
  EXPECT_NE(job.error().message().find("ranks"), std::string::npos) << job.error().message();
  EXPECT_EQ(launcher_->LaunchCount(), 0u);
}

}  // namespace
}  // namespace fp8d::core::testing
