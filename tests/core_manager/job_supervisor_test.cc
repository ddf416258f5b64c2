// JobSupervisor alone: the cache, a FakeAgent, a ManualClock and hooks that record what the
// manager would be asked to do (transitions, store writes, rounds, evictions).
#include "daemon/core/job_supervisor.h"

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "tests/core_manager/fake_agent.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;
using fp8d::v1::JobState;

constexpr int64_t kStartMs = 1'000'000;
constexpr int64_t kGraceMs = 1'000;

class JobSupervisorTest : public ::testing::Test {
 protected:
  struct TransitionCall {
    std::string name;
    JobState to;
    std::string message;
    bool with_extra;
  };
  struct StoreCall {
    JobSupervisor::StoreWork work;
    std::function<void(fp8::Status)> then;
  };

  JobSupervisorTest() {
    JobSupervisor::Hooks hooks;
    hooks.store_write = [this](JobSupervisor::StoreWork work,
                               std::function<void(fp8::Status)> then) {
      writes_.push_back({std::move(work), std::move(then)});
    };
    // As the manager's Transition, minus the store: the write "commits" at once.
    hooks.transition = [this](JobEntry& e, JobState to, const std::string& message,
                              std::function<void(fp8::Status)> after,
                              JobSupervisor::StoreWork extra) {
      transitions_.push_back({e.job.name(), to, message, extra != nullptr});
      cache_.SetState(e, to);
      if (after) after(fp8::OkStatus());
    };
    hooks.schedule = [this] { ++rounds_; };
    hooks.maybe_evict = [this](const std::string& name) { evict_asks_.push_back(name); };
    hooks.uniform01 = [] { return 0.5; };
    hooks.sweep_finished = [this](int64_t now) { sweeps_.push_back(now); };
    supervisor_ = std::make_unique<JobSupervisor>(
        io_,
        JobSupervisor::Options{.tick_ms = 1, .cancel_grace_ms = kGraceMs,
                               .progress_flush_ms = 200, .runtime_flush_ms = 1000},
        cache_, agent_, &clock_, std::move(hooks));
  }

  // A job in STARTING whose attempt 1 has launched `ranks` ranks; one attempt allowed.
  JobEntry& AddLaunched(const std::string& name, int ranks) {
    Job job;
    job.set_name(name);
    job.set_state(fp8d::v1::STARTING);
    job.set_version(1);
    job.mutable_retry()->set_max_attempts(1);
    cache_.Add(job, std::nullopt, kStartMs);
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

  static agent::WorkerEvent Started(const std::string& job_id, int attempt, int rank,
                                    int64_t offset_after) {
    agent::WorkerEvent ev;
    ev.job_id = job_id;
    ev.attempt = attempt;
    ev.rank = rank;
    ev.event.mutable_started();
    ev.raw = "{\"started\":{}}";
    ev.offset_after = offset_after;
    return ev;
  }

  static agent::WorkerExit Exit(const std::string& job_id, int rank, int code, int sig = 0) {
    agent::WorkerExit ex;
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
  std::shared_ptr<FakeAgentState> agent_state_ = std::make_shared<FakeAgentState>();
  FakeAgent agent_{agent_state_, nullptr};
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
  auto signals = agent_state_->Signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].job_id, "a");
  EXPECT_EQ(signals[0].sig, SIGTERM);
  EXPECT_EQ(e.run->kill_at_ms, kStartMs + kGraceMs);

  supervisor_->ArmTick();
  clock_.Advance(kGraceMs - 1);
  RunOneTick();
  EXPECT_EQ(agent_state_->Signals().size(), 1u) << "SIGKILL before the grace was over";
  clock_.Advance(1);
  RunOneTick();
  signals = agent_state_->Signals();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[1].sig, SIGKILL);
  EXPECT_TRUE(e.run->sigkill_sent);
  EXPECT_EQ(sweeps_, (std::vector<int64_t>{kStartMs + kGraceMs - 1, kStartMs + kGraceMs}));
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

}  // namespace
}  // namespace fp8d::core::testing
