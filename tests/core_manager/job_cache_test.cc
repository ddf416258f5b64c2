// SPDX-License-Identifier: Apache-2.0
// JobCache alone: indexes, version publication order, eviction, the list overlay.
#include "daemon/core/job_cache.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;
using fp8d::v1::JobState;

Job MakeJob(const std::string& name, JobState state, int64_t version = 1) {
  Job job;
  job.set_name(name);
  job.set_state(state);
  job.set_version(version);
  return job;
}

class JobCacheTest : public ::testing::Test {
 protected:
  // A state change as the manager makes one: new state and version, then its write pending.
  int64_t Change(JobEntry& e, JobState to) {
    cache_.SetState(e, to);
    e.job.set_version(e.job.version() + 1);
    cache_.AwaitDurable(e, /*now_ms=*/0);
    return e.job.version();
  }
  std::vector<int64_t> PublishedVersions() const {
    std::vector<int64_t> versions;
    for (const Job& j : published_) versions.push_back(j.version());
    return versions;
  }

  std::vector<Job> published_;
  JobCache cache_{[this](const Job& job) { published_.push_back(job); }};
};

TEST_F(JobCacheTest, QueuedJobsAreIndexedInCreationOrderAndLeaveTheIndexWhenTheyStart) {
  cache_.Add(MakeJob("jobs/b", fp8d::v1::QUEUED), 0);
  cache_.Add(MakeJob("jobs/a", fp8d::v1::QUEUED), 0);
  cache_.Add(MakeJob("jobs/c", fp8d::v1::RUNNING), 0);
  cache_.Add(MakeJob("jobs/a", fp8d::v1::FAILED), 0);  // cached already: ignored
  ASSERT_EQ(cache_.size(), 3u);
  EXPECT_EQ(cache_.Find("jobs/a")->job.state(), fp8d::v1::QUEUED);
  EXPECT_LT(cache_.Find("jobs/b")->create_seq, cache_.Find("jobs/a")->create_seq);
  EXPECT_LT(cache_.Find("jobs/a")->create_seq, cache_.Find("jobs/c")->create_seq);
  EXPECT_EQ(cache_.queued(), (std::set<std::string>{"jobs/a", "jobs/b"}));
  EXPECT_EQ(cache_.TakeNewlyQueued(), (std::vector<std::string>{"jobs/b", "jobs/a"}));
  EXPECT_TRUE(cache_.TakeNewlyQueued().empty());

  JobEntry& a = *cache_.Find("jobs/a");
  cache_.SetState(a, fp8d::v1::STARTING);
  EXPECT_EQ(cache_.queued(), std::set<std::string>{"jobs/b"});
  EXPECT_TRUE(cache_.TakeNewlyQueued().empty());
  cache_.SetState(a, fp8d::v1::RETRY_WAIT);
  cache_.SetState(a, fp8d::v1::QUEUED);
  EXPECT_EQ(cache_.queued(), (std::set<std::string>{"jobs/a", "jobs/b"}));
  EXPECT_EQ(cache_.TakeNewlyQueued(), std::vector<std::string>{"jobs/a"});
  EXPECT_EQ(cache_.Find("jobs/missing"), nullptr);
}

TEST_F(JobCacheTest, AStateChangeIsPublishedOnlyOnceDurableAndProgressNeverOvertakesIt) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::STARTING), 0);
  JobEntry& e = *cache_.Find("jobs/a");
  const int64_t running = Change(e, fp8d::v1::RUNNING);
  cache_.PublishChange(e, /*now_ms=*/5);  // progress while RUNNING is being written
  EXPECT_TRUE(published_.empty()) << "published before the state change was durable";
  EXPECT_EQ(e.delivered().version(), 1) << "GetJob would answer a version not yet durable";
  EXPECT_EQ(e.job.version(), running + 1);
  EXPECT_EQ(cache_.dirty_rows(), std::set<std::string>{"jobs/a"});
  EXPECT_TRUE(e.row_dirty);

  cache_.Durable(e, running);
  EXPECT_EQ(PublishedVersions(), (std::vector<int64_t>{running, running + 1}));
  EXPECT_EQ(published_[0].state(), fp8d::v1::RUNNING);
  EXPECT_EQ(e.delivered().version(), running + 1);
  EXPECT_EQ(e.pending_writes, 0);
  EXPECT_TRUE(e.outbox.empty());

  cache_.PublishChange(e, 6);  // nothing pending: at once
  EXPECT_EQ(published_.back().version(), running + 2);
}

TEST_F(JobCacheTest, AJobIsHeldOnceUntilItFirstChangesAndTheChangeWaitsForItsWrite) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::QUEUED), 0);
  JobEntry& e = *cache_.Find("jobs/a");
  EXPECT_EQ(&e.delivered(), &e.job) << "a job that never changed needs no second copy";
  e.BeforeChange();  // as the scheduler does before it sets the error of an unschedulable job
  e.job.mutable_error()->set_message("unschedulable");
  const int64_t failed = Change(e, fp8d::v1::FAILED);
  EXPECT_EQ(e.delivered().state(), fp8d::v1::QUEUED) << "GetJob would answer a state not yet durable";
  EXPECT_TRUE(e.delivered().error().message().empty());
  cache_.Durable(e, failed);
  EXPECT_EQ(e.delivered().state(), fp8d::v1::FAILED);
  EXPECT_EQ(e.delivered().error().message(), "unschedulable");
  EXPECT_EQ(PublishedVersions(), std::vector<int64_t>{failed});
}

TEST_F(JobCacheTest, ATransitionWriteCarriesTheProgressBeforeIt) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::RUNNING), 0);
  JobEntry& e = *cache_.Find("jobs/a");
  cache_.PublishChange(e, 5);
  EXPECT_TRUE(e.row_dirty);
  Change(e, fp8d::v1::SUCCEEDED);
  EXPECT_FALSE(e.row_dirty) << "the transition's row write carries the progress";
}

TEST_F(JobCacheTest, AFinishedJobIsEvictedOnlyOnceItsWritesAreDurableAndItsWorkersGone) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::RUNNING), 0);
  JobEntry& e = *cache_.Find("jobs/a");
  e.run = std::make_unique<AttemptRun>();
  e.run->ranks.resize(2);
  cache_.AddRun(e);
  cache_.PublishChange(e, 1);
  EXPECT_EQ(cache_.EvictIfDone("jobs/a"), nullptr) << "evicted a running job";

  const int64_t failed = Change(e, fp8d::v1::FAILED);
  EXPECT_EQ(cache_.EvictIfDone("jobs/a"), nullptr) << "evicted before its write committed";
  cache_.Durable(e, failed);
  EXPECT_EQ(cache_.EvictIfDone("jobs/a"), nullptr) << "evicted while a worker still runs";
  e.run->ranks[0].exited = true;
  EXPECT_EQ(cache_.EvictIfDone("jobs/a"), nullptr);
  e.run->ranks[1].exited = true;

  std::unique_ptr<JobEntry> gone = cache_.EvictIfDone("jobs/a");
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->job.state(), fp8d::v1::FAILED);
  EXPECT_EQ(cache_.Find("jobs/a"), nullptr);
  EXPECT_EQ(cache_.size(), 0u);
  EXPECT_TRUE(cache_.with_run().empty());
  EXPECT_TRUE(cache_.dirty_rows().empty());
  EXPECT_EQ(cache_.EvictIfDone("jobs/a"), nullptr);
}

TEST_F(JobCacheTest, AQueuedJobCancelledBeforeItRanLeavesEveryIndex) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::QUEUED), 0);
  JobEntry& e = *cache_.Find("jobs/a");
  cache_.Durable(e, Change(e, fp8d::v1::CANCELLED));
  ASSERT_NE(cache_.EvictIfDone("jobs/a"), nullptr);
  EXPECT_TRUE(cache_.queued().empty());
}

TEST_F(JobCacheTest, AListedJobShowsTheNewestVersionWatchersSaw) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::RUNNING, 3), 0);
  cache_.PublishChange(*cache_.Find("jobs/a"), 1);  // v4, not yet written
  EXPECT_EQ(cache_.Newest(MakeJob("jobs/a", fp8d::v1::RUNNING, 3)).version(), 4);
  EXPECT_EQ(cache_.Newest(MakeJob("jobs/a", fp8d::v1::RUNNING, 5)).version(), 5);
  EXPECT_EQ(cache_.Newest(MakeJob("jobs/other", fp8d::v1::SUCCEEDED, 2)).version(), 2);
}

TEST_F(JobCacheTest, RunningCountsOnlyJobsWithAnAttemptInAnActiveState) {
  const std::vector<std::pair<std::string, JobState>> jobs = {
      {"jobs/s", fp8d::v1::STARTING}, {"jobs/r", fp8d::v1::RUNNING},
      {"jobs/c", fp8d::v1::CANCELLING}, {"jobs/w", fp8d::v1::RETRY_WAIT},
      {"jobs/f", fp8d::v1::FAILED}};
  for (const auto& [name, state] : jobs) {
    cache_.Add(MakeJob(name, state), 0);
    cache_.Find(name)->run = std::make_unique<AttemptRun>();
    cache_.AddRun(*cache_.Find(name));
  }
  cache_.Add(MakeJob("jobs/q", fp8d::v1::QUEUED), 0);
  EXPECT_EQ(cache_.CountRunning(), 3);
}

TEST_F(JobCacheTest, ARecoveredJobIsHeldOnceAndItsRowCountsAsSavedWhenItWasLoaded) {
  cache_.Add(MakeJob("jobs/a", fp8d::v1::QUEUED, 9), 42);
  const JobEntry& e = *cache_.Find("jobs/a");
  EXPECT_EQ(&e.delivered(), &e.job) << "a recovered job needs no second copy until it changes";
  EXPECT_EQ(e.delivered().version(), 9);
  EXPECT_EQ(e.row_saved_ms, 42);
  int seen = 0;
  cache_.ForEach([&](JobEntry& e) { seen += e.job.name() == "jobs/a"; });
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace fp8d::core::testing
