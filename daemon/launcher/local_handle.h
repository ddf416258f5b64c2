// SPDX-License-Identifier: Apache-2.0
// The local launcher's per-rank handle (RankProcess::handle): a process id and its /proc start
// time, so a pid the kernel reused for another process is never mistaken for the rank.
// Only the local launcher (and its tests) read it; the core and the store pass it through.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fp8d::launcher {

struct LocalProcessId {
  int64_t pid = 0;          // also the process group id (each rank is its own group leader)
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
};

// "pid:<pid>:start:<start_time>"; empty for pid 0 (no process).
std::string LocalHandle(int64_t pid, uint64_t start_time);
// The pid and start time of a handle LocalHandle wrote; nullopt for an empty or foreign handle.
std::optional<LocalProcessId> ParseLocalHandle(const std::string& handle);

}  // namespace fp8d::launcher
