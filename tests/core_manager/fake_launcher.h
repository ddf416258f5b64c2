// SPDX-License-Identifier: Apache-2.0
// Test doubles for the manager: a FakeLauncher that records launches, adoptions and signals and
// lets the test play the workers (events and exits through the listener, as the launcher's
// observer thread would), a ManualClock, and a store wrapper that shares one store between
// successive managers (recovery tests) and counts group-commit batches.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/launcher/launcher.h"
#include "daemon/core/clock.h"
#include "daemon/store/job_store.h"

namespace fp8d::core::testing {

class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  void Advance(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_;
};

// Shared between the test and the FakeLauncher the manager owns (Launch runs on the manager's
// launcher thread, so everything is under a mutex).
struct FakeLauncherState {
  struct SignalCall {
    std::string job_id;
    int attempt;
    int sig;
  };
  struct AdoptCall {
    std::string job_id;
    int attempt;
    std::string attempt_dir;
    std::vector<launcher::RankProcess> ranks;
  };

  mutable std::mutex mu;
  std::vector<launcher::Slot> slots;
  std::vector<launcher::LaunchRequest> launches;
  std::vector<SignalCall> signals;
  std::vector<AdoptCall> adopts;
  fp8::Status launch_status;  // what Launch returns (OK by default)
  fp8::Status adopt_status;   // what Adopt returns
  launcher::LauncherListener* listener = nullptr;
  int64_t next_pid = 4000;
  bool stopped = false;

  size_t LaunchCount() const {
    std::lock_guard<std::mutex> lock(mu);
    return launches.size();
  }
  launcher::LaunchRequest Launch(size_t i) const {
    std::lock_guard<std::mutex> lock(mu);
    return launches.at(i);
  }
  std::vector<SignalCall> Signals() const {
    std::lock_guard<std::mutex> lock(mu);
    return signals;
  }
  size_t AdoptCount() const {
    std::lock_guard<std::mutex> lock(mu);
    return adopts.size();
  }
};

class FakeLauncher final : public launcher::Launcher {
 public:
  FakeLauncher(std::shared_ptr<FakeLauncherState> state, launcher::LauncherListener* listener)
      : state_(std::move(state)) {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->listener = listener;
    state_->stopped = false;
  }

  std::vector<launcher::Slot> Slots() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->slots;
  }

  fp8::StatusOr<std::vector<launcher::RankProcess>> Launch(const launcher::LaunchRequest& r) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->launches.push_back(r);
    if (!state_->launch_status.ok()) return state_->launch_status;
    std::vector<launcher::RankProcess> out;
    for (size_t i = 0; i < r.slots.size(); ++i) {
      const int64_t pid = state_->next_pid++;
      out.push_back(launcher::RankProcess{static_cast<int>(i), "fake:" + std::to_string(pid), 0, pid});
    }
    return out;
  }

  fp8::Status Adopt(const std::string& job_id, int attempt, const std::string& attempt_dir,
                    const std::vector<launcher::RankProcess>& ranks) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->adopts.push_back({job_id, attempt, attempt_dir, ranks});
    return state_->adopt_status;
  }

  void Signal(const std::string& job_id, int attempt, int sig) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->signals.push_back({job_id, attempt, sig});
  }

  void Stop() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopped = true;
  }

 private:
  std::shared_ptr<FakeLauncherState> state_;
};

// Forwards to a store the test keeps (so a second manager can start on the first one's data),
// counts CreateJobs calls (group commit), and, while `fail_writes` is set, refuses every write
// after creation as a full disk would.
class SharedStore final : public store::JobStore {
 public:
  explicit SharedStore(std::shared_ptr<store::JobStore> inner,
                       std::shared_ptr<std::atomic<int>> create_calls = nullptr,
                       std::shared_ptr<std::atomic<int>> update_jobs_calls = nullptr,
                       std::shared_ptr<std::atomic<bool>> fail_writes = nullptr)
      : inner_(std::move(inner)),
        create_calls_(std::move(create_calls)),
        update_jobs_calls_(std::move(update_jobs_calls)),
        fail_writes_(std::move(fail_writes)) {}

  fp8::StatusOr<std::vector<store::CreateResult>> CreateJobs(
      std::vector<store::CreateRequest> requests) override {
    if (create_calls_) ++*create_calls_;
    return inner_->CreateJobs(std::move(requests));
  }
  fp8::StatusOr<fp8d::v1::Job> GetJob(const std::string& name) override { return inner_->GetJob(name); }
  fp8::StatusOr<store::ListResult> ListJobs(const store::ListFilter& f) override { return inner_->ListJobs(f); }
  fp8::StatusOr<std::vector<fp8d::v1::Job>> ListActiveJobs() override { return inner_->ListActiveJobs(); }
  fp8::Status UpdateJob(const fp8d::v1::Job& job, const fp8d::v1::JobEvent* event) override {
    if (Full()) return DiskFull();
    return inner_->UpdateJob(job, event);
  }
  fp8::Status UpdateJobs(const std::vector<fp8d::v1::Job>& jobs) override {
    if (update_jobs_calls_) ++*update_jobs_calls_;
    if (Full()) return DiskFull();
    return inner_->UpdateJobs(jobs);
  }
  fp8::Status PutAttempt(const std::string& name, const store::AttemptRecord& r) override {
    if (Full()) return DiskFull();
    return inner_->PutAttempt(name, r);
  }
  fp8::StatusOr<std::vector<store::AttemptRecord>> ListAttempts(const std::string& name) override {
    return inner_->ListAttempts(name);
  }
  fp8::StatusOr<std::vector<fp8d::v1::JobEvent>> ListEvents(const std::string& name) override {
    return inner_->ListEvents(name);
  }
  fp8::Status PutCheckpoint(const std::string& name, const fp8d::v1::Checkpoint& c) override {
    if (Full()) return DiskFull();
    return inner_->PutCheckpoint(name, c);
  }
  fp8::StatusOr<std::vector<fp8d::v1::Checkpoint>> ListCheckpoints(const std::string& name) override {
    return inner_->ListCheckpoints(name);
  }
  fp8::StatusOr<std::vector<int32_t>> DeleteJob(const std::string& name) override {
    return inner_->DeleteJob(name);
  }
  fp8::StatusOr<std::vector<std::string>> ListFinishedBefore(int64_t before_ms, size_t limit) override {
    return inner_->ListFinishedBefore(before_ms, limit);
  }
  fp8::StatusOr<std::vector<store::AttemptUsage>> ListAttemptUsage(int64_t ended_after_ms) override {
    return inner_->ListAttemptUsage(ended_after_ms);
  }
  fp8::Status IntegrityCheck() override { return inner_->IntegrityCheck(); }
  int64_t CountJobs() override { return inner_->CountJobs(); }

 private:
  bool Full() const { return fail_writes_ != nullptr && fail_writes_->load(); }
  static fp8::Status DiskFull() { return fp8::ResourceExhaustedError("database or disk is full (test)"); }

  std::shared_ptr<store::JobStore> inner_;
  std::shared_ptr<std::atomic<int>> create_calls_;
  std::shared_ptr<std::atomic<int>> update_jobs_calls_;
  std::shared_ptr<std::atomic<bool>> fail_writes_;
};

}  // namespace fp8d::core::testing
