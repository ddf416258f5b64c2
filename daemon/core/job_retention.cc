// SPDX-License-Identifier: Apache-2.0
// DeleteJob and the job_ttl_after_finished sweep: a finished job's store rows go in one
// transaction, then its attempt folders through the launcher (both on the store thread, off io).
// Only jobs the store holds as finished are deleted; a job still cached as active is refused.
#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"

namespace fp8d::core {

void JobManagerImpl::DeleteJob(fp8d::v1::DeleteJobRequest request,
                               std::function<void(StatusOr<google::protobuf::Empty>)> done) {
  const std::string name = request.name();
  if (JobEntry* e = Find(name); e != nullptr) {
    if (!IsTerminal(e->job.state())) {
      return done(fp8::FailedPreconditionError(name + " is " + fp8d::v1::JobState_Name(e->job.state()) +
                                               "; only a finished job can be deleted (cancel it first)"));
    }
    // Finished, but its last writes or rank exits are still in flight.
    return done(fp8::UnavailableError(name + " is still finishing; retry shortly"));
  }
  launcher::Launcher* launcher = launcher_.get();
  const std::string data_dir = options_.data_dir;
  store_thread_->Run<StatusOr<google::protobuf::Empty>>(
      [data_dir, name, launcher](store::JobStore& s) -> StatusOr<google::protobuf::Empty> {
        FP8_ASSIGN_OR_RETURN(std::vector<int32_t> attempts, s.DeleteJob(name));
        std::vector<std::string> dirs;
        for (int32_t n : attempts) dirs.push_back(AttemptDirOf(data_dir, name, n));
        // The record is gone (committed); a folder that cannot be removed is logged, not
        // undone: the job no longer exists either way.
        if (Status st = launcher->RemoveAttemptFiles(JobIdOf(name), dirs); !st.ok()) {
          spdlog::warn("{}: deleted, but its attempt files remain: {}", name, st.message());
        }
        return google::protobuf::Empty();
      },
      [this, name, done = std::move(done)](StatusOr<google::protobuf::Empty> result) {
        if (result.ok()) {
          spdlog::info("{}: deleted", name);
          OnJobDeleted(name);  // jobs waiting on it fail (job_dependencies.cc)
        }
        done(std::move(result));
      });
}

void JobManagerImpl::SweepFinishedJobs(int64_t now) {
  const int64_t ttl = options_.job_ttl_after_finished_ms;
  if (ttl <= 0 || sweeping_ || now < next_sweep_ms_) return;
  sweeping_ = true;
  next_sweep_ms_ = now + std::min<int64_t>(60000, std::max<int64_t>(ttl / 2, 1000));
  const int64_t before = clock_->NowMs() - ttl;
  store_thread_->Run<StatusOr<std::vector<std::string>>>(
      [before](store::JobStore& s) { return s.ListFinishedBefore(before, 256); },
      [this](StatusOr<std::vector<std::string>> names) {
        if (!names.ok()) {
          spdlog::warn("job_ttl_after_finished: listing finished jobs: {}", names.status().message());
          sweeping_ = false;
          return;
        }
        auto remaining = std::make_shared<size_t>(names->size());
        if (*remaining == 0) sweeping_ = false;
        // A full batch means more may be due: look again on the next tick.
        if (names->size() == 256) next_sweep_ms_ = 0;
        for (const std::string& name : *names) {
          fp8d::v1::DeleteJobRequest request;
          request.set_name(name);
          DeleteJob(std::move(request), [this, name, remaining](StatusOr<google::protobuf::Empty> r) {
            if (!r.ok() && r.status().code() != fp8::StatusCode::kNotFound) {
              spdlog::warn("job_ttl_after_finished: {}: {}", name, r.status().message());
            }
            if (--*remaining == 0) sweeping_ = false;
          });
        }
      });
}

}  // namespace fp8d::core
