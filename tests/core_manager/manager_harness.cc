// SPDX-License-Identifier: Apache-2.0
#include "tests/core_manager/manager_harness.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <google/protobuf/util/json_util.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_manager_impl.h"

namespace fp8d::core::testing {

using fp8d::v1::Job;

void ManagerTest::SetUp() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fp8d-manager-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  data_dir_ = tmpl;
  store_ = store::NewMemoryJobStore();
  launcher_->slots = {launcher::Slot{"node-a", -1}, launcher::Slot{"node-a", -1}};
}

void ManagerTest::TearDown() {
  manager_.reset();
  std::error_code ec;
  std::filesystem::remove_all(data_dir_, ec);
}

ManagerOptions ManagerTest::Options() const {
  ManagerOptions o;
  o.data_dir = data_dir_;
  o.worker_argv_prefix = {"/bin/fake-worker"};
  o.cancel_grace_ms = 5000;
  o.tick_ms = 1;
  o.uniform01 = [] { return 0.5; };  // no jitter: backoffs are exact
  return o;
}

void ManagerTest::StartManager() { StartManager(Options()); }

void ManagerTest::StartManager(ManagerOptions options) {
  auto state = launcher_;
  manager_ = NewJobManager(
      io_, std::move(options), std::make_unique<SharedStore>(store_, create_calls_, update_jobs_calls_, fail_writes_),
      [state](launcher::LauncherListener* l) { return std::make_unique<FakeLauncher>(state, l); }, &clock_);
  bool done = false;
  fp8::Status status;
  manager_->Start([&](fp8::Status st) {
    status = st;
    done = true;
  });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  ASSERT_TRUE(status.ok()) << status.ToString();
}

void ManagerTest::RestartManager() {
  bool done = false;
  manager_->Shutdown([&] { done = true; });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  manager_.reset();
  RunFor(5);  // let posted no-ops of the old manager drain
  StartManager();
}

void ManagerTest::CrashAndRestartManager() {
  manager_.reset();
  RunFor(5);
  StartManager();
}

bool ManagerTest::RunUntil(const std::function<bool()>& pred, int timeout_ms) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > limit) return false;
    io_.restart();
    io_.run_for(std::chrono::milliseconds(1));
  }
  return true;
}

void ManagerTest::RunFor(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    io_.restart();
    io_.run_for(std::chrono::milliseconds(1));
  }
}

fp8::StatusOr<Job> ManagerTest::Create(Job job, const std::string& request_id) {
  fp8d::v1::CreateJobRequest request;
  *request.mutable_job() = std::move(job);
  request.set_request_id(request_id);
  std::optional<fp8::StatusOr<Job>> result;
  manager_->CreateJob(std::move(request), [&](fp8::StatusOr<Job> r) { result = std::move(r); });
  if (!RunUntil([&] { return result.has_value(); })) return fp8::InternalError("create timed out");
  return std::move(*result);
}

fp8::StatusOr<Job> ManagerTest::Get(const std::string& name, bool full) {
  fp8d::v1::GetJobRequest request;
  request.set_name(name);
  request.set_view(full ? fp8d::v1::JOB_VIEW_FULL : fp8d::v1::JOB_VIEW_BASIC);
  std::optional<fp8::StatusOr<Job>> result;
  manager_->GetJob(request, [&](fp8::StatusOr<Job> r) { result = std::move(r); });
  if (!RunUntil([&] { return result.has_value(); })) return fp8::InternalError("get timed out");
  return std::move(*result);
}

fp8::StatusOr<Job> ManagerTest::Cancel(const std::string& name) {
  fp8d::v1::CancelJobRequest request;
  request.set_name(name);
  std::optional<fp8::StatusOr<Job>> result;
  manager_->CancelJob(request, [&](fp8::StatusOr<Job> r) { result = std::move(r); });
  if (!RunUntil([&] { return result.has_value(); })) return fp8::InternalError("cancel timed out");
  return std::move(*result);
}

fp8::StatusOr<fp8d::v1::ListJobsResponse> ManagerTest::List(int page_size,
                                                             const std::string& token) {
  fp8d::v1::ListJobsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(token);
  std::optional<fp8::StatusOr<fp8d::v1::ListJobsResponse>> result;
  manager_->ListJobs(request, [&](auto r) { result = std::move(r); });
  if (!RunUntil([&] { return result.has_value(); })) return fp8::InternalError("list timed out");
  return std::move(*result);
}

fp8d::v1::JobState ManagerTest::StateOf(const std::string& name) {
  auto job = Get(name);
  return job.ok() ? job->state() : fp8d::v1::JOB_STATE_UNSPECIFIED;
}

bool ManagerTest::WaitState(const std::string& name, fp8d::v1::JobState state) {
  const bool ok = RunUntil([&] { return StateOf(name) == state; });
  if (!ok) {
    ADD_FAILURE() << name << " never reached " << fp8d::v1::JobState_Name(state) << "; it is "
                  << fp8d::v1::JobState_Name(StateOf(name));
  }
  return ok;
}

std::shared_ptr<WatchRecord> ManagerTest::WatchJob(const std::string& name, int64_t since) {
  auto rec = std::make_shared<WatchRecord>();
  rec->id = manager_->Watch(
      name, since, [rec](const Job& job) { rec->updates.push_back(job); },
      [rec](fp8::Status st) {
        rec->ended = true;
        rec->end_status = st;
      });
  return rec;
}

void ManagerTest::Emit(const std::string& name, int attempt, int rank, nlohmann::json event) {
  launcher::WorkerEvent ev;
  ev.job_id = JobIdOf(name);
  ev.attempt = attempt;
  ev.rank = rank;
  // {"type": t, fields...} as the line the worker writes: {"time": ..., t: {fields...}}.
  const std::string type = event.value("type", "");
  event.erase("type");
  nlohmann::json line = {{"time", event.contains("time") ? event["time"] : nlohmann::json(clock_.NowMs() / 1000.0)}};
  event.erase("time");
  line[type] = std::move(event);
  ev.raw = line.dump();
  google::protobuf::util::JsonParseOptions strict;  // a field outside the contract is a test bug
  const auto st = google::protobuf::util::JsonStringToMessage(ev.raw, &ev.event, strict);
  EXPECT_TRUE(st.ok() && ev.event.payload_case() != fp8d::v1::WorkerEvent::PAYLOAD_NOT_SET)
      << ev.raw << ": " << st.message();
  int64_t& offset = offsets_[name + "/" + std::to_string(attempt) + "/" + std::to_string(rank)];
  offset += static_cast<int64_t>(ev.raw.size()) + 1;
  ev.offset_after = offset;
  launcher::LauncherListener* listener;
  {
    std::lock_guard<std::mutex> lock(launcher_->mu);
    listener = launcher_->listener;
  }
  listener->OnWorkerEvent(std::move(ev));
}

void ManagerTest::EmitGarbage(const std::string& name, int attempt, int rank,
                              const std::string& line) {
  launcher::WorkerEvent ev;
  ev.job_id = JobIdOf(name);
  ev.attempt = attempt;
  ev.rank = rank;
  ev.garbage = true;
  ev.raw = line;
  int64_t& offset = offsets_[name + "/" + std::to_string(attempt) + "/" + std::to_string(rank)];
  offset += static_cast<int64_t>(line.size()) + 1;
  ev.offset_after = offset;
  launcher_->listener->OnWorkerEvent(std::move(ev));
}

int64_t ManagerTest::Offset(const std::string& name, int attempt, int rank) {
  return offsets_[name + "/" + std::to_string(attempt) + "/" + std::to_string(rank)];
}

void ManagerTest::Exit(const std::string& name, int attempt, int rank, int exit_code, int signal,
                       bool adopted) {
  launcher::WorkerExit ex;
  ex.job_id = JobIdOf(name);
  ex.attempt = attempt;
  ex.rank = rank;
  ex.exit_code = exit_code;
  ex.signal = signal;
  ex.adopted = adopted;
  launcher_->listener->OnWorkerExit(ex);
}

Job ManagerTest::TrainJob(int ranks) const {
  Job job;
  job.set_display_name("tiny");
  job.mutable_train()->mutable_model()->set_preset("tiny");
  job.mutable_train()->mutable_training()->set_max_steps(10);
  // An active job's output_dir is refused to the next job: each job of a test gets its own
  // (the first keeps "out", which tests check by name).
  ++train_jobs_made_;
  job.mutable_train()->set_output_dir(data_dir_ + "/out" +
                                      (train_jobs_made_ == 1 ? "" : "-" + std::to_string(train_jobs_made_)));
  job.mutable_resources()->set_ranks(ranks);
  return job;
}

std::string ManagerTest::CreateRunning(Job job) {
  const int ranks = std::max(1, job.resources().ranks());
  const size_t launches_before = launcher_->LaunchCount();
  auto created = Create(std::move(job));
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return "";
  const std::string name = created->name();
  EXPECT_TRUE(RunUntil([&] { return launcher_->LaunchCount() > launches_before; }));
  const int attempt = launcher_->Launch(launcher_->LaunchCount() - 1).attempt;
  for (int r = 0; r < ranks; ++r) Emit(name, attempt, r, {{"type", "started"}, {"rank", r}});
  EXPECT_TRUE(WaitState(name, fp8d::v1::RUNNING));
  // The launch result comes back from the launcher thread; timeouts count from it, so tests
  // that move the clock must not start before the manager has recorded the pids.
  EXPECT_TRUE(RunUntil([&] {
    auto job = Get(name, /*full=*/true);
    if (!job.ok() || job->attempts_size() == 0) return false;
    const auto& a = job->attempts(job->attempts_size() - 1);
    for (const auto& r : a.ranks()) {
      if (r.pid() == 0) return false;
    }
    return a.ranks_size() == ranks;
  }));
  return name;
}

void ManagerTest::FinishAttempt(const std::string& name, int attempt, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    Emit(name, attempt, r, {{"type", "done"}, {"result", {{"final_loss", 1.25}}}});
    Exit(name, attempt, r, 0);
  }
}

bool ManagerTest::HasSignal(const std::string& name, int attempt, int sig) const {
  for (const auto& s : launcher_->Signals()) {
    if (s.job_id == JobIdOf(name) && s.attempt == attempt && s.sig == sig) return true;
  }
  return false;
}

int ManagerTest::SignalCount(const std::string& name, int attempt, int sig) const {
  int n = 0;
  for (const auto& s : launcher_->Signals()) {
    n += s.job_id == JobIdOf(name) && s.attempt == attempt && s.sig == sig ? 1 : 0;
  }
  return n;
}

void ManagerTest::PreemptIn(JobManager& manager, const std::string& name, const std::string& reason) {
  auto& impl = static_cast<JobManagerImpl&>(manager);
  // A finished job may have left the cache: as for the scheduler, there is nothing to preempt.
  if (JobEntry* e = impl.Find(name)) impl.PreemptAttempt(*e, reason);
}

void ManagerTest::Preempt(const std::string& name, const std::string& reason) {
  // The test thread is the io thread (it runs the manager between io slices).
  PreemptIn(*manager_, name, reason);
}

}  // namespace fp8d::core::testing
