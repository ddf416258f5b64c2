// SPDX-License-Identifier: Apache-2.0
// fp8d's entry point: the process-wide settings every thread must inherit, the logger and the
// flags; daemon_run.h describes what runs then.
#include <signal.h>
#include <sys/resource.h>

#include <absl/synchronization/mutex.h>
#include <spdlog/spdlog.h>

#include "daemon/server/daemon_run.h"
#include "daemon/server/log_setup.h"
#include "daemon/server/server_config.h"

int main(int argc, char** argv) {
  // gRPC locks absl mutexes on every call, and this absl build tracks each lock in a deadlock
  // graph (GraphCycles, ~3% of all CPU under 64 concurrent CreateJobs). A debugging aid: off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before any thread exists, so every thread inherits the mask and only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Many clients and watchers: the soft fd limit up to the hard one.
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }

  fp8d::server::InstallStderrLogger();

  int cli_exit = -1;  // set when CLI11 handled --help or a usage error itself
  auto config = fp8d::server::ParseServerConfig(argc, argv, &cli_exit);
  if (!config.ok()) {
    if (cli_exit >= 0) return cli_exit == 0 ? 0 : 2;
    spdlog::error("{}", config.status().message());
    return 2;
  }
  if (fp8::Status logs = fp8d::server::ConfigureLoggers(config->log_level, config->audit_log); !logs.ok()) {
    spdlog::error("{}", logs.message());
    return 2;
  }
  return fp8d::server::Run(*config);
}
