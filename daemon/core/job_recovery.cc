// SPDX-License-Identifier: Apache-2.0
// Start-up recovery (before the daemon reports SERVING) and Shutdown.
//
// Recovery: every non-terminal job goes back into the cache. Jobs whose workers may be running
// (STARTING, RUNNING, CANCELLING, or a failed attempt never marked ended) have their attempt's
// ranks accounted for before any new attempt can start: each live rank is re-adopted (by its
// saved pid, or found through its environment when the daemon died before saving pids), and
// each gone rank's events file is read on from the saved offset, so a worker that finished,
// checkpointed or crashed while the daemon was down is judged by what it wrote. Only an attempt
// that never spawned anything (no live rank, no events file) ends with CONTROLLER_RESTART,
// which does NOT count against max_attempts, and is requeued through RETRY_WAIT (RUNNING → QUEUED
// is preemption's edge alone) with no backoff; a CANCELLING job is simply CANCELLED. Live workers
// of this data dir that no recovered attempt owns are killed. An attempt that was being
// preempted (its record holds the PREEMPTED intent) is signalled again once re-adopted, and
// ends PREEMPTED as before the restart. This file loads the jobs and their counts; the
// re-adoption itself is the launcher's (AttemptLauncher::Readopt).
#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>
#include <google/protobuf/util/time_util.h>
#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"

namespace fp8d::core {

namespace {
// Jobs per chunk handed from the store thread to io during recovery: big enough that posting
// costs nothing, small enough that both threads are busy from the first chunk on.
constexpr size_t kRecoveryChunk = 4096;

// The job's current attempt holds the PREEMPTED intent (job_preemption.cc) and its job still
// runs: the preemption had not ended when fp8d stopped. Unlike a PREEMPTED outcome, it counts
// until its end is judged (which uncounts it, PREEMPTED or CONTROLLER_RESTART alike).
bool PreemptionUnderWay(const JobEntry& e, const fp8d::v1::Attempt& attempt) {
  const JobState state = e.job.state();
  return attempt.failure_class() == fp8d::v1::PREEMPTED && attempt.number() == e.job.attempt() &&
         (state == fp8d::v1::STARTING || state == fp8d::v1::RUNNING ||
          state == fp8d::v1::CANCELLING);
}
}  // namespace

void JobManagerImpl::Start(std::function<void(Status)> done) {
  // Recovery runs on both cores at once: the store thread reads and parses the active jobs a
  // chunk at a time and posts each chunk to io, which moves it into the cache while the next
  // chunk is read. Only jobs that have started an attempt (a few; a deep queue never ran)
  // need their attempts and checkpoints, loaded afterwards in one more store task.
  std::weak_ptr<int> alive = alive_;
  auto started = std::make_shared<std::vector<std::string>>();  // touched on io only
  store_thread_->Post([this, alive, started, done = std::move(done)](store::JobStore& store) mutable {
    Status scanned = store.ScanActiveJobs(kRecoveryChunk, [&](std::vector<Job> jobs) {
      // A recovered job is what was delivered until it first changes: the cache holds one copy
      // of it (JobEntry::BeforeChange), so none is made here.
      boost::asio::post(io_, [this, alive, started, jobs = std::move(jobs)]() mutable {
        if (alive.expired()) return;
        for (Job& job : jobs) {
          if (job.attempt() > 0 || job.state() != fp8d::v1::QUEUED) started->push_back(job.name());
          cache_.Add(std::move(job), NowMs());
        }
      });
      return fp8::OkStatus();
    });
    // Posted after every chunk (io runs them in order): all of them are in the cache by now.
    boost::asio::post(io_, [this, alive, scanned, started, done = std::move(done)]() mutable {
      if (alive.expired()) return;
      if (!scanned.ok()) {
        spdlog::error("recovery: loading active jobs: {}", scanned.ToString());
        done(scanned);
        return;
      }
      LoadAttempts(std::move(*started), std::move(done));
    });
  });
}

void JobManagerImpl::LoadAttempts(std::vector<std::string> names,
                                  std::function<void(Status)> done) {
  struct Loaded {
    std::vector<AttemptLauncher::Recovered> jobs;
    std::vector<std::vector<fp8d::v1::Checkpoint>> checkpoints;  // one per job
  };
  store_thread_->Run<StatusOr<Loaded>>(
      [names = std::move(names)](store::JobStore& s) -> StatusOr<Loaded> {
        Loaded out;
        out.jobs.reserve(names.size());
        for (const std::string& name : names) {
          AttemptLauncher::Recovered r;
          r.name = name;
          FP8_ASSIGN_OR_RETURN(r.attempts, s.ListAttempts(name));
          FP8_ASSIGN_OR_RETURN(auto checkpoints, s.ListCheckpoints(name));
          out.jobs.push_back(std::move(r));
          out.checkpoints.push_back(std::move(checkpoints));
        }
        return out;
      },
      [this, done = std::move(done)](StatusOr<Loaded> loaded) {
        if (!loaded.ok()) {
          spdlog::error("recovery: loading attempts: {}", loaded.status().ToString());
          done(loaded.status());
          return;
        }
        Recover(std::move(loaded->jobs), std::move(loaded->checkpoints), done);
      });
}

void JobManagerImpl::Recover(std::vector<AttemptLauncher::Recovered> jobs,
                             std::vector<std::vector<fp8d::v1::Checkpoint>> checkpoints,
                             std::function<void(Status)> done) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    JobEntry* e = Find(jobs[i].name);
    if (e == nullptr) continue;
    e->checkpoints = std::move(checkpoints[i]);
    std::sort(e->checkpoints.begin(), e->checkpoints.end(),
              [](const auto& a, const auto& b) { return a.step() < b.step(); });
    for (const auto& a : jobs[i].attempts) {
      if (CountsAsAttempt(a.attempt) || PreemptionUnderWay(*e, a.attempt)) ++e->counted_attempts;
      if (a.attempt.failure_class() == fp8d::v1::RESOURCE_EXHAUSTED) {
        e->oom_steps.insert(a.attempt.failure_step());
      }
    }
    if (e->job.state() == fp8d::v1::RETRY_WAIT) {
      const int64_t since = google::protobuf::util::TimeUtil::TimestampToMilliseconds(
          e->job.update_time());
      e->retry_at_ms = since + BackoffMs(e->job.retry(), e->counted_attempts, Uniform01());
    }
  }
  // Jobs waiting on dependencies that ended badly while fp8d was down fail now.
  RecoverDependencies();
  // Workers that may be running are accounted for before any new attempt can start.
  attempt_launcher_->Readopt(std::move(jobs), [this, done = std::move(done)] {
    // An attempt being preempted when fp8d stopped is stopped again (its workers may have
    // missed the SIGTERM): re-adopted ones get it now, with a new grace; gone ones were
    // requeued by the launcher already.
    const std::vector<std::string> with_run(cache_.with_run().begin(), cache_.with_run().end());
    for (const std::string& name : with_run) {
      JobEntry* e = Find(name);
      if (e != nullptr && e->run != nullptr && e->run->launched && !e->run->finished &&
          PreemptionUnderWay(*e, e->run->record.attempt)) {
        PreemptAttempt(*e, e->run->record.attempt.failure_message());
      }
    }
    // Everything recovery wrote is queued before this barrier (FIFO store thread).
    store_thread_->Barrier([this, done] {
      started_ = true;
      spdlog::info("recovery finished: {} active job(s)", cache_.size());
      supervisor_->ArmTick();
      // SERVING first: every job is in the cache, so answers are already right, and the
      // first round (over a deep queue) need not delay the health check. Calls that reach io
      // run after this handler, i.e. after the round.
      done(fp8::OkStatus());
      Schedule();
    });
  });
}

void JobManagerImpl::Shutdown(std::function<void()> done) {
  shutting_down_ = true;
  supervisor_->Stop();  // no more events, exits or ticks
  launcher_->Stop();  // workers keep running; the next daemon re-adopts them
  creates_->FailQueued(fp8::UnavailableError("fp8d is shutting down"));
  watchers_.EndAll(fp8::UnavailableError("fp8d is shutting down"));
  attempt_launcher_->Stop();
  // A Launch already on the launcher thread must have its pids saved, or the next daemon
  // could not re-adopt (and would start a second copy of) those workers.
  attempt_launcher_->Drain([this, done = std::move(done)]() mutable {
    cache_.ForEach([this](JobEntry& e) {
      if (e.run != nullptr && e.run->launched && !e.run->AllExited()) supervisor_->SaveAttempt(e);
    });
    supervisor_->FlushDirtyRows(NowMs(), /*all=*/true);
    store_thread_->Barrier(std::move(done));
  });
}

}  // namespace fp8d::core
