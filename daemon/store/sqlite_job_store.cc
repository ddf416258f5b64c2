// SPDX-License-Identifier: Apache-2.0
// The SQLite JobStore (docs/design.md §5): WAL, synchronous=FULL (a write is on disk when the call
// returns OK), a busy timeout, BEGIN IMMEDIATE for every write, cached prepared statements,
// schema migrations on user_version (sqlite_schema.cc). Start-up cost does not grow with the
// number of finished jobs: opening reads only the greatest id, and ListActiveJobs reads the
// state index.
#include "daemon/store/sqlite_job_store.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <mutex>

#include "daemon/store/sqlite_db.h"
#include "daemon/store/sqlite_schema.h"
#include "daemon/store/store_util.h"

namespace fp8d::store {
namespace {

using internal::Db;
using internal::Stmt;
using internal::WriteTxn;

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(std::unique_ptr<Db> db, SqliteStoreOptions options)
      : db_(std::move(db)), options_(std::move(options)) {}

  Status Init() {
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT max(id) FROM jobs"));
    FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row && !stmt.ColumnIsNull(0)) ids_.SeedAfter(stmt.ColumnText(0));
    return fp8::OkStatus();
  }

  StatusOr<std::vector<CreateResult>> CreateJobs(std::vector<CreateRequest> requests) override {
    std::lock_guard lock(mu_);
    std::vector<CreateResult> results;
    results.reserve(requests.size());
    const int64_t now_ms = internal::NowMs();
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    for (CreateRequest& req : requests) {
      CreateResult res;
      if (!req.request_id.empty()) {
        // Also sees rows inserted earlier in this transaction: duplicates within one batch
        // resolve the same way as across batches.
        FP8_ASSIGN_OR_RETURN(Stmt find, db_->Prepare(
            "SELECT request_hash, job FROM jobs WHERE request_id = ?1"));
        find.Bind(1, req.request_id);
        FP8_ASSIGN_OR_RETURN(bool found, find.Step());
        if (found) {
          FP8_ASSIGN_OR_RETURN(res.job, ParseJob(find.ColumnBlob(1), "request_id " + req.request_id));
          if (find.ColumnText(0) != req.request_hash) {
            res.status = internal::RequestIdConflict(req.request_id, res.job.name());
            res.job.Clear();
          }
          results.push_back(std::move(res));
          continue;
        }
      }
      const std::string id = ids_.Next(now_ms);
      res.job = std::move(req.job);
      res.job.set_name(internal::NameForId(id));
      FP8_ASSIGN_OR_RETURN(Stmt insert, db_->Prepare(
          "INSERT INTO jobs (id, state, kind, priority, create_time, request_id, request_hash, job)"
          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
      insert.Bind(1, id)
          .Bind(2, int64_t{res.job.state()})
          .Bind(3, int64_t{res.job.kind()})
          .Bind(4, int64_t{res.job.priority()})
          .Bind(5, internal::TimestampMs(res.job.create_time()))
          .BindBlob(8, res.job.SerializeAsString());
      if (req.request_id.empty()) {
        insert.BindNull(6).BindNull(7);
      } else {
        insert.Bind(6, req.request_id).Bind(7, req.request_hash);
      }
      FP8_RETURN_IF_ERROR(insert.Run());
      FP8_RETURN_IF_ERROR(InsertEvent(id, internal::CreationEvent(res.job)));
      res.created = true;
      results.push_back(std::move(res));
    }
    FP8_RETURN_IF_ERROR(Commit(txn.get()));
    return results;
  }

  StatusOr<fp8d::v1::Job> GetJob(const std::string& name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(std::string id, internal::IdFromName(name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT job FROM jobs WHERE id = ?1"));
    stmt.Bind(1, id);
    FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return NotFound(name);
    return ParseJob(stmt.ColumnBlob(0), name);
  }

  StatusOr<ListResult> ListJobs(const ListFilter& filter) override {
    std::lock_guard lock(mu_);
    int64_t below = INT64_MAX;
    if (!filter.page_token.empty()) {
      FP8_ASSIGN_OR_RETURN(below, internal::DecodePageToken(filter.page_token, filter));
    }
    const int page_size = internal::EffectivePageSize(filter.page_size);
    const bool by_state = filter.state != fp8d::v1::JOB_STATE_UNSPECIFIED;
    const bool by_kind = filter.kind != fp8d::v1::JOB_KIND_UNSPECIFIED;
    // One SQL text per filter shape, so each is prepared once and uses its own index.
    std::string sql = "SELECT seq, job FROM jobs WHERE seq < ?1";
    if (by_state) sql += " AND state = ?2";
    if (by_kind) sql += " AND kind = ?3";
    sql += " ORDER BY seq DESC LIMIT ?4";
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(sql));
    // One extra row: is there a next page? With a label selector or an owner rows are filtered
    // after they are read, so no LIMIT: stepping stops once the page is full.
    const bool filtered_after_read = !filter.labels.empty() || !filter.owner.empty();
    stmt.Bind(1, below).Bind(4, filtered_after_read ? int64_t{-1} : int64_t{page_size} + 1);
    if (by_state) stmt.Bind(2, int64_t{filter.state});
    if (by_kind) stmt.Bind(3, int64_t{filter.kind});
    ListResult out;
    int64_t last_seq = 0;
    while (true) {
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      const int64_t seq = stmt.ColumnInt(0);
      FP8_ASSIGN_OR_RETURN(fp8d::v1::Job job, ParseJob(stmt.ColumnBlob(1), "seq " + std::to_string(seq)));
      if (!internal::MatchesLabelFilter(filter, job)) continue;
      if (static_cast<int>(out.jobs.size()) == page_size) {
        out.next_page_token = internal::EncodePageToken(last_seq, filter);
        break;
      }
      last_seq = seq;
      out.jobs.push_back(std::move(job));
    }
    return out;
  }

  StatusOr<std::vector<fp8d::v1::Job>> ListActiveJobs() override {
    std::vector<fp8d::v1::Job> out;
    FP8_RETURN_IF_ERROR(ScanActiveJobs(SIZE_MAX, [&out](std::vector<fp8d::v1::Job> jobs) {
      out = std::move(jobs);
      return fp8::OkStatus();
    }));
    return out;
  }

  // Oldest first without a sort: one cursor per active state, each reading jobs_by_state
  // (state, seq) in seq order, merged here. (One query with "state IN (...) ORDER BY seq"
  // makes SQLite copy every row, blob and all, through a temporary b-tree to sort it.) Each
  // blob is parsed where SQLite holds it, without a copy.
  Status ScanActiveJobs(size_t chunk,
                        const std::function<Status(std::vector<fp8d::v1::Job>)>& sink) override {
    std::lock_guard lock(mu_);
    struct Cursor {
      Stmt stmt;
      bool row = false;
    };
    std::vector<Cursor> cursors;
    cursors.reserve(std::size(internal::kActiveStates));
    for (auto state : internal::kActiveStates) {
      // The state is part of the SQL text, so each cursor is its own prepared statement.
      FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT seq, job FROM jobs WHERE state = " +
                                                   std::to_string(state) + " ORDER BY seq"));
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      cursors.push_back(Cursor{std::move(stmt), row});
    }
    chunk = std::max<size_t>(chunk, 1);
    std::vector<fp8d::v1::Job> part;
    while (true) {
      Cursor* next = nullptr;
      for (Cursor& c : cursors) {
        if (c.row && (next == nullptr || c.stmt.ColumnInt(0) < next->stmt.ColumnInt(0))) next = &c;
      }
      if (next == nullptr) break;
      const std::string_view blob = next->stmt.ColumnBlobView(1);
      part.emplace_back();
      if (!part.back().ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
        return fp8::DataLossError("jobs.job (seq " + std::to_string(next->stmt.ColumnInt(0)) +
                                  ") is not a valid fp8d.v1.Job");
      }
      FP8_ASSIGN_OR_RETURN(next->row, next->stmt.Step());
      if (part.size() == chunk) {
        FP8_RETURN_IF_ERROR(sink(std::move(part)));
        part = {};
      }
    }
    if (!part.empty() || chunk == SIZE_MAX) FP8_RETURN_IF_ERROR(sink(std::move(part)));
    return fp8::OkStatus();
  }

  Status UpdateJob(const fp8d::v1::Job& job, const fp8d::v1::JobEvent* event) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    FP8_ASSIGN_OR_RETURN(std::string id, WriteJobRow(job));
    if (event != nullptr) FP8_RETURN_IF_ERROR(InsertEvent(id, *event));
    return Commit(txn.get());
  }

  Status UpdateJobs(const std::vector<fp8d::v1::Job>& jobs) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    for (const fp8d::v1::Job& job : jobs) {
      FP8_ASSIGN_OR_RETURN(std::string id, WriteJobRow(job));
    }
    return Commit(txn.get());
  }

  Status PutAttempt(const std::string& job_name, const AttemptRecord& record) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    FP8_RETURN_IF_ERROR(WriteAttempt(job_name, record));
    return Commit(txn.get());
  }

  Status PutAttempts(const std::vector<std::pair<std::string, AttemptRecord>>& records) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    for (const auto& [job_name, record] : records) FP8_RETURN_IF_ERROR(WriteAttempt(job_name, record));
    return Commit(txn.get());
  }

  StatusOr<std::vector<AttemptRecord>> ListAttempts(const std::string& job_name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(std::string id, ExistingId(job_name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "SELECT record, runtime FROM attempts WHERE job_id = ?1 ORDER BY number"));
    stmt.Bind(1, id);
    std::vector<AttemptRecord> out;
    while (true) {
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      AttemptRecord rec;
      if (!rec.attempt.ParseFromString(stmt.ColumnBlob(0))) {
        return fp8::DataLossError("attempts.record of " + job_name + " is not a valid fp8d.v1.Attempt");
      }
      FP8_ASSIGN_OR_RETURN(rec.runtime, internal::DecodeRuntime(stmt.ColumnText(1)));
      out.push_back(std::move(rec));
    }
    return out;
  }

  StatusOr<std::vector<fp8d::v1::JobEvent>> ListEvents(const std::string& job_name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(std::string id, ExistingId(job_name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "SELECT version, time, from_state, to_state, message FROM events WHERE job_id = ?1"
        " ORDER BY rowid"));
    stmt.Bind(1, id);
    std::vector<fp8d::v1::JobEvent> out;
    while (true) {
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      fp8d::v1::JobEvent ev;
      ev.set_version(stmt.ColumnInt(0));
      internal::SetTimestampMs(ev.mutable_time(), stmt.ColumnInt(1));
      ev.set_from_state(static_cast<fp8d::v1::JobState>(stmt.ColumnInt(2)));
      ev.set_to_state(static_cast<fp8d::v1::JobState>(stmt.ColumnInt(3)));
      ev.set_message(stmt.ColumnText(4));
      out.push_back(std::move(ev));
    }
    return out;
  }

  Status PutCheckpoint(const std::string& job_name, const fp8d::v1::Checkpoint& ckpt) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    FP8_ASSIGN_OR_RETURN(std::string id, ExistingId(job_name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "INSERT OR REPLACE INTO checkpoints (job_id, step, attempt, path, checksum, time)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
    stmt.Bind(1, id)
        .Bind(2, ckpt.step())
        .Bind(3, int64_t{ckpt.attempt()})
        .Bind(4, ckpt.path())
        .Bind(5, ckpt.checksum())
        .Bind(6, internal::StoredTimeMs(ckpt.create_time()));
    FP8_RETURN_IF_ERROR(stmt.Run());
    return Commit(txn.get());
  }

  StatusOr<std::vector<int32_t>> DeleteJob(const std::string& name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db_.get()));
    FP8_ASSIGN_OR_RETURN(std::string id, internal::IdFromName(name));
    {
      FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT state FROM jobs WHERE id = ?1"));
      stmt.Bind(1, id);
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return NotFound(name);
      const auto state = static_cast<fp8d::v1::JobState>(stmt.ColumnInt(0));
      if (internal::IsActiveState(state)) {
        return fp8::FailedPreconditionError(name + " is " + fp8d::v1::JobState_Name(state) +
                                            "; only a finished job can be deleted (cancel it first)");
      }
    }
    std::vector<int32_t> attempts;
    {
      FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT number FROM attempts WHERE job_id = ?1 ORDER BY number"));
      stmt.Bind(1, id);
      while (true) {
        FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
        if (!row) break;
        attempts.push_back(static_cast<int32_t>(stmt.ColumnInt(0)));
      }
    }
    for (const char* sql : {"DELETE FROM events WHERE job_id = ?1", "DELETE FROM attempts WHERE job_id = ?1",
                            "DELETE FROM checkpoints WHERE job_id = ?1", "DELETE FROM jobs WHERE id = ?1"}) {
      FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(sql));
      stmt.Bind(1, id);
      FP8_RETURN_IF_ERROR(stmt.Run());
    }
    FP8_RETURN_IF_ERROR(Commit(txn.get()));
    return attempts;
  }

  StatusOr<std::vector<std::string>> ListFinishedBefore(int64_t before_ms, size_t limit) override {
    std::lock_guard lock(mu_);
    // end_time is only in the blob (no migration for a column): read the finished jobs'
    // blobs, oldest first. Runs on the TTL sweep, not on a request path.
    std::vector<std::string> out;
    for (auto state : {fp8d::v1::SUCCEEDED, fp8d::v1::FAILED, fp8d::v1::CANCELLED}) {
      FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT seq, job FROM jobs WHERE state = " +
                                                   std::to_string(state) + " ORDER BY seq"));
      while (out.size() < limit) {
        FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
        if (!row) break;
        FP8_ASSIGN_OR_RETURN(fp8d::v1::Job job, ParseJob(stmt.ColumnBlob(1), "seq " + std::to_string(stmt.ColumnInt(0))));
        if (job.has_end_time() && internal::StoredTimeMs(job.end_time()) < before_ms) out.push_back(job.name());
      }
    }
    return out;
  }

  StatusOr<std::vector<AttemptUsage>> ListAttemptUsage(int64_t ended_after_ms) override {
    std::lock_guard lock(mu_);
    // Attempt times are only in the blobs: every attempt is read, each job's blob once (rows
    // come grouped by job). Runs for `fp8ctl usage`, not on a request path of jobs.
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "SELECT a.job_id, a.record, j.job FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " ORDER BY a.job_id, a.number"));
    std::vector<AttemptUsage> out;
    std::string job_id;
    fp8d::v1::Job job;
    while (true) {
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      if (std::string id = stmt.ColumnText(0); id != job_id) {
        FP8_ASSIGN_OR_RETURN(job, ParseJob(stmt.ColumnBlob(2), "job " + id));
        job_id = std::move(id);
      }
      fp8d::v1::Attempt attempt;
      if (!attempt.ParseFromString(stmt.ColumnBlob(1))) {
        return fp8::DataLossError("attempts.record of " + job.name() + " is not a valid fp8d.v1.Attempt");
      }
      AttemptUsage u;
      if (internal::AttemptUsageOf(job, attempt, ended_after_ms, &u)) out.push_back(std::move(u));
    }
    return out;
  }

  StatusOr<std::vector<fp8d::v1::Checkpoint>> ListCheckpoints(const std::string& job_name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(std::string id, ExistingId(job_name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "SELECT step, attempt, path, checksum, time FROM checkpoints WHERE job_id = ?1"
        " ORDER BY step"));
    stmt.Bind(1, id);
    std::vector<fp8d::v1::Checkpoint> out;
    while (true) {
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      fp8d::v1::Checkpoint c;
      c.set_step(stmt.ColumnInt(0));
      c.set_attempt(static_cast<int32_t>(stmt.ColumnInt(1)));
      c.set_path(stmt.ColumnText(2));
      c.set_checksum(stmt.ColumnText(3));
      internal::SetTimestampMs(c.mutable_create_time(), stmt.ColumnInt(4));
      out.push_back(std::move(c));
    }
    return out;
  }

  Status IntegrityCheck() override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("PRAGMA integrity_check"));
    std::string problems;
    while (true) {
      FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      const std::string line = stmt.ColumnText(0);
      if (line != "ok") problems += (problems.empty() ? "" : "; ") + line;
    }
    if (!problems.empty()) return fp8::DataLossError("integrity_check: " + problems);
    return fp8::OkStatus();
  }

  int64_t CountJobs() override {
    std::lock_guard lock(mu_);
    StatusOr<Stmt> stmt = db_->Prepare("SELECT count(*) FROM jobs");
    if (!stmt.ok()) return -1;
    StatusOr<bool> row = stmt->Step();
    return row.ok() && *row ? stmt->ColumnInt(0) : -1;
  }

 private:
  static Status NotFound(const std::string& name) {
    return fp8::NotFoundError("job " + name + " not found");
  }

  static StatusOr<fp8d::v1::Job> ParseJob(const std::string& blob, const std::string& where) {
    fp8d::v1::Job job;
    if (!job.ParseFromString(blob)) {
      return fp8::DataLossError("jobs.job (" + where + ") is not a valid fp8d.v1.Job");
    }
    return job;
  }

  StatusOr<std::string> ExistingId(const std::string& name) {
    FP8_ASSIGN_OR_RETURN(std::string id, internal::IdFromName(name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare("SELECT 1 FROM jobs WHERE id = ?1"));
    stmt.Bind(1, id);
    FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return NotFound(name);
    return id;
  }

  // Inserts or replaces one attempt of an existing job; NOT_FOUND when there is none.
  Status WriteAttempt(const std::string& job_name, const AttemptRecord& record) {
    FP8_ASSIGN_OR_RETURN(std::string id, ExistingId(job_name));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "INSERT OR REPLACE INTO attempts (job_id, number, record, runtime) VALUES (?1, ?2, ?3, ?4)"));
    stmt.Bind(1, id)
        .Bind(2, int64_t{record.attempt.number()})
        .BindBlob(3, record.attempt.SerializeAsString())
        .Bind(4, internal::EncodeRuntime(record.runtime));
    return stmt.Run();
  }

  // Rewrites the row of an existing job; NOT_FOUND when there is none.
  StatusOr<std::string> WriteJobRow(const fp8d::v1::Job& job) {
    FP8_ASSIGN_OR_RETURN(std::string id, internal::IdFromName(job.name()));
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "UPDATE jobs SET state = ?2, kind = ?3, priority = ?4, job = ?5 WHERE id = ?1"));
    stmt.Bind(1, id)
        .Bind(2, int64_t{job.state()})
        .Bind(3, int64_t{job.kind()})
        .Bind(4, int64_t{job.priority()})
        .BindBlob(5, job.SerializeAsString());
    FP8_RETURN_IF_ERROR(stmt.Run());
    if (db_->Changes() == 0) return NotFound(job.name());
    return id;
  }

  Status InsertEvent(const std::string& id, const fp8d::v1::JobEvent& ev) {
    FP8_ASSIGN_OR_RETURN(Stmt stmt, db_->Prepare(
        "INSERT INTO events (job_id, version, time, from_state, to_state, message)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
    stmt.Bind(1, id)
        .Bind(2, ev.version())
        .Bind(3, internal::StoredTimeMs(ev.time()))
        .Bind(4, int64_t{ev.from_state()})
        .Bind(5, int64_t{ev.to_state()})
        .Bind(6, ev.message());
    return stmt.Run();
  }

  Status Commit(WriteTxn* txn) {
    if (options_.before_commit_for_testing) options_.before_commit_for_testing();
    return txn->Commit();
  }

  // The interface asks for one thread at a time; the lock makes a second thread safe rather
  // than undefined (the connection is opened without SQLite's own mutex).
  std::mutex mu_;
  std::unique_ptr<Db> db_;
  SqliteStoreOptions options_;
  internal::IdGenerator ids_;
};

}  // namespace

int SqliteSchemaVersion() { return internal::LatestSchemaVersion(); }

StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path,
                                                       const SqliteStoreOptions& options) {
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<Db> db, Db::Open(path));
  FP8_RETURN_IF_ERROR(db->Exec("PRAGMA busy_timeout = " + std::to_string(options.busy_timeout_ms)));
  // WAL: readers never block the writer and a commit is one append + one fsync.
  {
    FP8_ASSIGN_OR_RETURN(Stmt wal, db->Prepare("PRAGMA journal_mode = WAL"));
    FP8_ASSIGN_OR_RETURN(bool row, wal.Step());
    if (!row || wal.ColumnText(0) != "wal") {  // e.g. a file system without shared memory
      return fp8::FailedPreconditionError(path + ": cannot use WAL journal mode (got \"" +
                                          (row ? wal.ColumnText(0) : "") + "\")");
    }
  }
  // FULL: the WAL is fsynced at every commit, so an acknowledged write survives power loss.
  FP8_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = FULL"));
  FP8_RETURN_IF_ERROR(internal::Migrate(db.get(), path));
  auto store = std::make_unique<SqliteJobStore>(std::move(db), options);
  FP8_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<JobStore>(std::move(store));
}

StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path) {
  return OpenSqliteJobStore(path, SqliteStoreOptions{});
}

}  // namespace fp8d::store
