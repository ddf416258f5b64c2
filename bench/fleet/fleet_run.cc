// SPDX-License-Identifier: Apache-2.0
#include "bench/fleet/fleet_run.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <utility>

#include <boost/asio/post.hpp>

#include "daemon/core/job_fields.h"
#include "daemon/store/job_store.h"

namespace fp8d::bench {

namespace {

using fp8d::v1::JobState;

double MsSince(int64_t t0_us) { return static_cast<double>(SteadyMicros() - t0_us) / 1000.0; }

}  // namespace

FleetRun::FleetRun(FleetRunOptions options)
    : options_(std::move(options)), work_(boost::asio::make_work_guard(io_)) {}

fp8::StatusOr<std::unique_ptr<FleetRun>> FleetRun::Start(FleetRunOptions options) {
  std::unique_ptr<FleetRun> run(new FleetRun(std::move(options)));
  FleetRun* r = run.get();
  r->io_thread_ = std::thread([r] {
    pthread_setname_np(pthread_self(), "fp8d-io");
    r->io_tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
    r->io_.run();
  });
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<store::JobStore> opened,
                       store::OpenSqliteJobStore(r->options_.data_dir + "/fp8d.db"));
  auto store = std::make_shared<std::unique_ptr<store::JobStore>>(std::move(opened));
  // As fp8d's ManagerOptionsFor sets them; the rest are the manager's defaults, as in fp8d.
  core::ManagerOptions o;
  o.data_dir = r->options_.data_dir;
  o.worker_argv_prefix = {"/bin/false"};  // never run: the fleet plays the workers
  o.cancel_grace_ms = r->options_.cancel_grace_ms;
  o.tick_ms = r->options_.tick_ms;
  o.clean_worker_env = true;
  const FleetOptions fleet_options = r->options_.fleet;
  r->OnIo([&] {
    r->manager_ = core::NewJobManager(
        r->io_, std::move(o), std::move(*store),
        [r, fleet_options](launcher::LauncherListener* listener) {
          auto fleet = std::make_unique<FleetLauncher>(fleet_options, listener);
          r->fleet_ = fleet.get();
          return fleet;
        },
        &r->clock_);
  });
  std::promise<fp8::Status> started;
  boost::asio::post(r->io_, [&] { r->manager_->Start([&](fp8::Status st) { started.set_value(st); }); });
  FP8_RETURN_IF_ERROR(started.get_future().get());
  return run;
}

FleetRun::~FleetRun() {
  if (manager_ != nullptr) {
    std::promise<void> down;
    boost::asio::post(io_, [&] { manager_->Shutdown([&] { down.set_value(); }); });
    down.get_future().wait();
    OnIo([&] { manager_.reset(); });
  }
  work_.reset();
  io_.stop();
  if (io_thread_.joinable()) io_thread_.join();
}

void FleetRun::OnIo(const std::function<void()>& fn) {
  std::promise<void> ran;
  boost::asio::post(io_, [&] {
    fn();
    ran.set_value();
  });
  ran.get_future().wait();
}

fp8::Status FleetRun::CreateJobs() {
  std::mutex done_mu;
  std::condition_variable done_cv;
  int answered = 0;
  fp8::Status first_error;
  for (int i = 0; i < options_.jobs; ++i) {
    fp8d::v1::CreateJobRequest request;
    fp8d::v1::Job& job = *request.mutable_job();
    job.set_display_name("fleet-" + std::to_string(i));
    job.mutable_train()->mutable_model()->set_preset("tiny");
    job.mutable_train()->mutable_training()->set_max_steps(1000000);
    job.mutable_train()->set_output_dir(options_.data_dir + "/out/" + std::to_string(i));
    job.mutable_resources()->set_ranks(options_.ranks_per_job);
    job.mutable_retry()->set_max_attempts(options_.max_attempts);
    *job.mutable_retry()->mutable_initial_backoff() = core::DurationFromMs(options_.backoff_ms);
    *job.mutable_retry()->mutable_max_backoff() = core::DurationFromMs(options_.backoff_ms);
    if (options_.heartbeat_timeout_ms > 0) {
      *job.mutable_timeouts()->mutable_heartbeat_timeout() = core::DurationFromMs(options_.heartbeat_timeout_ms);
    }
    if (options_.progress_timeout_ms > 0) {
      *job.mutable_timeouts()->mutable_progress_timeout() = core::DurationFromMs(options_.progress_timeout_ms);
    }
    boost::asio::post(io_, [&, request = std::move(request)]() mutable {
      manager_->CreateJob(std::move(request), [&](fp8::StatusOr<fp8d::v1::Job> created) {
        if (created.ok()) {
          const std::string name = created->name();
          {
            std::lock_guard<std::mutex> lock(mu_);
            jobs_[name];
            names_.push_back(name);
          }
          // As a WatchJob client: every version from the first, state changes once durable.
          manager_->Watch(name, 0, [this](const fp8d::v1::Job& j) { OnUpdate(j); }, [](fp8::Status) {});
        }
        std::lock_guard<std::mutex> lock(done_mu);
        if (!created.ok() && first_error.ok()) first_error = created.status();
        ++answered;
        done_cv.notify_all();
      });
    });
  }
  std::unique_lock<std::mutex> lock(done_mu);
  done_cv.wait(lock, [&] { return answered == options_.jobs; });
  return first_error;
}

void FleetRun::OnUpdate(const fp8d::v1::Job& job) {
  const int64_t now = SteadyMicros();
  std::lock_guard<std::mutex> lock(mu_);
  JobView& v = jobs_[job.name()];
  v.state = job.state();
  v.attempt = job.attempt();
  if (v.fault < 0) return;
  FaultRecord& f = faults_[static_cast<size_t>(v.fault)];
  if (f.detected_us == 0) {
    if (job.attempt() == f.attempt && (job.state() == fp8d::v1::RETRY_WAIT || job.state() == fp8d::v1::FAILED)) {
      f.detected_us = now;
      f.state = job.state();
      f.failure = job.error().failure_class();
      f.message = job.error().message();
      if (job.state() == fp8d::v1::FAILED) v.fault = -1;  // nothing follows
    }
  } else if (job.state() == fp8d::v1::RUNNING && job.attempt() > f.attempt) {
    f.running_again_us = now;
    v.fault = -1;
  }
}

int FleetRun::CountInState(JobState state) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [name, v] : jobs_) n += v.state == state;
  return n;
}

bool FleetRun::WaitFor(const std::function<bool()>& pred, int64_t timeout_ms) const {
  const int64_t until = SteadyMicros() + timeout_ms * 1000;
  while (!pred()) {
    if (SteadyMicros() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

fp8::StatusOr<size_t> FleetRun::InjectFaultInto(const std::string& name, int rank, Fault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return fp8::NotFoundError(name + ": not a job of this run");
  JobView& v = it->second;
  if (v.state != fp8d::v1::RUNNING || v.fault >= 0) {
    return fp8::FailedPreconditionError(name + ": not RUNNING, or a fault is in flight");
  }
  FP8_ASSIGN_OR_RETURN(FleetLauncher::Injected injected,
                       fleet_->Inject(core::JobIdOf(name), v.attempt, rank, fault));
  FaultRecord f;
  f.kind = fault;
  f.job = name;
  f.attempt = v.attempt;
  f.rank = rank;
  f.at_us = injected.at_us;
  faults_.push_back(std::move(f));
  v.fault = static_cast<int>(faults_.size() - 1);
  return faults_.size() - 1;
}

fp8::StatusOr<size_t> FleetRun::InjectFault(Fault fault, std::mt19937_64& rng) {
  std::vector<std::string> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, v] : jobs_) {
      if (v.state == fp8d::v1::RUNNING && v.fault < 0) candidates.push_back(name);
    }
  }
  fp8::Status last = fp8::FailedPreconditionError("no RUNNING job without a fault in flight");
  for (int tries = 0; tries < 20 && !candidates.empty(); ++tries) {
    const std::string& name = candidates[rng() % candidates.size()];
    const int rank = static_cast<int>(rng() % static_cast<uint64_t>(options_.ranks_per_job));
    fp8::StatusOr<size_t> index = InjectFaultInto(name, rank, fault);
    if (index.ok()) return index;
    last = index.status();
  }
  return last;
}

std::vector<FaultRecord> FleetRun::faults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_;
}

std::vector<std::string> FleetRun::job_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_;
}

double FleetRun::IoDelayMs() {
  std::promise<double> ran;
  const int64_t t0 = SteadyMicros();
  boost::asio::post(io_, [&] { ran.set_value(MsSince(t0)); });
  return ran.get_future().get();
}

void FleetRun::ProbeStore() {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (names_.empty() || store_probe_sent_us_ != 0) return;
    name = names_.front();
    store_probe_sent_us_ = SteadyMicros();
  }
  boost::asio::post(io_, [this, name] {
    fp8d::v1::GetJobRequest request;
    request.set_name(name);
    request.set_view(fp8d::v1::JOB_VIEW_FULL);
    manager_->GetJob(std::move(request), [this](fp8::StatusOr<fp8d::v1::Job>) {
      std::lock_guard<std::mutex> lock(mu_);
      store_round_trips_.push_back(MsSince(store_probe_sent_us_));
      store_probe_sent_us_ = 0;
    });
  });
}

std::vector<double> FleetRun::store_round_trips() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<double> out = store_round_trips_;
  if (store_probe_sent_us_ != 0) out.push_back(MsSince(store_probe_sent_us_));
  return out;
}

}  // namespace fp8d::bench
