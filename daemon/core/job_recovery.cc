// Start-up recovery (before the daemon reports SERVING) and Shutdown.
//
// Recovery: every non-terminal job goes back into the cache. Jobs whose workers were running
// (STARTING, RUNNING, CANCELLING) are re-adopted from the pids and start times saved in their
// attempt record, reading each rank's events on from the saved offset. When the workers died
// while the daemon was down, the attempt ends with CONTROLLER_RESTART, which does NOT count
// against max_attempts, and the job is requeued through RETRY_WAIT (the table has no
// RUNNING → QUEUED edge) with no backoff; a CANCELLING job is simply CANCELLED.
#include <algorithm>
#include <csignal>
#include <utility>

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
}  // namespace

void JobManagerImpl::Start(std::function<void(Status)> done) {
  // Recovery runs on both cores at once: the store thread reads and parses the active jobs a
  // chunk at a time and posts each chunk to io, which moves it into the cache while the next
  // chunk is read. Only jobs that have started an attempt (a few; a deep queue never ran)
  // need their attempts and checkpoints, loaded afterwards in one more store task.
  std::weak_ptr<int> alive = alive_;
  auto started = std::make_shared<std::vector<std::string>>();  // touched on io only
  store_thread_->Post([this, alive, started, done = std::move(done)]() mutable {
    Status scanned = store_->ScanActiveJobs(kRecoveryChunk, [&](std::vector<Job> jobs) {
      // The cache keeps two copies of each job (current and delivered); the second is made
      // here, where the cores' work is lighter (a profile of 100,000 jobs: io 63%, store 37%).
      std::vector<Job> copies(jobs.begin(), jobs.end());
      boost::asio::post(io_, [this, alive, started, jobs = std::move(jobs),
                              copies = std::move(copies)]() mutable {
        if (alive.expired()) return;
        for (size_t i = 0; i < jobs.size(); ++i) {
          const Job& job = jobs[i];
          if (job.attempt() > 0 || job.state() != fp8d::v1::QUEUED) started->push_back(job.name());
          AddToCache(std::move(jobs[i]), std::move(copies[i]));
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
  using Loaded = StatusOr<std::vector<Recovered>>;
  OnStore<Loaded>(
      [names = std::move(names)](store::JobStore& s) -> Loaded {
        std::vector<Recovered> out;
        out.reserve(names.size());
        for (const std::string& name : names) {
          Recovered r;
          r.name = name;
          FP8_ASSIGN_OR_RETURN(r.attempts, s.ListAttempts(name));
          FP8_ASSIGN_OR_RETURN(r.checkpoints, s.ListCheckpoints(name));
          out.push_back(std::move(r));
        }
        return out;
      },
      [this, done = std::move(done)](Loaded loaded) {
        if (!loaded.ok()) {
          spdlog::error("recovery: loading attempts: {}", loaded.status().ToString());
          done(loaded.status());
          return;
        }
        Recover(std::move(*loaded), done);
      });
}

void JobManagerImpl::Recover(std::vector<Recovered> jobs, std::function<void(Status)> done) {
  struct Adoption {
    std::string name;
    int attempt = 0;
    std::string attempt_dir;
    std::vector<agent::RankProcess> ranks;
    bool possible = false;  // every rank has a recorded pid
  };
  std::vector<Adoption> adoptions;
  const int64_t now = NowMs();

  for (Recovered& r : jobs) {
    JobEntry* found = Find(r.name);
    if (found == nullptr) continue;
    JobEntry& e = *found;
    e.checkpoints = std::move(r.checkpoints);
    std::sort(e.checkpoints.begin(), e.checkpoints.end(),
              [](const auto& a, const auto& b) { return a.step() < b.step(); });
    for (const auto& a : r.attempts) {
      if (a.attempt.failure_class() != fp8d::v1::CONTROLLER_RESTART) ++e.counted_attempts;
    }
    const JobState state = e.job.state();
    if (state == fp8d::v1::RETRY_WAIT) {
      const int64_t since = google::protobuf::util::TimeUtil::TimestampToMilliseconds(
          e.job.update_time());
      e.retry_at_ms = since + BackoffMs(e.job.retry(), e.counted_attempts, Uniform01());
    }
    // The current attempt's record: placements, pids, offsets.
    const store::AttemptRecord* record = nullptr;
    for (const auto& a : r.attempts) {
      if (a.attempt.number() == e.job.attempt()) record = &a;
    }
    const bool running = state == fp8d::v1::STARTING || state == fp8d::v1::RUNNING ||
                         state == fp8d::v1::CANCELLING;
    // A failed attempt whose workers were still being stopped when the daemon went down (its
    // record has no end time): if they are still there, adopt them only to finish stopping
    // them, so the next attempt never runs beside them on the same checkpoint directory.
    const bool stray = (state == fp8d::v1::RETRY_WAIT || state == fp8d::v1::QUEUED) &&
                       record != nullptr && !record->attempt.has_end_time() &&
                       !record->runtime.empty();
    if (!running && !stray) continue;
    auto run = std::make_unique<AttemptRun>();
    run->number = e.job.attempt();
    run->finished = state == fp8d::v1::CANCELLING || stray;
    Adoption adoption{e.job.name(), run->number, AttemptDir(e.job.name(), run->number), {}, false};
    if (record != nullptr) {
      run->record = *record;
      run->ranks.resize(record->attempt.ranks_size());
      for (int i = 0; i < record->attempt.ranks_size(); ++i) {
        const auto& p = record->attempt.ranks(i);
        run->ranks[i].slot = agent::Slot{p.node(), p.gpu()};
        run->ranks[i].last_seen_ms = now;
        // Every rank of a RUNNING (or later) job has started, and those lines were consumed.
        run->ranks[i].started = state != fp8d::v1::STARTING;
      }
      adoption.possible = !record->runtime.empty() &&
                          record->runtime.size() == run->ranks.size();
      for (const store::RankRuntime& rt : record->runtime) {
        if (rt.rank < 0 || rt.rank >= static_cast<int>(run->ranks.size()) || rt.pid <= 0) {
          adoption.possible = false;
          continue;
        }
        RankRun& rank = run->ranks[rt.rank];
        rank.pid = rt.pid;
        rank.start_time = rt.start_time;
        rank.offset = rt.events_offset;
        adoption.ranks.push_back(agent::RankProcess{rt.rank, rt.pid, rt.start_time, rt.events_offset});
      }
    }
    e.run = std::move(run);
    with_run_.insert(e.job.name());
    adoptions.push_back(std::move(adoption));
  }

  auto finish = [this, done = std::move(done)]() {
    // Everything recovery wrote is queued before this barrier (FIFO store thread).
    OnStore<int>([](store::JobStore&) { return 0; },
                 [this, done](int) {
                   started_ = true;
                   spdlog::info("recovery finished: {} active job(s)", jobs_.size());
                   ArmTick();
                   // SERVING first: every job is in the cache, so answers are already right,
                   // and the first round (over a deep queue) need not delay the health
                   // check. Calls that reach io run after this handler, i.e. after the round.
                   done(fp8::OkStatus());
                   Schedule();
                 });
  };
  if (adoptions.empty()) {
    finish();
    return;
  }
  // Adopt reads /proc and opens event files: on the launcher thread, then back to io.
  std::weak_ptr<int> alive = alive_;
  launcher_->Post([this, alive, adoptions = std::move(adoptions), finish]() mutable {
    auto results = std::make_shared<std::vector<Status>>();
    for (const Adoption& a : adoptions) {
      if (!a.possible) {
        results->push_back(fp8::NotFoundError("no worker pids were recorded for attempt " +
                                              std::to_string(a.attempt)));
        continue;
      }
      results->push_back(agent_->Adopt(JobIdOf(a.name), a.attempt, a.attempt_dir, a.ranks));
    }
    boost::asio::post(io_, [this, alive, adoptions = std::move(adoptions), results, finish] {
      if (alive.expired()) return;
      for (size_t i = 0; i < adoptions.size(); ++i) {
        JobEntry* e = Find(adoptions[i].name);
        if (e != nullptr && e->run != nullptr) RecoverRunning(*e, (*results)[i]);
      }
      finish();
    });
  });
}

void JobManagerImpl::RecoverRunning(JobEntry& e, Status adopted) {
  AttemptRun& run = *e.run;
  const int64_t now = NowMs();
  const std::string name = e.job.name();
  const JobState state = e.job.state();
  if (state == fp8d::v1::RETRY_WAIT || state == fp8d::v1::QUEUED) {
    // Workers of an attempt that had already failed: finish stopping them (or note that they
    // are gone); the job itself waits for its next attempt as before.
    if (adopted.ok()) {
      spdlog::warn("{}: workers of failed attempt {} are still running; stopping them", name,
                   run.number);
      run.launched = true;
      TerminateWorkers(e);
    } else {
      for (RankRun& r : run.ranks) r.exited = true;
      OnRunExited(e);  // records the attempt's end
    }
    return;
  }
  if (adopted.ok()) {
    spdlog::info("{}: re-adopted attempt {} ({} rank(s))", name, run.number, run.ranks.size());
    run.launched = true;
    run.start_ms = run.record.attempt.has_start_time()
                       ? google::protobuf::util::TimeUtil::TimestampToMilliseconds(
                             run.record.attempt.start_time())
                       : now;
    run.last_progress_ms = now;
    for (RankRun& r : run.ranks) r.last_seen_ms = now;
    if (e.job.state() == fp8d::v1::CANCELLING) TerminateWorkers(e);  // keep cancelling
    return;
  }
  spdlog::warn("{}: attempt {} could not be re-adopted: {}", name, run.number, adopted.ToString());
  for (RankRun& r : run.ranks) r.exited = true;
  if (e.job.state() == fp8d::v1::CANCELLING) {
    OnRunExited(e);  // nothing left to stop: CANCELLED
    return;
  }
  run.finished = true;
  run.exit_handled = true;
  const std::string message = "the workers of attempt " + std::to_string(run.number) +
                              " were gone after the controller restarted (" +
                              adopted.message() + "); requeued, not counted as an attempt";
  run.record.attempt.set_failure_class(fp8d::v1::CONTROLLER_RESTART);
  run.record.attempt.set_failure_message(message);
  *run.record.attempt.mutable_end_time() = TimestampFromMs(now);
  --e.counted_attempts;
  store::AttemptRecord record = run.record;
  Transition(e, fp8d::v1::RETRY_WAIT, message, nullptr,
             [name, record](store::JobStore& s) { return s.PutAttempt(name, record); });
  // Straight on to QUEUED, before the first scheduling round: the job keeps its place (its
  // create sequence) in the queue instead of waiting out a tick behind younger jobs.
  Transition(e, fp8d::v1::QUEUED, "requeued after the controller restart");
}

void JobManagerImpl::Shutdown(std::function<void()> done) {
  shutting_down_ = true;
  tick_timer_.cancel();
  create_timer_.cancel();
  agent_->Stop();  // workers keep running; the next daemon re-adopts them
  while (!pending_creates_.empty()) {
    pending_creates_.front().done(fp8::UnavailableError("fp8d is shutting down"));
    pending_creates_.pop_front();
  }
  watchers_.EndAll(fp8::UnavailableError("fp8d is shutting down"));
  // A Launch already on the launcher thread must have its pids saved, or the next daemon
  // could not re-adopt (and would start a second copy of) those workers. The launcher posts
  // its result to io before it runs this marker, so by the time the marker comes back every
  // OnLaunched has run and queued its write ahead of the final flush.
  std::weak_ptr<int> alive = alive_;
  launcher_->Post([this, alive, done = std::move(done)]() mutable {
    boost::asio::post(io_, [this, alive, done = std::move(done)]() mutable {
      if (alive.expired()) return;
      for (auto& [name, e] : jobs_) {
        if (e->run != nullptr && e->run->launched && !e->run->AllExited()) SaveAttempt(*e);
      }
      FlushDirtyRows(NowMs(), /*all=*/true);
      OnStore<int>([](store::JobStore&) { return 0; }, [done = std::move(done)](int) { done(); });
    });
  });
}

}  // namespace fp8d::core
