// SPDX-License-Identifier: Apache-2.0
// A thin RAII layer over the SQLite C API: one connection, statements prepared once and cached
// by their SQL text, errors turned into fp8::Status naming the statement. Internal to
// daemon/store.
#pragma once

#include <chrono>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fp8d::store::internal {

using fp8::Status;
using fp8::StatusOr;

class Db;

// A cached prepared statement, borrowed for one use: bind, step, read columns. The statement
// is reset and its bindings cleared when the Stmt goes out of scope, so the cache can hand it
// out again.
class Stmt {
 public:
  Stmt(Db* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Stmt(Stmt&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  // Parameters are 1-based, as in SQL.
  Stmt& Bind(int index, int64_t value);
  Stmt& Bind(int index, std::string_view text);  // TEXT
  Stmt& BindBlob(int index, std::string_view bytes);
  Stmt& BindNull(int index);

  // true: a row is available; false: done. An error is returned as a Status.
  StatusOr<bool> Step();
  // Runs a statement that returns no rows (or ignores them).
  Status Run();

  int64_t ColumnInt(int col) const;
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;
  // The blob in place: valid until the next Step or the statement's reset. No copy.
  std::string_view ColumnBlobView(int col) const;
  bool ColumnIsNull(int col) const;

 private:
  Db* db_;
  sqlite3_stmt* stmt_;
};

class Db {
 public:
  static StatusOr<std::unique_ptr<Db>> Open(const std::string& path);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements without caching (schema, pragmas).
  Status Exec(const std::string& sql);
  // The cached statement for `sql` (prepared on first use).
  StatusOr<Stmt> Prepare(const std::string& sql);

  // "what: <sqlite message> (code N)" as an fp8::Status with a fitting code.
  Status Error(const std::string& what, int rc) const;
  int64_t LastInsertRowid() const;
  int Changes() const;
  sqlite3* raw() { return db_; }

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

// BEGIN IMMEDIATE on construction (takes the write lock up front, so a write never fails
// half-way with SQLITE_BUSY on lock upgrade); ROLLBACK on destruction unless Commit() ran.
class WriteTxn {
 public:
  static StatusOr<std::unique_ptr<WriteTxn>> Begin(Db* db);
  ~WriteTxn();
  Status Commit();

 private:
  explicit WriteTxn(Db* db, std::chrono::steady_clock::time_point begin) : db_(db), begin_(begin) {}
  Db* db_;
  std::chrono::steady_clock::time_point begin_;
  bool done_ = false;
};

}  // namespace fp8d::store::internal
