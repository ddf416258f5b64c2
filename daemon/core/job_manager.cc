// SPDX-License-Identifier: Apache-2.0
// JobManager: construction, the API's commands and the plumbing they share. See
// job_manager_impl.h for how the implementation is split and why it needs no locks.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"
#include "daemon/core/new_job.h"
#include "jobspec/kind.h"

namespace fp8d::core {

using fp8d::v1::CreateJobRequest;

JobManagerImpl::JobManagerImpl(boost::asio::io_context& io, ManagerOptions options,
                               std::unique_ptr<store::JobStore> store, LauncherFactory make_launcher,
                               const Clock* clock)
    : io_(io),
      options_(std::move(options)),
      store_(std::move(store)),
      clock_(clock) {
  std::error_code ec;
  cwd_ = std::filesystem::current_path(ec).string();
  // Attempt dirs are handed to workers that run in other directories: make them absolute.
  options_.data_dir = std::filesystem::absolute(options_.data_dir, ec).lexically_normal().string();
  if (options_.tick_ms <= 0) options_.tick_ms = 50;
  store_thread_ = std::make_unique<StoreThread>(io, *store_);
  launcher_ = make_launcher(this);
  FP8_CHECK(launcher_ != nullptr);
  admission_ = std::make_unique<JobAdmission>(cache_, *launcher_);
  writer_ = std::make_unique<StoreJobWriter>(io, cache_, *store_thread_, clock_,
                                             [this](const Job& gone) { admission_->Release(gone); });
  writer_->OnCommitted([this](const Job& job, const fp8d::v1::JobEvent& event) {
    counters_.Count(job, event);
    // Dependencies act on a terminal state once it is published (after this hook returns).
    if (IsTerminal(job.state()) && (job.depends_on_size() > 0 || dependencies_.HasDependents(job.name()))) {
      Job finished;
      finished.set_name(job.name());
      finished.set_state(job.state());
      *finished.mutable_depends_on() = job.depends_on();
      Defer([this, finished = std::move(finished)] { OnJobFinished(finished); });
    }
  });
  CreateBatcher::Hooks hooks;
  hooks.run_on_store = [this](std::function<void(store::JobStore&)> on_store,
                              std::function<void()> on_io) {
    store_thread_->Run<int>([on_store = std::move(on_store)](store::JobStore& s) { on_store(s); return 0; },
                            [on_io = std::move(on_io)](int) { on_io(); });
  };
  hooks.created = [this](const Job& job) {
    cache_.Add(job, NowMs());
    if (job.depends_on_size() > 0) RegisterDependent(job.name());
  };
  hooks.current = [this](const std::string& name) -> std::optional<Job> {
    if (JobEntry* e = Find(name)) return e->delivered();
    return std::nullopt;
  };
  hooks.batch_created = [this] { Schedule(); };
  creates_ = std::make_unique<CreateBatcher>(io, options_.create_batch_max,
                                             options_.create_batch_wait_max_us, std::move(hooks));
  supervisor_ = std::make_unique<JobSupervisor>(
      io,
      JobSupervisor::Options{.tick_ms = options_.tick_ms,
                             .cancel_grace_ms = options_.cancel_grace_ms,
                             .preemption_grace_ms = options_.preemption_grace_ms,
                             .progress_flush_ms = options_.progress_flush_ms,
                             .runtime_flush_ms = options_.runtime_flush_ms,
                             .uniform01 = [this] { return Uniform01(); }},
      cache_, *launcher_, clock_, *writer_, static_cast<JobSupervisor::Owner&>(*this));
  attempt_launcher_ = std::make_unique<AttemptLauncher>(io, options_, cache_, *writer_, *supervisor_,
                                                *launcher_, clock_);
}

JobManagerImpl::~JobManagerImpl() {
  alive_.reset();  // completions already posted to io become no-ops
  supervisor_.reset();  // cancels the tick
  creates_.reset();
  launcher_->Stop();
  // Join the threads while the store and the launcher they use still exist.
  attempt_launcher_.reset();
  store_thread_.reset();
  writer_.reset();
  launcher_.reset();
}

void JobManagerImpl::OnWorkerEvent(launcher::WorkerEvent event) {
  std::weak_ptr<int> alive = alive_;
  boost::asio::post(io_, [this, alive, event = std::move(event)] {
    if (!alive.expired()) supervisor_->HandleEvent(event);
  });
}

void JobManagerImpl::OnWorkerExit(launcher::WorkerExit exit) {
  std::weak_ptr<int> alive = alive_;
  boost::asio::post(io_, [this, alive, exit = std::move(exit)] {
    if (!alive.expired()) supervisor_->HandleExit(exit);
  });
}

void JobManagerImpl::Defer(std::function<void()> fn) {
  std::weak_ptr<int> alive = alive_;
  boost::asio::post(io_, [alive, fn = std::move(fn)] {
    if (!alive.expired()) fn();
  });
}

double JobManagerImpl::Uniform01() {
  if (options_.uniform01) return options_.uniform01();
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

// ---------------------------------------------------------------------------------------------
// CreateJob: checked and admitted here, written by the group commit (create_batcher.h).

void JobManagerImpl::CreateJob(CreateJobRequest request, std::optional<std::string> output_dir_key,
                               std::function<void(StatusOr<Job>)> done) {
  if (shutting_down_) {
    done(fp8::UnavailableError("fp8d is shutting down; no new jobs are accepted"));
    return;
  }
  store::CreateRequest create;
  create.request_id = request.request_id();
  create.job = std::move(*request.mutable_job());
  create.job.set_request_id(create.request_id);
  // The key was resolved from the output_dir as written; it is the stored one's only while
  // PrepareNewJob leaves that string as it is (it rewrites `a/../b`, which need not resolve
  // alike when `a` is a symlink).
  std::string written;
  if (output_dir_key) written = fp8::jobspec::SpecOutputDir(create.job);
  StatusOr<std::string> hash = PrepareNewJob(&create.job, cwd_, NowMs());
  if (!hash.ok()) {
    done(hash.status());
    return;
  }
  create.request_hash = std::move(hash).value();
  if (output_dir_key && fp8::jobspec::SpecOutputDir(create.job) != written) output_dir_key.reset();
  if (create.job.depends_on_size() == 0) return AdmitCreate(std::move(create), std::move(output_dir_key), std::move(done));
  // Only a job with depends_on pays for the check (a store read per finished dependency).
  const Job job = create.job;
  CheckDependencies(job, [this, create = std::move(create), output_dir_key = std::move(output_dir_key),
                          done = std::move(done)](Status checked) mutable {
    if (!checked.ok()) return done(checked);
    if (shutting_down_) return done(fp8::UnavailableError("fp8d is shutting down; no new jobs are accepted"));
    AdmitCreate(std::move(create), std::move(output_dir_key), std::move(done));
  });
}

void JobManagerImpl::AdmitCreate(store::CreateRequest create, std::optional<std::string> output_dir_key,
                                 std::function<void(StatusOr<Job>)> done) {
  StatusOr<std::string> admitted =
      admission_->Admit(create.job, create.request_id,
                        output_dir_key ? *std::move(output_dir_key) : OutputDirKey(create.job));
  if (!admitted.ok()) {
    done(admitted.status());
    return;
  }
  // The output dir is claimed until the create is answered: then the job's name holds it.
  if (std::string key = std::move(admitted).value(); !key.empty()) {
    done = [this, key = std::move(key), done = std::move(done)](StatusOr<Job> result) {
      admission_->Settle(key, result);
      done(std::move(result));
    };
  }
  creates_->Add(std::move(create), std::move(done));
}

// ---------------------------------------------------------------------------------------------

void JobManagerImpl::GetJob(fp8d::v1::GetJobRequest request,
                            std::function<void(StatusOr<Job>)> done) {
  const std::string name = request.name();
  const bool full = request.view() == fp8d::v1::JOB_VIEW_FULL;
  JobEntry* e = Find(name);
  if (e != nullptr && !full) {
    done(e->delivered());
    return;
  }
  std::optional<Job> cached;
  if (e != nullptr) cached = e->delivered();
  store_thread_->Run<StatusOr<Job>>(
      [name, cached, full](store::JobStore& s) -> StatusOr<Job> {
        Job job;
        if (cached) {
          job = *cached;
        } else {
          FP8_ASSIGN_OR_RETURN(job, s.GetJob(name));
        }
        job.clear_attempts();
        job.clear_events();
        if (full) {
          FP8_ASSIGN_OR_RETURN(auto attempts, s.ListAttempts(name));
          for (auto& a : attempts) *job.add_attempts() = std::move(a.attempt);
          FP8_ASSIGN_OR_RETURN(auto events, s.ListEvents(name));
          for (auto& ev : events) *job.add_events() = std::move(ev);
        }
        return job;
      },
      [this, name, done = std::move(done)](StatusOr<Job> job) {
        // The running attempt's pids may be newer in memory than in the store.
        if (job.ok()) {
          JobEntry* e = Find(name);
          if (e != nullptr && e->run != nullptr) {
            for (auto& a : *job->mutable_attempts()) {
              if (a.number() == e->run->number) a = e->run->record.attempt;
            }
          }
        }
        done(std::move(job));
      });
}

void JobManagerImpl::ListJobs(fp8d::v1::ListJobsRequest request,
                              std::function<void(StatusOr<fp8d::v1::ListJobsResponse>)> done) {
  store::ListFilter filter;
  filter.state = request.state();
  filter.kind = request.kind();
  filter.page_size = request.page_size() <= 0 ? 50 : std::min(request.page_size(), 1000);
  filter.page_token = request.page_token();
  // Validated at the API edge; parsed again here so the manager needs no API types.
  auto selector = fp8::ParseLabelSelector(request.label_selector());
  if (!selector.ok()) return done(selector.status());
  filter.labels = std::move(selector).value();
  filter.owner = request.owner();  // `me` already resolved to the caller at the API edge
  store_thread_->Run<StatusOr<store::ListResult>>(
      [filter](store::JobStore& s) { return s.ListJobs(filter); },
      [this, done = std::move(done)](StatusOr<store::ListResult> result) {
        if (!result.ok()) {
          done(result.status());
          return;
        }
        fp8d::v1::ListJobsResponse response;
        for (auto& job : result->jobs) {
          Job& out = *response.add_jobs();
          out = cache_.Newest(job);
          out.clear_attempts();
          out.clear_events();
        }
        response.set_next_page_token(result->next_page_token);
        done(std::move(response));
      });
}

void JobManagerImpl::ReplyCurrent(const std::string& name, std::function<void(StatusOr<Job>)> done) {
  if (JobEntry* e = Find(name)) return done(e->delivered());
  fp8d::v1::GetJobRequest request;
  request.set_name(name);
  GetJob(std::move(request), std::move(done));
}

// ---------------------------------------------------------------------------------------------

void JobManagerImpl::CancelJob(fp8d::v1::CancelJobRequest request,
                               std::function<void(StatusOr<Job>)> done) {
  const std::string name = request.name();
  if (JobEntry* e = Find(name); e != nullptr) {
    // What a cancel does is the supervisor's to decide (job_supervisor.h: Cancel).
    supervisor_->Cancel(*e, [this, name, done = std::move(done)](Status st) {
      if (!st.ok()) return done(st);
      ReplyCurrent(name, done);
    });
    return;
  }
  // Not active: a finished job (or none). Cancel is idempotent on CANCELLED only.
  store_thread_->Run<StatusOr<Job>>(
      [name](store::JobStore& s) { return s.GetJob(name); },
      [this, name, done = std::move(done)](StatusOr<Job> job) {
        if (Find(name) != nullptr) {
          // Became active meanwhile (recovery): go through the normal path.
          fp8d::v1::CancelJobRequest retry;
          retry.set_name(name);
          CancelJob(std::move(retry), std::move(done));
          return;
        }
        if (!job.ok()) return done(job.status());
        if (job->state() == fp8d::v1::CANCELLED) return done(std::move(job));
        if (IsTerminal(job->state())) return done(JobSupervisor::NotCancellable(*job));
        done(fp8::UnavailableError(name + " is being recovered; retry shortly"));
      });
}

// ---------------------------------------------------------------------------------------------

int64_t JobManagerImpl::Watch(const std::string& name, int64_t since_version,
                              std::function<void(const Job&)> on_update,
                              std::function<void(Status)> on_end) {
  const int64_t id =
      watchers_.Subscribe(name, since_version, std::move(on_update), std::move(on_end));
  // The snapshot goes out from a later handler: the caller gets its id before any callback.
  Defer([this, id, name] {
    if (!watchers_.Has(id)) return;
    if (JobEntry* e = Find(name); e != nullptr) {
      watchers_.DeliverTo(id, e->delivered());
      return;
    }
    store_thread_->Run<StatusOr<Job>>([name](store::JobStore& s) { return s.GetJob(name); },
                           [this, id, name](StatusOr<Job> job) {
                             if (!watchers_.Has(id)) return;
                             if (JobEntry* e = Find(name); e != nullptr) {
                               watchers_.DeliverTo(id, e->delivered());
                             } else if (!job.ok()) {
                               watchers_.End(id, job.status());
                             } else {
                               watchers_.DeliverTo(id, *job);  // terminal: also ends it
                             }
                           });
  });
  return id;
}

void JobManagerImpl::Unwatch(int64_t subscription) { watchers_.Unsubscribe(subscription); }

void JobManagerImpl::RankLog(const std::string& name, int rank, int attempt,
                             std::function<void(StatusOr<RankLogSource>, bool)> done) {
  std::optional<Job> cached;
  if (JobEntry* e = Find(name); e != nullptr) cached = e->job;
  struct Answer {
    StatusOr<RankLogSource> path = fp8::NotFoundError("");
    bool terminal = false;
  };
  const std::string data_dir = options_.data_dir;
  store_thread_->Run<Answer>(
      [launcher = launcher_.get(), data_dir, name, rank, attempt, cached](store::JobStore& s) {
        Answer a;
        Job job;
        if (cached) {
          job = *cached;
        } else {
          auto got = s.GetJob(name);
          if (!got.ok()) {
            a.path = got.status();
            return a;
          }
          job = std::move(*got);
        }
        a.terminal = IsTerminal(job.state());
        const int n = attempt > 0 ? attempt : job.attempt();
        if (n <= 0 || n > job.attempt()) {
          a.path = fp8::NotFoundError(n <= 0 ? name + " has not started an attempt yet"
                                             : "attempt: " + name + " has no attempt " +
                                                   std::to_string(n));
          return a;
        }
        if (rank < 0 || rank >= job.resources().ranks()) {
          a.path = fp8::InvalidArgumentError("rank: " + name + " has ranks 0.." +
                                             std::to_string(job.resources().ranks() - 1));
          return a;
        }
        // The launcher opens it: the core knows neither its file names nor where it keeps them.
        RankLogSource source;
        source.attempt = n;
        source.open = [launcher, job_id = JobIdOf(name), n, dir = AttemptDirOf(data_dir, name, n), rank] {
          return launcher->OpenRankLog(job_id, n, dir, rank);
        };
        a.path = std::move(source);
        return a;
      },
      [done = std::move(done)](Answer a) { done(std::move(a.path), a.terminal); });
}

JobManager::ActiveCounts JobManagerImpl::CountActive() const {
  ActiveCounts counts;
  counts.queued = static_cast<int64_t>(cache_.queued().size());
  counts.running = cache_.CountRunning();
  return counts;
}

ManagerFigures JobManagerImpl::Figures() const {
  ManagerFigures figures;
  figures.counters = counters_;
  figures.queues = QueueView();
  if (launcher_->QueuesJobs()) return figures;
  // Held as the scheduler counts them: every rank of a run whose workers have not all exited.
  SlotCounts slots;
  for (const launcher::Slot& s : launcher_->Slots()) ++(s.gpu >= 0 ? slots.gpu_total : slots.cpu_total);
  for (const std::string& name : cache_.with_run()) {
    const JobEntry* e = cache_.Find(name);
    if (e == nullptr || e->run == nullptr || e->run->AllExited()) continue;
    for (const RankRun& r : e->run->ranks) ++(r.slot.gpu >= 0 ? slots.gpu_used : slots.cpu_used);
  }
  figures.slots = slots;
  return figures;
}

std::unique_ptr<JobManager> NewJobManager(boost::asio::io_context& io, ManagerOptions options,
                                          std::unique_ptr<store::JobStore> store,
                                          LauncherFactory make_launcher, const Clock* clock) {
  return std::make_unique<JobManagerImpl>(io, std::move(options), std::move(store),
                                          std::move(make_launcher), clock);
}

}  // namespace fp8d::core
