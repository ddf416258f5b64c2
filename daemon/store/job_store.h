// SPDX-License-Identifier: Apache-2.0
// The job store: the only part of fp8d that speaks SQL (sqlite_job_store.cc). Everything else
// sees this interface; tests/store/job_store_conformance_test.cc runs one suite against every
// implementation (SQLite on disk, in memory).
//
// Thread-compatibility: an instance is used by one thread at a time (the manager's store
// thread). Every mutating call is one transaction (BEGIN IMMEDIATE ... COMMIT) and is durable
// (synchronous=FULL) when it returns OK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/label_selector.h"
#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::store {

using fp8::Status;
using fp8::StatusOr;

struct CreateRequest {
  fp8d::v1::Job job;        // validated; state QUEUED; name empty (the store assigns jobs/<id>)
  std::string request_id;   // may be empty
  std::string request_hash; // hash of the request body, compared when request_id repeats
};

struct CreateResult {
  Status status;            // OK, or INVALID_ARGUMENT when request_id repeats with another body
  fp8d::v1::Job job;        // the stored job (the existing one when deduplicated)
  bool created = false;     // false when an existing job was returned for request_id
};

struct ListFilter {
  fp8d::v1::JobState state = fp8d::v1::JOB_STATE_UNSPECIFIED;
  fp8d::v1::JobKind kind = fp8d::v1::JOB_KIND_UNSPECIFIED;
  int page_size = 50;
  std::string page_token;   // opaque; from ListResult::next_page_token
  // Labels live in the job blob (no column): matched on each row read, after state and kind.
  std::vector<fp8::LabelRequirement> labels;
  // Only jobs of this owner (Job.owner, in the blob like labels); empty: every owner.
  std::string owner;
};

struct ListResult {
  std::vector<fp8d::v1::Job> jobs;  // newest first (by creation sequence), stable under inserts
  std::string next_page_token;      // empty on the last page
};

// What the controller must remember about a running rank to re-adopt it after a restart.
struct RankRuntime {
  int32_t rank = 0;
  // The launcher's handle for the rank (launcher::RankProcess::handle): stored and returned as
  // is, never parsed here. One line of text; empty when none was recorded.
  std::string handle;
  int64_t events_offset = 0;   // bytes of the rank's events already consumed
};

struct AttemptRecord {
  fp8d::v1::Attempt attempt;           // number, placements, times, failure, resumed_from
  std::vector<RankRuntime> runtime;    // per rank, for re-adoption
};

// One stored attempt as accounting sees it (ListAttemptUsage).
struct AttemptUsage {
  std::string owner;      // Job.owner
  std::string queue;      // Job.queue as stored (empty: the job named none)
  int64_t start_ms = 0;   // Attempt.start_time (0: never started)
  int64_t end_ms = 0;     // Attempt.end_time; 0 while the attempt has not ended
  int32_t gpu_ranks = 0;  // ranks placed on a GPU (RankPlacement.gpu >= 0)
  int32_t cpu_ranks = 0;  // ranks on CPU slots
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Inserts each job with its creation event, all in ONE transaction (group commit: the
  // manager batches concurrent creates). Per-item results; a failed item does not fail the
  // others. Assigns the name `jobs/<id>` and stores the rest as given (the manager prepared
  // it: daemon/core/new_job.h); the creation event takes the job's version, create time and
  // state.
  virtual StatusOr<std::vector<CreateResult>> CreateJobs(std::vector<CreateRequest> requests) = 0;

  virtual StatusOr<fp8d::v1::Job> GetJob(const std::string& name) = 0;  // NOT_FOUND if absent
  virtual StatusOr<ListResult> ListJobs(const ListFilter& filter) = 0;   // INVALID_ARGUMENT on a bad token
  // Jobs whose state is not terminal, oldest first (recovery at start-up).
  virtual StatusOr<std::vector<fp8d::v1::Job>> ListActiveJobs() = 0;
  // The same jobs in the same order, handed to `sink` `chunk` at a time as they are read, so
  // the caller can work on one chunk while the next is read (recovery uses both cores). A
  // sink error stops the scan and is returned. `sink` must not call this store (the scan holds
  // it). The default reads them all, then chunks.
  virtual Status ScanActiveJobs(size_t chunk,
                                const std::function<Status(std::vector<fp8d::v1::Job>)>& sink);

  // Writes the whole job row and, when `event` is given, appends it to the job's events, in
  // one transaction. This is how every state transition is persisted before it is acted on.
  virtual Status UpdateJob(const fp8d::v1::Job& job, const fp8d::v1::JobEvent* event) = 0;
  // Several updates in one transaction (progress batches).
  virtual Status UpdateJobs(const std::vector<fp8d::v1::Job>& jobs) = 0;

  // Inserts or replaces attempt `record.attempt.number` of the job.
  virtual Status PutAttempt(const std::string& job_name, const AttemptRecord& record) = 0;
  virtual StatusOr<std::vector<AttemptRecord>> ListAttempts(const std::string& job_name) = 0;
  virtual StatusOr<std::vector<fp8d::v1::JobEvent>> ListEvents(const std::string& job_name) = 0;

  // Records a checkpoint a worker reported complete; the job's newest is also in Job.checkpoint.
  virtual Status PutCheckpoint(const std::string& job_name, const fp8d::v1::Checkpoint& ckpt) = 0;
  virtual StatusOr<std::vector<fp8d::v1::Checkpoint>> ListCheckpoints(const std::string& job_name) = 0;

  // Removes a finished job (SUCCEEDED, FAILED or CANCELLED) with its attempts, events and
  // checkpoints, in one transaction, and frees its request_id. Returns its attempt numbers,
  // whose directories the caller removes. NOT_FOUND if absent; FAILED_PRECONDITION if the job
  // has not finished.
  virtual StatusOr<std::vector<int32_t>> DeleteJob(const std::string& name) = 0;
  // Names of finished jobs whose end_time is before `before_ms` (ms since the epoch), oldest
  // first, at most `limit`: what job_ttl_after_finished removes.
  virtual StatusOr<std::vector<std::string>> ListFinishedBefore(int64_t before_ms, size_t limit) = 0;
  // Every stored attempt that started and has not ended before `ended_after_ms` (ms since the
  // epoch; 0: all), with its job's owner and queue: what GetUsage sums. Read-only.
  virtual StatusOr<std::vector<AttemptUsage>> ListAttemptUsage(int64_t ended_after_ms) = 0;

  // PRAGMA integrity_check (SQLite) or the equivalent; OK when the store is consistent.
  virtual Status IntegrityCheck() = 0;
  virtual int64_t CountJobs() = 0;

  // PutAttempt for several (job name, record) in one transaction, all or none: the
  // supervisor's periodic save of the running attempts' event offsets is one commit a tick,
  // not one per job (1,250 running jobs would ask for more commits than a disk has fsyncs).
  // The default writes them one at a time (for wrappers; both stores here are all or none).
  virtual Status PutAttempts(const std::vector<std::pair<std::string, AttemptRecord>>& records);
};

// Called with the seconds each successful write transaction took, from BEGIN IMMEDIATE
// (including the wait for the write lock) to the end of COMMIT, on the thread that ran it. The
// server turns it into fp8d_store_commit_seconds; the store itself knows no metrics library.
// Set once before the store is used; must be thread-safe and cheap. Null: nothing is observed.
using CommitObserver = void (*)(double seconds);
void SetCommitObserver(CommitObserver observer);

// SQLite in WAL mode, synchronous=FULL, busy timeout, BEGIN IMMEDIATE for writes, schema
// migrations keyed on PRAGMA user_version. Creates the file if missing.
StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path);
// Same semantics, nothing on disk (deterministic tests).
std::unique_ptr<JobStore> NewMemoryJobStore();

}  // namespace fp8d::store
