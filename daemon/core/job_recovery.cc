// Start-up recovery (before the daemon reports SERVING) and Shutdown.
//
// Recovery: every non-terminal job goes back into the cache. Jobs whose workers may be running
// (STARTING, RUNNING, CANCELLING, or a failed attempt never marked ended) have their attempt's
// ranks accounted for before any new attempt can start: each live rank is re-adopted (by its
// saved pid, or found through its environment when the daemon died before saving pids), and
// each gone rank's events file is read on from the saved offset, so a worker that finished,
// checkpointed or crashed while the daemon was down is judged by what it wrote. Only an attempt
// that never spawned anything (no live rank, no events file) ends with CONTROLLER_RESTART,
// which does NOT count against max_attempts, and is requeued through RETRY_WAIT (the table has
// no RUNNING → QUEUED edge) with no backoff; a CANCELLING job is simply CANCELLED. Live workers
// of this data dir that no recovered attempt owns are killed.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>
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
          cache_.Add(std::move(jobs[i]), std::move(copies[i]), NowMs());
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
    // One per rank of the attempt: the saved launcher handle and offset, or an empty handle
    // where the daemon died before saving it (the agent's search fills those in).
    std::vector<agent::RankProcess> ranks;
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
      if (CountsAsAttempt(a.attempt)) ++e.counted_attempts;
      if (a.attempt.failure_class() == fp8d::v1::RESOURCE_EXHAUSTED) {
        e.oom_steps.insert(a.attempt.failure_step());
      }
    }
    const JobState state = e.job.state();
    if (state == fp8d::v1::RETRY_WAIT) {
      const int64_t since = google::protobuf::util::TimeUtil::TimestampToMilliseconds(
          e.job.update_time());
      e.retry_at_ms = since + BackoffMs(e.job.retry(), e.counted_attempts, Uniform01());
    }
    // The current attempt's record: the launch intent (placements), handles, offsets.
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
                       record != nullptr && !record->attempt.has_end_time();
    if (!running && !stray) continue;
    auto run = std::make_unique<AttemptRun>();
    run->number = e.job.attempt();
    run->finished = state == fp8d::v1::CANCELLING || stray;
    Adoption adoption{e.job.name(), run->number, AttemptDir(e.job.name(), run->number), {}};
    if (record != nullptr) {
      run->record = *record;
      run->ranks.resize(record->attempt.ranks_size());
      for (int i = 0; i < record->attempt.ranks_size(); ++i) {
        const auto& p = record->attempt.ranks(i);
        run->ranks[i].slot = agent::Slot{p.node(), p.gpu()};
        run->ranks[i].last_seen_ms = now;
        // Every rank of a RUNNING (or later) job has started, and those lines were consumed.
        run->ranks[i].started = state != fp8d::v1::STARTING;
        adoption.ranks.push_back(agent::RankProcess{i, "", 0, 0});
      }
      for (const store::RankRuntime& rt : record->runtime) {
        if (rt.rank < 0 || rt.rank >= static_cast<int>(run->ranks.size())) continue;
        RankRun& rank = run->ranks[rt.rank];
        rank.handle = rt.handle;
        rank.offset = rt.events_offset;
        adoption.ranks[rt.rank] = agent::RankProcess{rt.rank, rt.handle, rt.events_offset, 0};
      }
    }
    e.run = std::move(run);
    cache_.AddRun(e);
    adoptions.push_back(std::move(adoption));
  }

  auto finish = [this, done = std::move(done)]() {
    // Everything recovery wrote is queued before this barrier (FIFO store thread).
    OnStore<int>([](store::JobStore&) { return 0; },
                 [this, done](int) {
                   started_ = true;
                   spdlog::info("recovery finished: {} active job(s)", cache_.size());
                   supervisor_->ArmTick();
                   // SERVING first: every job is in the cache, so answers are already right,
                   // and the first round (over a deep queue) need not delay the health
                   // check. Calls that reach io run after this handler, i.e. after the round.
                   done(fp8::OkStatus());
                   Schedule();
                 });
  };
  // Adopt reads /proc and opens event files: on the launcher thread, then back to io. Every
  // live worker of this data dir is accounted for before any new attempt can start: those of
  // a recovered attempt are adopted (found by their environment when their pids were never
  // saved), and any other (an attempt the store no longer runs) is killed.
  std::weak_ptr<int> alive = alive_;
  const std::string jobs_root = options_.data_dir + "/jobs/";
  launcher_->Post([this, alive, jobs_root, adoptions = std::move(adoptions), finish]() mutable {
    std::map<std::string, std::vector<agent::RankProcess>> live;  // attempt dir -> ranks
    if (auto found = agent_->FindWorkers(); found.ok()) {
      for (const auto& w : *found) {
        if (w.attempt_dir.rfind(jobs_root, 0) == 0) live[w.attempt_dir].push_back(w.process);
      }
    } else {
      spdlog::warn("recovery: searching for workers: {}", found.status().ToString());
    }
    auto results = std::make_shared<std::vector<Status>>();
    for (Adoption& a : adoptions) {
      auto it = live.find(a.attempt_dir);
      if (it != live.end()) {
        for (const agent::RankProcess& p : it->second) {
          if (p.rank < 0 || p.rank >= static_cast<int>(a.ranks.size())) continue;
          // The events file is the attempt's, whatever the process: a saved offset stays valid.
          a.ranks[p.rank].handle = p.handle;
          a.ranks[p.rank].pid = p.pid;
        }
        live.erase(it);
      }
      if (a.ranks.empty()) {
        results->push_back(fp8::NotFoundError("attempt " + std::to_string(a.attempt) +
                                              " has no recorded placement"));
        continue;
      }
      results->push_back(agent_->AdoptForRecovery(JobIdOf(a.name), a.attempt, a.attempt_dir, a.ranks));
    }
    for (const auto& [dir, ranks] : live) KillStrays(jobs_root, dir, ranks);
    boost::asio::post(io_, [this, alive, adoptions = std::move(adoptions), results, finish] {
      if (alive.expired()) return;
      for (size_t i = 0; i < adoptions.size(); ++i) {
        JobEntry* e = Find(adoptions[i].name);
        if (e != nullptr && e->run != nullptr) {
          for (const agent::RankProcess& p : adoptions[i].ranks) {
            if (p.rank < 0 || p.rank >= static_cast<int>(e->run->ranks.size()) || p.handle.empty()) continue;
            e->run->ranks[p.rank].handle = p.handle;
            if (p.pid > 0) e->run->record.attempt.mutable_ranks(p.rank)->set_pid(p.pid);
          }
          RecoverRunning(*e, (*results)[i]);
        }
      }
      finish();
    });
  });
}

void JobManagerImpl::KillStrays(const std::string& jobs_root, const std::string& attempt_dir,
                                const std::vector<agent::RankProcess>& ranks) {
  // <jobs root><id>/attempt-<n>
  const std::string rest = attempt_dir.substr(jobs_root.size());
  const size_t slash = rest.find("/attempt-");
  if (slash == std::string::npos) return;
  const std::string job_id = rest.substr(0, slash);
  const int attempt = std::atoi(rest.c_str() + slash + 9);
  spdlog::warn("recovery: {} worker(s) of job {} attempt {} run outside any recovered attempt; "
               "killing them", ranks.size(), job_id, attempt);
  // Adopted, so the kill goes through the agent's pid-reuse checks; their exits are ignored.
  std::vector<agent::RankProcess> adopt = ranks;
  for (auto& r : adopt) r.events_offset = 0;
  Status st = agent_->Adopt(job_id, attempt, attempt_dir, adopt);
  if (!st.ok()) {
    spdlog::warn("recovery: stray workers of job {} attempt {}: {}", job_id, attempt, st.ToString());
    return;
  }
  agent_->Signal(job_id, attempt, SIGKILL);
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
      supervisor_->TerminateWorkers(e);
    } else {
      for (RankRun& r : run.ranks) r.exited = true;
      supervisor_->OnRunExited(e);  // records the attempt's end
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
    if (e.job.state() == fp8d::v1::CANCELLING) supervisor_->TerminateWorkers(e);  // keep cancelling
    return;
  }
  spdlog::warn("{}: attempt {} could not be re-adopted: {}", name, run.number, adopted.ToString());
  for (RankRun& r : run.ranks) r.exited = true;
  if (e.job.state() == fp8d::v1::CANCELLING) {
    supervisor_->OnRunExited(e);  // nothing left to stop: CANCELLED
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
  supervisor_->Stop();  // no more events, exits or ticks
  agent_->Stop();  // workers keep running; the next daemon re-adopts them
  creates_->FailQueued(fp8::UnavailableError("fp8d is shutting down"));
  watchers_.EndAll(fp8::UnavailableError("fp8d is shutting down"));
  // A Launch already on the launcher thread must have its pids saved, or the next daemon
  // could not re-adopt (and would start a second copy of) those workers. The launcher posts
  // its result to io before it runs this marker, so by the time the marker comes back every
  // OnLaunched has run and queued its write ahead of the final flush.
  std::weak_ptr<int> alive = alive_;
  launcher_->Post([this, alive, done = std::move(done)]() mutable {
    boost::asio::post(io_, [this, alive, done = std::move(done)]() mutable {
      if (alive.expired()) return;
      cache_.ForEach([this](JobEntry& e) {
        if (e.run != nullptr && e.run->launched && !e.run->AllExited()) supervisor_->SaveAttempt(e);
      });
      supervisor_->FlushDirtyRows(NowMs(), /*all=*/true);
      OnStore<int>([](store::JobStore&) { return 0; }, [done = std::move(done)](int) { done(); });
    });
  });
}

}  // namespace fp8d::core
