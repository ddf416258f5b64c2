// SPDX-License-Identifier: Apache-2.0
// Schema migrations of fp8d.db, keyed on PRAGMA user_version. Internal to daemon/store.
#pragma once

#include <string>

#include "daemon/store/sqlite_db.h"

namespace fp8d::store::internal {

// The number of migration steps this build knows (= user_version after Migrate).
int LatestSchemaVersion();

// Applies the missing steps in order, each in its own transaction. FAILED_PRECONDITION when
// the file was written by a newer fp8d (a higher user_version than this build knows).
Status Migrate(Db* db, const std::string& path);

}  // namespace fp8d::store::internal
