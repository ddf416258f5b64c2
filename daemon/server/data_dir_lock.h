// SPDX-License-Identifier: Apache-2.0
// One daemon per data dir: an exclusive flock on <data dir>/fp8d.lock, held for the process's
// life. Two daemons on one data dir would both re-adopt and run the same jobs.
#pragma once

#include <string>

#include "common/status.h"

namespace fp8d::server {

// Takes the lock and writes this process's pid into the file (so a second daemon can name the
// holder). The fd is close-on-exec (workers never hold it) and is deliberately never closed:
// the kernel drops the lock when the process ends, however it ends. FAILED_PRECONDITION naming
// the holder's pid when another process holds it.
fp8::Status LockDataDir(const std::string& data_dir);

}  // namespace fp8d::server
