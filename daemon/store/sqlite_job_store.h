// SPDX-License-Identifier: Apache-2.0
// Extra knobs of the SQLite JobStore, for tests and tools. The daemon uses the plain
// OpenSqliteJobStore(path) of job_store.h.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "daemon/store/job_store.h"

namespace fp8d::store {

// PRAGMA user_version of a database this build has fully migrated.
int SqliteSchemaVersion();

struct SqliteStoreOptions {
  // How long a write waits for another connection's write lock before failing UNAVAILABLE.
  int busy_timeout_ms = 5000;
  // Called inside every write transaction, after all its statements ran and just before
  // COMMIT. Tests use it to kill the process mid-transaction.
  std::function<void()> before_commit_for_testing;
};

StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path,
                                                       const SqliteStoreOptions& options);

}  // namespace fp8d::store
