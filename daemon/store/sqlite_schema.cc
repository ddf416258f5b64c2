// SPDX-License-Identifier: Apache-2.0
// The schema of fp8d.db as an ordered list of migration steps. PRAGMA user_version is the
// number of steps applied; each step runs in its own write transaction together with the
// user_version bump, so a crash mid-migration leaves the previous version intact.
// To change the schema, APPEND a step; never edit one that has shipped.
#include "daemon/store/sqlite_schema.h"

#include <iterator>

namespace fp8d::store::internal {
namespace {

struct Migration {
  const char* what;
  const char* sql;
};

constexpr Migration kMigrations[] = {
    {"jobs, attempts, events, checkpoints", R"sql(
      -- One row per job. The job itself is the serialized fp8d.v1.Job; the columns beside it
      -- are copies kept for filtering, ordering and idempotency.
      CREATE TABLE jobs (
        seq          INTEGER PRIMARY KEY,   -- creation order; ListJobs pages on it
        id           TEXT NOT NULL UNIQUE,  -- name = jobs/<id>
        state        INTEGER NOT NULL,      -- fp8d.v1.JobState
        kind         INTEGER NOT NULL,      -- fp8d.v1.JobKind
        priority     INTEGER NOT NULL,
        create_time  INTEGER NOT NULL,      -- ms since the Unix epoch
        request_id   TEXT UNIQUE,           -- NULL when the client sent none
        request_hash TEXT,
        job          BLOB NOT NULL
      );
      CREATE TABLE attempts (
        job_id  TEXT NOT NULL,
        number  INTEGER NOT NULL,
        record  BLOB NOT NULL,              -- serialized fp8d.v1.Attempt
        runtime TEXT NOT NULL,              -- per-rank pid/start_time/offset (store_util.h)
        PRIMARY KEY (job_id, number)
      ) WITHOUT ROWID;
      CREATE TABLE events (
        job_id     TEXT NOT NULL,
        version    INTEGER NOT NULL,
        time       INTEGER NOT NULL,        -- ms since the Unix epoch
        from_state INTEGER NOT NULL,
        to_state   INTEGER NOT NULL,
        message    TEXT NOT NULL
      );
      CREATE INDEX events_by_job ON events (job_id);
      CREATE TABLE checkpoints (
        job_id   TEXT NOT NULL,
        step     INTEGER NOT NULL,
        attempt  INTEGER NOT NULL,
        path     TEXT NOT NULL,
        checksum TEXT NOT NULL,
        time     INTEGER NOT NULL,          -- ms since the Unix epoch
        PRIMARY KEY (job_id, step)
      ) WITHOUT ROWID;
    )sql"},
    {"indexes for ListJobs filters and start-up recovery", R"sql(
      -- state: ListJobs(state=...) and ListActiveJobs, which must not scan 100k finished jobs
      -- at start-up. seq last, so each filter reads newest-first straight off the index.
      CREATE INDEX jobs_by_state ON jobs (state, seq);
      CREATE INDEX jobs_by_kind ON jobs (kind, seq);
      CREATE INDEX jobs_by_state_kind ON jobs (state, kind, seq);
    )sql"},
};

StatusOr<int64_t> UserVersion(Db* db) {
  FP8_ASSIGN_OR_RETURN(Stmt stmt, db->Prepare("PRAGMA user_version"));
  FP8_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return fp8::InternalError("PRAGMA user_version returned no row");
  return stmt.ColumnInt(0);
}

}  // namespace

int LatestSchemaVersion() { return static_cast<int>(std::size(kMigrations)); }

Status Migrate(Db* db, const std::string& path) {
  FP8_ASSIGN_OR_RETURN(int64_t version, UserVersion(db));
  if (version > LatestSchemaVersion()) {
    return fp8::FailedPreconditionError(
        path + " has schema version " + std::to_string(version) + " but this fp8d knows only up to " +
        std::to_string(LatestSchemaVersion()) + "; run a newer fp8d");
  }
  for (int64_t v = version; v < LatestSchemaVersion(); ++v) {
    FP8_ASSIGN_OR_RETURN(auto txn, WriteTxn::Begin(db));
    // Re-read under the write lock: another process may have migrated meanwhile.
    FP8_ASSIGN_OR_RETURN(int64_t now, UserVersion(db));
    if (now > v) continue;
    Status st = db->Exec(kMigrations[v].sql);
    if (!st.ok()) {
      return fp8::InternalError("schema migration " + std::to_string(v + 1) + " (" +
                                kMigrations[v].what + "): " + st.message());
    }
    FP8_RETURN_IF_ERROR(db->Exec("PRAGMA user_version = " + std::to_string(v + 1)));
    FP8_RETURN_IF_ERROR(txn->Commit());
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::store::internal
