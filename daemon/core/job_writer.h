// SPDX-License-Identifier: Apache-2.0
// JobWriter: the one way a job changes state (docs/design.md §2), and the store writes the
// supervisor and the launcher make. Transition checks from → to against the table, applies it
// in memory (so later handlers see it), writes job row + event in one transaction, and only
// when that write is done publishes the new version to watchers and runs the action that
// depends on it (launch, signal, acknowledge). A write that fails is kept and tried again with
// backoff; until it commits nothing depending on it is published or done. Progress is the
// exception the design allows: delivered at once, written in batches (JobSupervisor).
//
// An interface, so the supervisor's and the launcher's tests record what they ask for and
// "commit" at once; StoreJobWriter is the real one.
//
// THREADING: io thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "common/status.h"
#include "daemon/core/clock.h"
#include "daemon/core/job_cache.h"
#include "daemon/core/store_thread.h"

namespace fp8d::core {

class JobWriter {
 public:
  using StoreWork = std::function<fp8::Status(store::JobStore&)>;
  virtual ~JobWriter() = default;

  // Checks e's state → `to`, applies it, persists job row + event (and `extra`, in the same
  // store task), then publishes the new version and runs `after` with the write's status
  // (FAILED_PRECONDITION at once for an edge the table does not have).
  virtual void Transition(JobEntry& e, fp8d::v1::JobState to, const std::string& message,
                          std::function<void(fp8::Status)> after = nullptr,
                          StoreWork extra = nullptr) = 0;
  // Runs `work` on the store thread and `then` with its status on io.
  virtual void Write(StoreWork work, std::function<void(fp8::Status)> then) = 0;
  // Drops a finished job from the cache once its workers are gone and its writes durable.
  virtual void MaybeEvict(const std::string& name) = 0;
};

class StoreJobWriter final : public JobWriter {
 public:
  // `evicted` gets each job the cache dropped (the output-dir index forgets it).
  StoreJobWriter(boost::asio::io_context& io, JobCache& cache, StoreThread& store,
                 const Clock* clock, std::function<void(const fp8d::v1::Job&)> evicted);

  void Transition(JobEntry& e, fp8d::v1::JobState to, const std::string& message,
                  std::function<void(fp8::Status)> after = nullptr,
                  StoreWork extra = nullptr) override;
  void Write(StoreWork work, std::function<void(fp8::Status)> then) override;
  void MaybeEvict(const std::string& name) override;
  // Told each transition once its write committed (the job as it left it, and its event).
  void OnCommitted(std::function<void(const fp8d::v1::Job&, const fp8d::v1::JobEvent&)> fn) {
    committed_ = std::move(fn);
  }

 private:
  // Writes e.unwritten.front() if no write of this job is in flight; on failure keeps it and
  // tries again with backoff (the job keeps its last durable state for Get and watchers).
  void WriteNext(const std::string& name);

  boost::asio::io_context& io_;
  JobCache& cache_;
  StoreThread& store_;
  const Clock* clock_;
  std::function<void(const fp8d::v1::Job&)> evicted_;
  std::function<void(const fp8d::v1::Job&, const fp8d::v1::JobEvent&)> committed_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // a retry timer after destruction is a no-op
};

}  // namespace fp8d::core
