// Process plumbing for the agent: starting a rank in its own session with its files as
// stdio, and identifying a process across pid reuse through its /proc start time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8d::agent {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // "KEY=VALUE", the whole environment of the child
  std::string stdout_path;        // opened O_WRONLY|O_APPEND in the child (must exist)
  std::string stderr_path;        // likewise
};

// Starts the process in a new session (so it leads its own process group, and a terminal's
// Ctrl-C or the daemon's own group signals never reach it), stdin from /dev/null, every fd
// above 2 closed, signal mask cleared and every disposition reset to default (the daemon may
// block or ignore signals; a worker must not inherit that). Returns the pid, which is also the
// process group id. posix_spawn reports exec failures (e.g. a missing binary) as an error.
fp8::StatusOr<int64_t> SpawnInOwnSession(const SpawnRequest& request);

// `base` (NULL-terminated "K=V" array, e.g. environ) with `overrides` replacing or adding
// keys. Sorted by key, so the result does not depend on the order of `base`.
std::vector<std::string> MergeEnvironment(char** base,
                                          const std::map<std::string, std::string>& overrides);

struct ProcStat {
  bool exists = false;
  bool zombie = false;        // exited but not yet reaped by its parent: not alive
  int64_t pgrp = 0;           // field 5: the process group id
  uint64_t start_time = 0;    // field 22 of /proc/<pid>/stat (clock ticks since boot)
};
ProcStat ReadProcStat(int64_t pid);

// The environment a process was started with (/proc/<pid>/environ; needs the same uid or
// root). Empty when unreadable.
std::map<std::string, std::string> ReadProcEnviron(int64_t pid);

}  // namespace fp8d::agent
