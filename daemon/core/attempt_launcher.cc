// SPDX-License-Identifier: Apache-2.0
// AttemptLauncher (attempt_launcher.h): start, launch, re-adopt.
#include "daemon/core/attempt_launcher.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>
#include <utility>

#include <boost/asio/post.hpp>
#include <google/protobuf/util/time_util.h>
#include <spdlog/spdlog.h>

#include "daemon/api/job_env.h"
#include "daemon/core/failpoint.h"
#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"

extern char** environ;

namespace fp8d::core {

using fp8::Status;
using fp8d::v1::JobState;

AttemptLauncher::AttemptLauncher(boost::asio::io_context& io, const ManagerOptions& options,
                                 JobCache& cache, JobWriter& writer, JobSupervisor& supervisor,
                                 launcher::Launcher& launcher, const Clock* clock)
    : io_(io),
      options_(options),
      cache_(cache),
      writer_(writer),
      supervisor_(supervisor),
      launcher_(launcher),
      clock_(clock),
      thread_(std::make_unique<BlockingWorker>("fp8d-launcher")) {}

AttemptLauncher::~AttemptLauncher() {
  alive_.reset();
  thread_.reset();
}

void AttemptLauncher::OnLauncher(std::function<void()> fn, std::function<void()> then) {
  std::weak_ptr<int> alive = alive_;
  thread_->Post([this, alive, fn = std::move(fn), then = std::move(then)]() mutable {
    fn();
    boost::asio::post(io_, [alive, then = std::move(then)] {
      if (!alive.expired()) then();
    });
  });
}

void AttemptLauncher::Drain(std::function<void()> then) {
  // The launcher posts each launch's result to io before it runs this marker, so by the time
  // the marker comes back every OnLaunched has run.
  OnLauncher([] {}, std::move(then));
}

// ---------------------------------------------------------------------------------------------
// A new attempt

std::string AttemptLauncher::ChooseResume(const JobEntry& e) const {
  // Checkpoints are only reported once complete on disk (docs/design.md §4), oldest first here.
  size_t usable = e.checkpoints.size();
  // NaN/Inf loss: the newest checkpoint may already carry the divergence, so go one back
  // (docs/design.md §2, NUMERIC); with only one, start fresh.
  if (e.skip_newest_checkpoint && usable > 0) --usable;
  return usable == 0 ? std::string() : e.checkpoints[usable - 1].path();
}

void AttemptLauncher::StartAttempt(JobEntry& e, const std::vector<launcher::Slot>& slots) {
  const int64_t now = clock_->NowMs();
  auto run = std::make_unique<AttemptRun>();
  run->number = e.job.attempt() + 1;
  fp8d::v1::Attempt& a = run->record.attempt;
  a.set_number(run->number);
  *a.mutable_start_time() = TimestampFromMs(now);
  a.set_resumed_from(ChooseResume(e));
  for (size_t r = 0; r < slots.size(); ++r) {
    fp8d::v1::RankPlacement* p = a.add_ranks();
    p->set_rank(static_cast<int32_t>(r));
    p->set_node(slots[r].node);
    p->set_gpu(slots[r].gpu);
    p->set_exit_status(-1);
    RankRun rank;
    rank.slot = slots[r];
    rank.last_seen_ms = now;
    run->ranks.push_back(std::move(rank));
  }
  run->start_ms = now;
  run->last_progress_ms = now;

  e.BeforeChange();
  e.job.set_attempt(run->number);
  e.job.clear_error();  // the previous attempt's failure is in its attempt record
  ++e.counted_attempts;
  e.skip_newest_checkpoint = false;

  std::string where;
  for (const auto& s : slots) {
    if (!where.empty()) where += ", ";
    where += s.node + (s.gpu >= 0 ? ":gpu" + std::to_string(s.gpu) : ":cpu");
  }
  const std::string name = e.job.name();
  const int number = run->number;
  store::AttemptRecord record = run->record;
  const std::string resumed = a.resumed_from();
  e.run = std::move(run);
  cache_.AddRun(e);
  writer_.Transition(
      e, fp8d::v1::STARTING,
      "attempt " + std::to_string(number) + " placed on " + where +
          (resumed.empty() ? "" : "; resuming from " + resumed),
      [this, name, number](Status st) {
        if (!st.ok()) return;
        Failpoint("after_intent");
        Launch(name, number);
      },
      [name, record](store::JobStore& s) { return s.PutAttempt(name, record); });
}

StatusOr<launcher::LaunchRequest> AttemptLauncher::MakeRequest(const JobEntry& e) const {
  const std::string& name = e.job.name();
  const AttemptRun& run = *e.run;
  const std::string default_output = options_.data_dir + "/jobs/" + JobIdOf(name) + "/output";
  FP8_ASSIGN_OR_RETURN(WorkerSpec spec, MakeWorkerSpec(e.job, default_output));
  // A job stored before the allowlist (or before the operator narrowed it) is not launched
  // with an environment CreateJob would refuse now.
  FP8_RETURN_IF_ERROR(api::ValidateJobEnv(e.job, options_.job_env_allow));
  launcher::LaunchRequest request;
  request.job_id = JobIdOf(name);
  request.attempt = run.number;
  request.kind = spec.kind;
  request.spec_json = spec.json;
  request.attempt_dir = AttemptDirOf(options_.data_dir, name, run.number);
  for (const RankRun& r : run.ranks) request.slots.push_back(r.slot);
  if (e.job.has_train()) request.checkpoint_dir = spec.output_dir + "/checkpoints";
  request.resume_from = run.record.attempt.resumed_from();
  request.worker_argv_prefix = options_.worker_argv_prefix;
  request.uid = e.job.run_as_uid();
  if (options_.clean_worker_env) {
    std::map<std::string, std::string> env =
        launcher::AllowlistedEnvironment(environ, options_.worker_env_allow);
    for (const auto& [k, v] : options_.worker_env) env[k] = v;
    for (const auto& [k, v] : e.job.env()) env[k] = v;
    request.env = std::move(env);
  }
  const fp8d::v1::Resources& res = e.job.resources();
  request.nodes = res.nodes();
  request.ranks_per_node = res.ranks_per_node();
  request.partition = res.slurm().partition();
  request.account = res.slurm().account();
  request.qos = res.slurm().qos();
  request.constraint = res.slurm().constraint();
  // The worker's spec is the train spec alone; how its ranks share out the experts comes with
  // the rest of the placement, beside FP8D_WORLD_SIZE.
  if (res.expert_parallel() > 1) request.extra_env["FP8D_EXPERT_PARALLEL"] = std::to_string(res.expert_parallel());
  if (const int64_t deadline = MsFromDuration(e.job.timeouts().attempt_deadline()); deadline > 0) {
    request.time_limit_ms = deadline + options_.cancel_grace_ms;  // fp8d stops it first
  }
  return request;
}

void AttemptLauncher::Launch(const std::string& name, int number) {
  JobEntry* e = cache_.Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != number || stopped_) return;
  AttemptRun& run = *e->run;
  if (e->job.state() != fp8d::v1::STARTING || run.finished) {
    // Cancelled (or failed) before its workers existed: there is nothing to stop.
    for (RankRun& r : run.ranks) r.exited = true;
    supervisor_.OnRunExited(*e);
    return;
  }
  StatusOr<launcher::LaunchRequest> request = MakeRequest(*e);
  if (!request.ok()) {
    // The spec or its environment is refused: final, not retried.
    for (RankRun& r : run.ranks) r.exited = true;
    supervisor_.FailAttempt(*e, fp8d::v1::INVALID_SPEC, request.status().message());
    supervisor_.OnRunExited(*e);
    return;
  }
  const int64_t now = clock_->NowMs();
  for (RankRun& r : run.ranks) r.last_seen_ms = now;
  auto result = std::make_shared<StatusOr<std::vector<launcher::RankProcess>>>(fp8::InternalError("not launched"));
  OnLauncher(
      [this, result, request = std::move(request).value()] {
        *result = launcher_.Launch(request);
        if (result->ok()) Failpoint("after_spawn");
      },
      [this, name, number, result] { OnLaunched(name, number, std::move(*result)); });
}

void AttemptLauncher::OnLaunched(const std::string& name, int number,
                                 StatusOr<std::vector<launcher::RankProcess>> result) {
  JobEntry* e = cache_.Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != number) return;
  AttemptRun& run = *e->run;
  if (!result.ok()) {
    spdlog::error("{}: launching attempt {} failed: {}", name, number, result.status().ToString());
    for (RankRun& r : run.ranks) r.exited = true;  // the launcher started none (or reaped them)
    if (!run.finished && e->job.state() == fp8d::v1::STARTING) {
      if (result.status().code() == fp8::StatusCode::kUnavailable) {
        // The controller could not write the attempt's own files (its disk, not the job's
        // fault): retried with backoff, not counted against max_attempts.
        run.record.attempt.set_controller_fault(true);
        --e->counted_attempts;
        supervisor_.FailAttempt(*e, fp8d::v1::INTERNAL_ERROR,
                                "the controller could not prepare the attempt (" +
                                    result.status().message() + "); retried, not counted as an attempt");
      } else {
        // INVALID_ARGUMENT: the launcher refused the request itself (Slurm rejected the job:
        // unknown partition, an account it does not know); asking again cannot help.
        const bool refused = result.status().code() == fp8::StatusCode::kInvalidArgument;
        supervisor_.FailAttempt(*e, refused ? fp8d::v1::INVALID_SPEC : fp8d::v1::INTERNAL_ERROR,
                                "could not start the workers: " + result.status().message());
      }
    }
    supervisor_.OnRunExited(*e);
    return;
  }
  const int64_t now = clock_->NowMs();
  run.launched = true;
  run.start_ms = now;
  run.last_progress_ms = now;
  for (const launcher::RankProcess& p : *result) {
    if (p.rank < 0 || p.rank >= static_cast<int>(run.ranks.size())) continue;
    RankRun& r = run.ranks[p.rank];
    r.handle = p.handle;
    r.offset = std::max(r.offset, p.events_offset);
    r.last_seen_ms = std::max(r.last_seen_ms, now);
    run.record.attempt.mutable_ranks(p.rank)->set_pid(p.pid);
  }
  // The launcher's handles: what recovery needs to re-adopt (it can also find the workers
  // without them, by their environment).
  supervisor_.SaveAttempt(*e, [](Status st) {
    if (st.ok()) Failpoint("after_pid_save");
  });
  spdlog::info("{}: attempt {} launched {} rank(s)", name, number, run.ranks.size());
  // A cancel, a failure verdict or a preemption that came while the workers were being started.
  if (e->job.state() == fp8d::v1::CANCELLING || run.finished || run.preempt_durable) supervisor_.StopRun(*e);
}

// ---------------------------------------------------------------------------------------------
// Re-adoption after a restart

void AttemptLauncher::Readopt(std::vector<Recovered> jobs, std::function<void()> done) {
  struct Adoption {
    std::string name;
    int attempt = 0;
    std::string attempt_dir;
    // One per rank of the attempt: the saved launcher handle and offset, or an empty handle
    // where the daemon died before saving it (the launcher's search fills those in).
    std::vector<launcher::RankProcess> ranks;
  };
  auto adoptions = std::make_shared<std::vector<Adoption>>();
  const int64_t now = clock_->NowMs();
  for (const Recovered& r : jobs) {
    JobEntry* found = cache_.Find(r.name);
    if (found == nullptr) continue;
    JobEntry& e = *found;
    // The current attempt's record: the launch intent (placements), handles, offsets.
    const store::AttemptRecord* record = nullptr;
    for (const auto& a : r.attempts) {
      if (a.attempt.number() == e.job.attempt()) record = &a;
    }
    const JobState state = e.job.state();
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
    Adoption adoption{e.job.name(), run->number, AttemptDirOf(options_.data_dir, e.job.name(), run->number), {}};
    if (record != nullptr) {
      run->record = *record;
      run->ranks.resize(record->attempt.ranks_size());
      for (int i = 0; i < record->attempt.ranks_size(); ++i) {
        const auto& p = record->attempt.ranks(i);
        run->ranks[i].slot = launcher::Slot{p.node(), p.gpu()};
        run->ranks[i].last_seen_ms = now;
        // Every rank of a RUNNING (or later) job has started, and those lines were consumed.
        run->ranks[i].started = state != fp8d::v1::STARTING;
        adoption.ranks.push_back(launcher::RankProcess{i, "", 0, 0});
      }
      for (const store::RankRuntime& rt : record->runtime) {
        if (rt.rank < 0 || rt.rank >= static_cast<int>(run->ranks.size())) continue;
        RankRun& rank = run->ranks[rt.rank];
        rank.handle = rt.handle;
        rank.offset = rt.events_offset;
        adoption.ranks[rt.rank] = launcher::RankProcess{rt.rank, rt.handle, rt.events_offset, 0};
      }
    }
    e.run = std::move(run);
    cache_.AddRun(e);
    adoptions->push_back(std::move(adoption));
  }

  // Adopt reads /proc and opens event files: on the launcher thread, then back to io. Every
  // live worker of this data dir is accounted for before any new attempt can start: those of
  // a recovered attempt are adopted (found by their environment when their pids were never
  // saved), and any other (an attempt the store no longer runs) is killed.
  const std::string jobs_root = options_.data_dir + "/jobs/";
  auto results = std::make_shared<std::vector<Status>>();
  OnLauncher(
      [this, jobs_root, adoptions, results] {
        std::map<std::string, std::vector<launcher::RankProcess>> live;  // attempt dir -> ranks
        if (auto found = launcher_.FindWorkers(); found.ok()) {
          for (const auto& w : *found) {
            if (w.attempt_dir.rfind(jobs_root, 0) == 0) live[w.attempt_dir].push_back(w.process);
          }
        } else {
          spdlog::warn("recovery: searching for workers: {}", found.status().ToString());
        }
        for (Adoption& a : *adoptions) {
          auto it = live.find(a.attempt_dir);
          if (it != live.end()) {
            for (const launcher::RankProcess& p : it->second) {
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
          results->push_back(launcher_.AdoptForRecovery(JobIdOf(a.name), a.attempt, a.attempt_dir, a.ranks));
        }
        for (const auto& [dir, ranks] : live) KillStrays(jobs_root, dir, ranks);
      },
      [this, adoptions, results, done = std::move(done)] {
        for (size_t i = 0; i < adoptions->size(); ++i) {
          const Adoption& a = (*adoptions)[i];
          JobEntry* e = cache_.Find(a.name);
          if (e == nullptr || e->run == nullptr) continue;
          for (const launcher::RankProcess& p : a.ranks) {
            if (p.rank < 0 || p.rank >= static_cast<int>(e->run->ranks.size()) || p.handle.empty()) continue;
            e->run->ranks[p.rank].handle = p.handle;
            if (p.pid > 0) e->run->record.attempt.mutable_ranks(p.rank)->set_pid(p.pid);
          }
          Resume(*e, (*results)[i]);
        }
        done();
      });
}

void AttemptLauncher::KillStrays(const std::string& jobs_root, const std::string& attempt_dir,
                                 const std::vector<launcher::RankProcess>& ranks) {
  // <jobs root><id>/attempt-<n>
  const std::string rest = attempt_dir.substr(jobs_root.size());
  const size_t slash = rest.find("/attempt-");
  if (slash == std::string::npos) return;
  const std::string job_id = rest.substr(0, slash);
  const int attempt = std::atoi(rest.c_str() + slash + 9);
  spdlog::warn("recovery: {} worker(s) of job {} attempt {} run outside any recovered attempt; "
               "killing them", ranks.size(), job_id, attempt);
  // Adopted, so the kill goes through the launcher's pid-reuse checks; their exits are ignored.
  std::vector<launcher::RankProcess> adopt = ranks;
  for (auto& r : adopt) r.events_offset = 0;
  Status st = launcher_.Adopt(job_id, attempt, attempt_dir, adopt);
  if (!st.ok()) {
    spdlog::warn("recovery: stray workers of job {} attempt {}: {}", job_id, attempt, st.ToString());
    return;
  }
  launcher_.Signal(job_id, attempt, SIGKILL);
}

void AttemptLauncher::Resume(JobEntry& e, Status adopted) {
  AttemptRun& run = *e.run;
  const int64_t now = clock_->NowMs();
  const std::string name = e.job.name();
  const JobState state = e.job.state();
  if (state == fp8d::v1::RETRY_WAIT || state == fp8d::v1::QUEUED) {
    // Workers of an attempt that had already failed: finish stopping them (or note that they
    // are gone); the job itself waits for its next attempt as before.
    if (adopted.ok()) {
      spdlog::warn("{}: workers of failed attempt {} are still running; stopping them", name,
                   run.number);
      run.launched = true;
      supervisor_.StopRun(e);
    } else {
      for (RankRun& r : run.ranks) r.exited = true;
      supervisor_.OnRunExited(e);  // records the attempt's end
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
    if (state == fp8d::v1::CANCELLING) supervisor_.StopRun(e);  // keep cancelling
    return;
  }
  spdlog::warn("{}: attempt {} could not be re-adopted: {}", name, run.number, adopted.ToString());
  for (RankRun& r : run.ranks) r.exited = true;
  if (state == fp8d::v1::CANCELLING) {
    supervisor_.OnRunExited(e);  // nothing left to stop: CANCELLED
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
  writer_.Transition(e, fp8d::v1::RETRY_WAIT, message, nullptr,
                     [name, record](store::JobStore& s) { return s.PutAttempt(name, record); });
  // Straight on to QUEUED, before the first scheduling round: the job keeps its place (its
  // create sequence) in the queue instead of waiting out a tick behind younger jobs.
  writer_.Transition(e, fp8d::v1::QUEUED, "requeued after the controller restart");
}

}  // namespace fp8d::core
