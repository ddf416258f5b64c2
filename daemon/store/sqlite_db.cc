// SPDX-License-Identifier: Apache-2.0
#include "daemon/store/sqlite_db.h"

#include <sqlite3.h>

#include <atomic>

#include "daemon/store/job_store.h"

namespace fp8d::store {
namespace {
std::atomic<CommitObserver> g_commit_observer{nullptr};
}  // namespace

void SetCommitObserver(CommitObserver observer) { g_commit_observer.store(observer); }

namespace internal {

Stmt::~Stmt() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Stmt& Stmt::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Stmt& Stmt::Bind(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Stmt& Stmt::BindBlob(int index, std::string_view bytes) {
  sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  return *this;
}

Stmt& Stmt::BindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

StatusOr<bool> Stmt::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(std::string("executing \"") + sqlite3_sql(stmt_) + "\"", rc);
}

Status Stmt::Run() {
  StatusOr<bool> row = Step();
  return row.ok() ? fp8::OkStatus() : row.status();
}

int64_t Stmt::ColumnInt(int col) const { return sqlite3_column_int64(stmt_, col); }

std::string Stmt::ColumnText(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p),
                                                    sqlite3_column_bytes(stmt_, col));
}

std::string Stmt::ColumnBlob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  return p == nullptr ? std::string()
                      : std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
}

std::string_view Stmt::ColumnBlobView(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  return p == nullptr ? std::string_view()
                      : std::string_view(static_cast<const char*>(p),
                                         static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

bool Stmt::ColumnIsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return fp8::UnavailableError("opening " + path + ": " + msg);
  }
  sqlite3_extended_result_codes(raw, 1);
  return std::unique_ptr<Db>(new Db(raw));
}

Db::~Db() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Status Db::Exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return fp8::OkStatus();
  std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Error("executing \"" + sql.substr(0, 80) + "\": " + msg, rc);
}

StatusOr<Stmt> Db::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error("preparing \"" + sql + "\"", rc);
    it = cache_.emplace(sql, stmt).first;
  }
  return Stmt(this, it->second);
}

Status Db::Error(const std::string& what, int rc) const {
  const std::string msg =
      what + ": " + sqlite3_errmsg(db_) + " (sqlite code " + std::to_string(rc) + ")";
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return fp8::UnavailableError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return fp8::DataLossError(msg);
    case SQLITE_FULL:
      return fp8::ResourceExhaustedError(msg);
    case SQLITE_CONSTRAINT:
      return fp8::AlreadyExistsError(msg);
    default:
      return fp8::InternalError(msg);
  }
}

int64_t Db::LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }
int Db::Changes() const { return sqlite3_changes(db_); }

StatusOr<std::unique_ptr<WriteTxn>> WriteTxn::Begin(Db* db) {
  const auto start = std::chrono::steady_clock::now();
  FP8_ASSIGN_OR_RETURN(Stmt begin, db->Prepare("BEGIN IMMEDIATE"));
  FP8_RETURN_IF_ERROR(begin.Run());
  return std::unique_ptr<WriteTxn>(new WriteTxn(db, start));
}

WriteTxn::~WriteTxn() {
  if (!done_ && sqlite3_get_autocommit(db_->raw()) == 0) {
    // Best effort: if ROLLBACK itself fails the connection is unusable anyway.
    (void)db_->Exec("ROLLBACK");
  }
}

Status WriteTxn::Commit() {
  FP8_ASSIGN_OR_RETURN(Stmt commit, db_->Prepare("COMMIT"));
  FP8_RETURN_IF_ERROR(commit.Run());
  done_ = true;
  if (CommitObserver observer = g_commit_observer.load(std::memory_order_relaxed)) {
    observer(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count());
  }
  return fp8::OkStatus();
}

}  // namespace internal
}  // namespace fp8d::store
