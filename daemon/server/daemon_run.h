// SPDX-License-Identifier: Apache-2.0
// fp8d, the controller (docs/design.md §1, §7). Run wires the SQLite store, the local launcher and
// the job manager (one io_context thread) to the gRPC JobService (gRPC's own threads), with the
// health service reporting SERVING only once recovery has finished, and server reflection.
//
// Signals: the caller blocks SIGTERM/SIGINT/SIGHUP in every thread before calling Run; Run takes
// them on the calling thread with sigwait, so the shutdown sequence runs on a thread that may
// block: stop accepting (server Shutdown with a deadline, while io still runs so in-flight calls
// can finish), then the manager's Shutdown (persist; workers keep running for the next fp8d to
// re-adopt).
#pragma once

#include "daemon/server/server_config.h"

namespace fp8d::server {

// Runs the daemon until SIGTERM/SIGINT. Returns the process exit code: 0 after a clean
// shutdown, 1 when the data dir, the store, a listening address or recovery fails, 2 for flags
// that cannot work together.
int Run(const ServerConfig& config);

}  // namespace fp8d::server
