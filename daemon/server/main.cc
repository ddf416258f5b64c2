// fp8d's entry point: the process-wide settings every thread must inherit, the logger and the
// flags; daemon_run.h describes what runs then.
#include <signal.h>
#include <sys/resource.h>

#include <absl/synchronization/mutex.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/server/daemon_run.h"
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

  auto logger = spdlog::stderr_color_mt("fp8d");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  int cli_exit = -1;  // set when CLI11 handled --help or a usage error itself
  auto config = fp8d::server::ParseServerConfig(argc, argv, &cli_exit);
  if (!config.ok()) {
    if (cli_exit >= 0) return cli_exit == 0 ? 0 : 2;
    spdlog::error("{}", config.status().message());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  return fp8d::server::Run(*config);
}
