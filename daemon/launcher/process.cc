// SPDX-License-Identifier: Apache-2.0
#include "daemon/launcher/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/launcher/launcher.h"
#include "daemon/launcher/attempt_files.h"

namespace fp8d::launcher {

namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// RAII for the posix_spawn attribute objects, so every early return cleans up.
struct SpawnAttrs {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnAttrs() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnAttrs() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

}  // namespace

std::vector<char*> ExecArray(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

fp8::StatusOr<int64_t> SpawnInOwnSession(const SpawnRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return fp8::InvalidArgumentError("worker_argv_prefix: empty program");
  }
  if (request.stdout_fd < 0 || request.stderr_fd < 0) {
    return fp8::InvalidArgumentError("spawn: the worker's stdout and stderr must be open files");
  }
  if (request.uid > 0) return SpawnAsUser(request);
  SpawnAttrs s;
  int rc = 0;
  // stdout and stderr are fds the parent opened beneath the attempt folder (close-on-exec, so
  // another thread's fork and exec cannot leak them); dup2 gives the child its own copies.
  rc |= posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  rc |= posix_spawn_file_actions_adddup2(&s.actions, request.stdout_fd, 1);
  rc |= posix_spawn_file_actions_adddup2(&s.actions, request.stderr_fd, 2);
  // Belt and braces on top of O_CLOEXEC: libraries in the daemon (gRPC, SQLite) may open fds
  // without it, and a worker holding the daemon's listening socket or database would be a bug.
  rc |= posix_spawn_file_actions_addclosefrom_np(&s.actions, 3);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  rc |= posix_spawnattr_setsigdefault(&s.attr, &all);
  rc |= posix_spawnattr_setsigmask(&s.attr, &none);
  rc |= posix_spawnattr_setflags(&s.attr,
                                 POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  if (rc != 0) return fp8::InternalError("posix_spawn attributes could not be set up");

  std::vector<char*> argv = ExecArray(request.argv);
  std::vector<char*> envp = ExecArray(request.env);

  pid_t pid = 0;
  int err = posix_spawnp(&pid, argv[0], &s.actions, &s.attr, argv.data(), envp.data());
  if (err != 0) {
    return fp8::Status(err == ENOENT || err == EACCES ? fp8::StatusCode::kFailedPrecondition
                                                      : fp8::StatusCode::kInternal,
                       "starting '" + request.argv[0] + "': " + ErrnoText(err));
  }
  return static_cast<int64_t>(pid);
}

std::vector<std::string> MergeEnvironment(char** base,
                                          const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = base; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const auto& [k, v] : overrides) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

ProcStat ReadProcStat(int64_t pid) {
  ProcStat st;
  if (pid <= 0) return st;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return st;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
  auto close = text.rfind(')');
  if (close == std::string::npos) return st;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  // After ')': field 3 (state) is index 0, field 22 (starttime) is index 19.
  for (int i = 0; i <= 19 && fields >> field; ++i) {
    if (i == 0) st.zombie = (field == "Z" || field == "X" || field == "x");
    if (i == 2) st.pgrp = std::strtoll(field.c_str(), nullptr, 10);
    if (i == 19) {
      st.exists = true;
      st.start_time = std::strtoull(field.c_str(), nullptr, 10);
    }
  }
  return st;
}

int FindRankByPidFile(int64_t pid, std::string* attempt_dir) {
  std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string arg, spec;
  for (bool after_flag = false; std::getline(cmdline, arg, '\0');) {
    if (after_flag) {
      spec = arg;
      break;
    }
    after_flag = arg == "--spec";
  }
  const std::string suffix = "/spec.json";
  if (spec.size() <= suffix.size() || spec.compare(spec.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string dir = spec.substr(0, spec.size() - suffix.size());
  // Any process may name any folder after --spec: it is opened like an attempt folder, and
  // only regular rank-<r>.pid files in it are read.
  fp8::StatusOr<AttemptFolder> folder = OpenAttemptFolder(dir, false);
  if (!folder.ok()) return -1;
  fp8::StatusOr<std::vector<std::string>> names = folder->attempt.List();
  if (!names.ok()) return -1;
  for (const std::string& name : *names) {
    if (name.rfind("rank-", 0) != 0 || name.size() <= 9 || name.compare(name.size() - 4, 4, ".pid") != 0) continue;
    const std::string number = name.substr(5, name.size() - 9);
    if (number.find_first_not_of("0123456789") != std::string::npos || number.size() > 6) continue;
    fp8::StatusOr<UniqueFd> fd = folder->attempt.OpenFile(name, O_RDONLY);
    if (!fd.ok()) continue;
    char text[32] = {};
    const ssize_t n = ::pread(fd->get(), text, sizeof(text) - 1, 0);
    if (n <= 0) continue;
    if (std::strtoll(text, nullptr, 10) == pid) {
      *attempt_dir = dir;
      return std::stoi(number);
    }
  }
  return -1;
}

std::map<std::string, std::string> ReadProcEnviron(int64_t pid) {
  std::map<std::string, std::string> env;
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return env;
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

uint64_t ProcessStartTime(int64_t pid) { return ReadProcStat(pid).start_time; }

bool ProcessMatches(int64_t pid, uint64_t start_time) {
  ProcStat st = ReadProcStat(pid);
  return st.exists && !st.zombie && st.start_time == start_time;
}

}  // namespace fp8d::launcher
