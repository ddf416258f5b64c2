// SPDX-License-Identifier: Apache-2.0
// JobCache: the manager's in-memory jobs -- every non-terminal job, and terminal ones until
// their workers exit and their writes are durable -- with the indexes that let timers and
// scheduling rounds cost what is active rather than what is cached, and the outbox that hands
// each version to watchers in order, a state change only once it is durable.
//
// THREADING: used only from the manager's io thread; no locks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/attempt_run.h"
#include "daemon/core/scheduler.h"
#include "daemon/store/job_store.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::core {

// A job in the cache: every non-terminal job, and terminal ones until their workers exit.
struct JobEntry {
  fp8d::v1::Job job;                  // newest in-memory state (may be ahead of the store)
  // The newest version watchers have been sent (GetJob answers this). Until `job` first
  // changes that is `job` itself: a deep queue of jobs that never changed holds one copy of
  // each, not two.
  const fp8d::v1::Job& delivered() const { return delivered_copy != nullptr ? *delivered_copy : job; }
  // Called before anything in `job` changes: keeps what was delivered apart from it.
  void BeforeChange() {
    if (delivered_copy == nullptr) delivered_copy = std::make_unique<fp8d::v1::Job>(job);
  }
  std::unique_ptr<fp8d::v1::Job> delivered_copy;  // null: `job` is what was delivered
  int64_t create_seq = 0;     // FIFO among equal priorities
  struct Outgoing {
    fp8d::v1::Job snapshot;
    bool ready = false;       // state changes wait for their write; progress does not
  };
  // Usually empty, at most a few: a vector, because an empty std::deque still allocates
  // ~600 bytes, which is 60 MB for a queue of 100,000 jobs.
  std::vector<Outgoing> outbox;
  std::unique_ptr<AttemptRun> run;
  std::vector<fp8d::v1::Checkpoint> checkpoints;  // oldest first
  int counted_attempts = 0;   // attempts that count against max_attempts
  bool skip_newest_checkpoint = false;  // after NUMERIC: resume from an earlier checkpoint
  std::set<int64_t> oom_steps;  // steps at which attempts ran out of memory (RESOURCE_EXHAUSTED)
  int64_t retry_at_ms = 0;    // RETRY_WAIT → QUEUED at this time
  bool row_dirty = false;     // progress/checkpoint not yet written
  int64_t row_saved_ms = 0;
  int pending_writes = 0;     // transitions not yet durable (eviction waits for them)
  // Transitions not yet durable, oldest first, written one at a time so a retried write can
  // never land after a newer one. `after` runs only once its write has committed.
  struct PendingWrite {
    fp8d::v1::Job job;
    fp8d::v1::JobEvent event;
    std::function<fp8::Status(store::JobStore&)> extra;
    std::function<void(fp8::Status)> after;
    bool job_written = false;  // the row + event committed; only `extra` is left to retry
  };
  std::vector<PendingWrite> unwritten;
  bool writing = false;
  int write_failures = 0;     // consecutive failed tries of unwritten.front()
  std::string write_error;    // the last failure, for CancelJob's answer meanwhile
};

class JobCache {
 public:
  // Receives every version as it becomes deliverable, in version order per job (watchers).
  explicit JobCache(std::function<void(const fp8d::v1::Job&)> publish);

  JobEntry* Find(const std::string& name);
  const JobEntry* Find(const std::string& name) const;
  size_t size() const { return jobs_.size(); }
  void ForEach(const std::function<void(JobEntry&)>& fn);

  // A job read from the store (new, or recovered): it is what watchers were sent until it
  // first changes (JobEntry::BeforeChange). A job already cached is left as it is.
  void Add(fp8d::v1::Job job, int64_t now_ms);
  // Sets the job's state and keeps the queue index in step (JobEntry::BeforeChange first).
  void SetState(JobEntry& e, fp8d::v1::JobState to);
  // The entry has an attempt now (e.run is set).
  void AddRun(const JobEntry& e) { with_run_.insert(e.job.name()); }

  // A state change: the job as it is now waits in the outbox until Durable(version). The
  // change was made after BeforeChange (SetState makes that call).
  void AwaitDurable(JobEntry& e, int64_t now_ms);
  // The write of `version` committed: publish it and everything ready behind it.
  void Durable(JobEntry& e, int64_t version);
  // A progress/checkpoint change: a new version, published at once, its row written later.
  void PublishChange(JobEntry& e, int64_t now_ms);
  // Drops a terminal job once its writes are durable and its workers gone; returns it.
  std::unique_ptr<JobEntry> EvictIfDone(const std::string& name);

  // The newer of a stored job and what watchers already saw (progress is written in batches).
  const fp8d::v1::Job& Newest(const fp8d::v1::Job& stored) const;
  // Jobs in STARTING, RUNNING or CANCELLING.
  int64_t CountRunning() const;

  const std::set<std::string>& queued() const { return queued_; }
  const std::set<std::string>& with_run() const { return with_run_; }
  // Rows with progress not yet written; the manager's flush takes them out as it writes.
  std::set<std::string>& dirty_rows() { return dirty_rows_; }
  // The jobs that entered QUEUED since the last call.
  std::vector<std::string> TakeNewlyQueued();
  // Per queue, the highest priority and the smallest gang of its QUEUED jobs (MayPreempt).
  std::vector<QueuedSummary> QueuedSummaries() const;

 private:
  void FlushOutbox(JobEntry& e);
  void Enqueue(const fp8d::v1::Job& job);
  void Dequeue(const fp8d::v1::Job& job);

  std::function<void(const fp8d::v1::Job&)> publish_;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  // Indexes over jobs_ (a deep queue holds 100,000 QUEUED jobs that need nothing from a tick):
  std::set<std::string> with_run_;         // jobs that have (had) an attempt: e->run != nullptr
  std::set<std::string> queued_;           // jobs in QUEUED
  std::vector<std::string> newly_queued_;  // entered QUEUED since the last TakeNewlyQueued
  std::set<std::string> dirty_rows_;       // PublishChange'd since their row was last written
  struct QueuedShapes {
    std::multiset<int32_t> priorities, ranks;
  };
  std::map<std::string, QueuedShapes> queued_shapes_;  // of the jobs in queued_, by Job.queue
  int64_t next_create_seq_ = 1;
};

}  // namespace fp8d::core
