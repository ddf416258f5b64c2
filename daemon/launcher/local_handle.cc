// SPDX-License-Identifier: Apache-2.0
#include "daemon/launcher/local_handle.h"

#include <cinttypes>
#include <cstdio>

namespace fp8d::launcher {

std::string LocalHandle(int64_t pid, uint64_t start_time) {
  if (pid <= 0) return "";
  return "pid:" + std::to_string(pid) + ":start:" + std::to_string(start_time);
}

std::optional<LocalProcessId> ParseLocalHandle(const std::string& handle) {
  long long pid = 0;
  unsigned long long start = 0;
  int consumed = 0;
  if (std::sscanf(handle.c_str(), "pid:%lld:start:%llu%n", &pid, &start, &consumed) != 2 ||
      consumed != static_cast<int>(handle.size()) || pid <= 0) {
    return std::nullopt;
  }
  return LocalProcessId{static_cast<int64_t>(pid), static_cast<uint64_t>(start)};
}

}  // namespace fp8d::launcher
