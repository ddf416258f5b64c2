// SPDX-License-Identifier: Apache-2.0
// Process plumbing for the launcher: starting a rank in its own session with its files as
// stdio, and identifying a process across pid reuse through its /proc start time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8d::launcher {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // "KEY=VALUE", the whole environment of the child
  // The child's stdout and stderr: files the parent opened (beneath the attempt folder, see
  // attempt_files.h), so the child, root until it drops to uid, opens nothing by name.
  int stdout_fd = -1;
  int stderr_fd = -1;
  // When uid > 0 the child drops to uid/gid/groups before exec (fp8d must be root).
  int64_t uid = 0;
  int64_t gid = 0;
  std::vector<unsigned int> groups;  // supplementary groups of the uid (getgrouplist)
  // uid > 0 only: an empty file (rank-<r>.pid) the child writes its pid into before it drops to
  // uid. fp8d cannot read another uid's /proc/<pid>/environ without CAP_SYS_PTRACE, which the
  // hardened unit does not grant, so after a restart this file names the rank
  // (FindRankByPidFile). -1: none.
  int pid_fd = -1;
};

// The NULL-terminated char* array execve and posix_spawn take; points into `strings`.
std::vector<char*> ExecArray(const std::vector<std::string>& strings);

// Starts the process in a new session (so it leads its own process group, and a terminal's
// Ctrl-C or the daemon's own group signals never reach it), stdin from /dev/null, every fd
// above 2 closed, signal mask cleared and every disposition reset to default (the daemon may
// block or ignore signals; a worker must not inherit that). Returns the pid, which is also the
// process group id. posix_spawn reports exec failures (e.g. a missing binary) as an error.
fp8::StatusOr<int64_t> SpawnInOwnSession(const SpawnRequest& request);
// The same for a request with uid > 0, through fork: setgroups, setgid, setuid in the child
// before exec (posix_spawn cannot change users). Exec failures are reported like posix_spawn's.
fp8::StatusOr<int64_t> SpawnAsUser(const SpawnRequest& request);

// `base` (NULL-terminated "K=V" array, e.g. environ) with `overrides` replacing or adding
// keys. Sorted by key, so the result does not depend on the order of `base`.
std::vector<std::string> MergeEnvironment(char** base,
                                          const std::map<std::string, std::string>& overrides);

// The same with a map as the base.
std::vector<std::string> MergeEnvironment(std::map<std::string, std::string> base,
                                          const std::map<std::string, std::string>& overrides);

// Who an attempt's ranks run as, resolved once per launch.
struct RunAs {
  int64_t uid = 0;  // 0: fp8d's own user, nothing to switch or chown
  int64_t gid = 0;
  std::vector<unsigned int> groups;
  std::map<std::string, std::string> env;  // the base environment (LaunchRequest.env)
};
// Resolves the request's uid: its primary group and supplementary groups, and HOME/USER/LOGNAME
// in the environment. Touches no file: the attempt folder is handed over by
// PrepareAttemptFolder (attempt_files.h).
fp8::StatusOr<RunAs> ResolveRunAs(const struct LaunchRequest& request);

struct ProcStat {
  bool exists = false;
  bool zombie = false;        // exited but not yet reaped by its parent: not alive
  int64_t pgrp = 0;           // field 5: the process group id
  uint64_t start_time = 0;    // field 22 of /proc/<pid>/stat (clock ticks since boot)
};
ProcStat ReadProcStat(int64_t pid);

// The rank of `pid` when it is a worker started with `--spec <attempt dir>/spec.json` (read
// from /proc/<pid>/cmdline, which any uid may read) and `<attempt dir>/rank-<r>.pid` holds its
// pid. Sets `attempt_dir` and returns the rank, or -1. The folder and the pid files are read
// beneath the jobs root (attempt_files.h): the job's owner may have put links there.
int FindRankByPidFile(int64_t pid, std::string* attempt_dir);

// The environment a process was started with (/proc/<pid>/environ; needs the same uid or
// root). Empty when unreadable.
std::map<std::string, std::string> ReadProcEnviron(int64_t pid);

}  // namespace fp8d::launcher
