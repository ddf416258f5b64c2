// SPDX-License-Identifier: Apache-2.0
// JobSupervisor alone: the cache, a FakeLauncher, a ManualClock, and the fixture itself as its
// JobWriter and Owner, recording what it is asked to do (transitions, store writes, rounds,
// evictions, ticks).
#include "daemon/core/job_supervisor.h"

#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "tests/core_manager/fake_launcher.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;
using fp8d::v1::JobState;

constexpr int64_t kStartMs = 1'000'000;
constexpr int64_t kGraceMs = 1'000;

class JobSupervisorTest : public ::testing::Test, private JobWriter, private JobSupervisor::Owner {
 protected:
  struct TransitionCall {
    std::string name;
    JobState to;
    std::string message;
    bool with_extra;
  };
  struct StoreCall {
    JobWriter::StoreWork work;
    std::function<void(fp8::Status)> then;
  };

  JobSupervisorTest() {
    supervisor_ = std::make_unique<JobSupervisor>(
        io_,
        JobSupervisor::Options{.tick_ms = 1, .cancel_grace_ms = kGraceMs,
                               .progress_flush_ms = 200, .runtime_flush_ms = 1000,
                               .uniform01 = [] { return 0.5; }},
        cache_, launcher_, &clock_, static_cast<JobWriter&>(*this), static_cast<JobSupervisor::Owner&>(*this));
  }

  // ---- JobWriter, minus the store: a transition "commits" at once, writes are recorded ----
  void Transition(JobEntry& e, JobState to, const std::string& message,
                  std::function<void(fp8::Status)> after, StoreWork extra) override {
    transitions_.push_back({e.job.name(), to, message, extra != nullptr});
    cache_.SetState(e, to);
    if (after) after(fp8::OkStatus());
  }
  void Write(StoreWork work, std::function<void(fp8::Status)> then) override {
    writes_.push_back({std::move(work), std::move(then)});
  }
  void MaybeEvict(const std::string& name) override { evict_asks_.push_back(name); }
  // ---- Owner ----
  void ScheduleRound() override { ++rounds_; }
  void OnTick(int64_t now) override { sweeps_.push_back(now); }

  // A job in STARTING whose attempt 1 has launched `ranks` ranks; one attempt allowed.
  JobEntry& AddLaunched(const std::string& name, int ranks) {
    Job job;
    job.set_name(name);
    job.set_state(fp8d::v1::STARTING);
    job.set_version(1);
    job.mutable_retry()->set_max_attempts(1);
    cache_.Add(job, kStartMs);
    JobEntry& e = *cache_.Find(name);
    e.counted_attempts = 1;
    e.run = std::make_unique<AttemptRun>();
    e.run->number = 1;
    e.run->launched = true;
    e.run->start_ms = kStartMs;
    e.run->ranks.resize(ranks);
    for (int r = 0; r < ranks; ++r) {
      e.run->record.attempt.add_ranks();
      e.run->ranks[r].last_seen_ms = kStartMs;
    }
    cache_.AddRun(e);
    return e;
  }

  static launcher::WorkerEvent Started(const std::string& job_id, int attempt, int rank,
                                    int64_t offset_after) {
    launcher::WorkerEvent ev;
    ev.job_id = job_id;
    ev.attempt = attempt;
    ev.rank = rank;
    ev.event.mutable_started();
    ev.raw = "{\"started\":{}}";
    ev.offset_after = offset_after;
    return ev;
  }

  static launcher::WorkerExit Exit(const std::string& job_id, int rank, int code, int sig = 0) {
    launcher::WorkerExit ex;
    ex.job_id = job_id;
    ex.attempt = 1;
    ex.rank = rank;
    ex.exit_code = code;
    ex.signal = sig;
    return ex;
  }

  // One tick (ArmTick first, then each tick arms the next): the timer fires after tick_ms of
  // real time; the verdicts read clock_.
  void RunOneTick() { ASSERT_EQ(io_.run_one(), 1u); }

  boost::asio::io_context io_;
  ManualClock clock_{kStartMs};
  std::shared_ptr<FakeLauncherState> launcher_state_ = std::make_shared<FakeLauncherState>();
  FakeLauncher launcher_{launcher_state_, nullptr};
  JobCache cache_{[](const Job&) {}};
  std::vector<TransitionCall> transitions_;
  std::vector<StoreCall> writes_;
  int rounds_ = 0;
  std::vector<std::string> evict_asks_;
  std::vector<int64_t> sweeps_;
  std::unique_ptr<JobSupervisor> supervisor_;
};

TEST_F(JobSupervisorTest, EventsOfAnotherAttemptOrRankAndEventsAfterStopAreIgnored) {
  JobEntry& e = AddLaunched("jobs/a", 1);
  supervisor_->HandleEvent(Started("a", /*attempt=*/2, 0, 50));
  supervisor_->HandleEvent(Started("a", 1, /*rank=*/1, 50));
  supervisor_->HandleEvent(Started("b", 1, 0, 50));
  EXPECT_EQ(e.run->ranks[0].offset, 0);
  EXPECT_FALSE(e.run->ranks[0].started);
  EXPECT_FALSE(e.run->runtime_dirty);

  supervisor_->Stop();
  supervisor_->HandleEvent(Started("a", 1, 0, 50));
  supervisor_->HandleExit(Exit("a", 0, 1));
  EXPECT_EQ(e.run->ranks[0].offset, 0);
  EXPECT_FALSE(e.run->ranks[0].exited);
  EXPECT_TRUE(transitions_.empty());
}

TEST_F(JobSupervisorTest, EveryRankStartedMovesToRunningAndUnpinsTheOffsetOnceDurable) {
  JobEntry& e = AddLaunched("jobs/a", 2);
  supervisor_->HandleEvent(Started("a", 1, 0, 40));
  EXPECT_TRUE(transitions_.empty());
  EXPECT_TRUE(e.run->ranks[0].started);
  EXPECT_EQ(e.run->ranks[0].offset, 40);
  EXPECT_EQ(e.run->ranks[0].started_pin, 0) << "the `started` line is not durable yet";
  EXPECT_TRUE(e.run->runtime_dirty);

  clock_.Advance(7);
  supervisor_->HandleEvent(Started("a", 1, 1, 45));
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_EQ(transitions_[0].to, fp8d::v1::RUNNING);
  EXPECT_EQ(transitions_[0].message, "every rank started");
  EXPECT_EQ(e.job.state(), fp8d::v1::RUNNING);
  EXPECT_EQ(e.run->last_progress_ms, kStartMs + 7);
  // The test's transition committed at once: RUNNING is durable, the pins are gone.
  EXPECT_FALSE(e.run->ranks[0].started_pin.has_value());
  EXPECT_FALSE(e.run->ranks[1].started_pin.has_value());
}

TEST_F(JobSupervisorTest, AFailedRankFailsTheAttemptStopsTheOthersAndKillsThemAfterTheGrace) {
  JobEntry& e = AddLaunched("jobs/a", 2);
  supervisor_->HandleEvent(Started("a", 1, 0, 10));
  supervisor_->HandleEvent(Started("a", 1, 1, 10));
  ASSERT_EQ(e.job.state(), fp8d::v1::RUNNING);

  supervisor_->HandleExit(Exit("a", 0, /*code=*/3));
  ASSERT_EQ(transitions_.size(), 2u);
  EXPECT_EQ(transitions_[1].to, fp8d::v1::FAILED) << transitions_[1].message;
  EXPECT_TRUE(transitions_[1].with_extra) << "the attempt's outcome is written with the job";
  EXPECT_NE(transitions_[1].message.find("attempt 1 failed"), std::string::npos)
      << transitions_[1].message;
  EXPECT_EQ(e.run->record.attempt.ranks(0).exit_status(), 3);
  auto signals = launcher_state_->Signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].job_id, "a");
  EXPECT_EQ(signals[0].sig, SIGTERM);
  EXPECT_EQ(e.run->kill_at_ms, kStartMs + kGraceMs);

  supervisor_->ArmTick();
  clock_.Advance(kGraceMs - 1);
  RunOneTick();
  EXPECT_EQ(launcher_state_->Signals().size(), 1u) << "SIGKILL before the grace was over";
  clock_.Advance(1);
  RunOneTick();
  signals = launcher_state_->Signals();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[1].sig, SIGKILL);
  EXPECT_TRUE(e.run->sigkill_sent);
  EXPECT_EQ(sweeps_, (std::vector<int64_t>{kStartMs + kGraceMs - 1, kStartMs + kGraceMs}));
  supervisor_->Stop();
}

TEST_F(JobSupervisorTest, TheTickSavesTheOffsetsOfEveryDueAttemptInOneWrite) {
  // One commit a tick however many attempts are due: at 1,250 running jobs a write per job
  // asked for more fsyncs than the disk had and every state change queued behind them.
  std::unique_ptr<store::JobStore> store = store::NewMemoryJobStore();
  auto created = store->CreateJobs(std::vector<store::CreateRequest>(3));
  ASSERT_TRUE(created.ok());
  std::vector<std::string> names;
  for (int j = 0; j < 3; ++j) {
    names.push_back((*created)[j].job.name());
    AddLaunched(names.back(), 2);
    launcher::WorkerEvent heartbeat;
    heartbeat.job_id = names.back().substr(5);  // without "jobs/"
    heartbeat.attempt = 1;
    heartbeat.rank = 1;
    heartbeat.event.mutable_heartbeat();
    heartbeat.offset_after = 100 + j;
    supervisor_->HandleEvent(heartbeat);
  }
  supervisor_->ArmTick();
  RunOneTick();
  ASSERT_EQ(writes_.size(), 1u) << "one store write for the three attempts";
  ASSERT_TRUE(writes_[0].work(*store).ok());
  for (int j = 0; j < 3; ++j) {
    auto attempts = store->ListAttempts(names[j]);
    ASSERT_TRUE(attempts.ok());
    ASSERT_EQ(attempts->size(), 1u);
    ASSERT_EQ((*attempts)[0].runtime.size(), 2u);
    EXPECT_EQ((*attempts)[0].runtime[1].events_offset, 100 + j);
    EXPECT_FALSE(cache_.Find(names[j])->run->runtime_dirty);
  }
  // The write failed: every attempt in it is due again at the next tick past the flush period.
  writes_[0].then(fp8::UnavailableError("disk full"));
  for (const std::string& name : names) EXPECT_TRUE(cache_.Find(name)->run->runtime_dirty);
  clock_.Advance(1000);
  RunOneTick();
  EXPECT_EQ(writes_.size(), 2u);
  supervisor_->Stop();
}

TEST_F(JobSupervisorTest, TheLastExitSavesTheAttemptOnceThenSchedulesAndAsksToEvict) {
  JobEntry& e = AddLaunched("jobs/a", 1);
  supervisor_->TerminateWorkers(e);  // as CancelJob does
  cache_.SetState(e, fp8d::v1::CANCELLING);
  clock_.Advance(5);
  supervisor_->HandleExit(Exit("a", 0, -1, SIGTERM));
  supervisor_->HandleExit(Exit("a", 0, -1, SIGTERM));  // a repeat changes nothing
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_EQ(transitions_[0].to, fp8d::v1::CANCELLED);
  EXPECT_EQ(e.job.error().code(), 1);
  EXPECT_TRUE(e.run->exit_handled);
  EXPECT_EQ(e.run->record.attempt.end_time().seconds(), (kStartMs + 5) / 1000);
  EXPECT_EQ(rounds_, 1);
  EXPECT_EQ(evict_asks_, std::vector<std::string>{"jobs/a"});

  // The attempt record went to the store; a failed write leaves the runtime dirty again.
  ASSERT_EQ(writes_.size(), 1u);
  EXPECT_FALSE(e.run->runtime_dirty);
  writes_[0].then(fp8::UnavailableError("disk full"));
  EXPECT_TRUE(e.run->runtime_dirty);
}

// Cancel is decided in the supervisor alone: one row per state a cached job can be in.
TEST_F(JobSupervisorTest, CancelDecidesByStateInOnePlace) {
  struct Row {
    JobState state;
    bool launched;                 // the attempt's workers exist (one live rank)
    std::vector<JobState> writes;  // the transitions the cancel makes
    int sigterms;
    fp8::StatusCode code;
    bool barrier;                  // answered after a store round trip, nothing written
  };
  const std::vector<Row> rows = {
      {fp8d::v1::QUEUED, false, {fp8d::v1::CANCELLED}, 0, fp8::StatusCode::kOk, false},
      {fp8d::v1::RETRY_WAIT, false, {fp8d::v1::CANCELLED}, 0, fp8::StatusCode::kOk, false},
      // Before launch: CANCELLING, and the launcher stops the workers once they exist.
      {fp8d::v1::STARTING, false, {fp8d::v1::CANCELLING}, 0, fp8::StatusCode::kOk, false},
      {fp8d::v1::RUNNING, true, {fp8d::v1::CANCELLING}, 1, fp8::StatusCode::kOk, false},
      {fp8d::v1::CANCELLING, true, {}, 0, fp8::StatusCode::kOk, true},
      {fp8d::v1::CANCELLED, false, {}, 0, fp8::StatusCode::kOk, true},
      {fp8d::v1::SUCCEEDED, false, {}, 0, fp8::StatusCode::kFailedPrecondition, false},
      {fp8d::v1::FAILED, false, {}, 0, fp8::StatusCode::kFailedPrecondition, false},
  };
  int n = 0;
  for (const Row& row : rows) {
    const std::string name = "jobs/c" + std::to_string(n++);
    SCOPED_TRACE(name + " " + fp8d::v1::JobState_Name(row.state));
    JobEntry& e = AddLaunched(name, 1);
    e.run->launched = row.launched;
    cache_.SetState(e, row.state);
    transitions_.clear();
    writes_.clear();
    const size_t signals_before = launcher_state_->Signals().size();
    std::optional<fp8::Status> answer;
    supervisor_->Cancel(e, [&](fp8::Status st) { answer = st; });
    if (row.barrier) {
      ASSERT_EQ(writes_.size(), 1u);
      EXPECT_FALSE(answer.has_value()) << "answered before what was written is durable";
      writes_[0].then(fp8::OkStatus());
    }
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->code(), row.code) << answer->ToString();
    std::vector<JobState> written;
    for (const auto& t : transitions_) written.push_back(t.to);
    EXPECT_EQ(written, row.writes);
    EXPECT_EQ(launcher_state_->Signals().size() - signals_before, static_cast<size_t>(row.sigterms));
    if (row.code == fp8::StatusCode::kFailedPrecondition) {
      EXPECT_NE(answer->message().find(fp8d::v1::JobState_Name(row.state)), std::string::npos)
          << answer->message();
    }
  }
}

TEST_F(JobSupervisorTest, CancelWhileTheStoreRefusesWritesIsUnavailableAndChangesNothing) {
  JobEntry& e = AddLaunched("jobs/a", 1);
  cache_.SetState(e, fp8d::v1::RUNNING);
  e.write_failures = 2;
  e.write_error = "disk full";
  std::optional<fp8::Status> answer;
  supervisor_->Cancel(e, [&](fp8::Status st) { answer = st; });
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), fp8::StatusCode::kUnavailable);
  EXPECT_NE(answer->message().find("disk full"), std::string::npos) << answer->message();
  EXPECT_TRUE(transitions_.empty());
  EXPECT_EQ(e.job.state(), fp8d::v1::RUNNING);
}

TEST_F(JobSupervisorTest, StopRunWaitsForTheLaunchThenStopsLiveWorkersOrEndsTheRun) {
  JobEntry& e = AddLaunched("jobs/a", 1);
  cache_.SetState(e, fp8d::v1::CANCELLING);
  e.run->launched = false;
  supervisor_->StopRun(e);
  EXPECT_TRUE(launcher_state_->Signals().empty()) << "no workers yet: nothing to signal";
  EXPECT_FALSE(e.run->exit_handled);

  e.run->launched = true;
  supervisor_->StopRun(e);
  ASSERT_EQ(launcher_state_->Signals().size(), 1u);
  EXPECT_EQ(launcher_state_->Signals()[0].sig, SIGTERM);

  e.run->ranks[0].exited = true;
  supervisor_->StopRun(e);
  EXPECT_TRUE(e.run->exit_handled);
  ASSERT_EQ(transitions_.size(), 1u);
  EXPECT_EQ(transitions_[0].to, fp8d::v1::CANCELLED);
}

}  // namespace
}  // namespace fp8d::core::testing
