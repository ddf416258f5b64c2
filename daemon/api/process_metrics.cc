// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/process_metrics.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace fp8d::api {
namespace {

std::string ReadAll(const char* path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

std::optional<ProcessFigures> ParseProcStat(const std::string& self_stat, const std::string& proc_stat,
                                            long ticks_per_second, long page_size) {
  // Field 2 (comm) is in parentheses and may hold spaces and ')': the fields after it start
  // after the last ')'. Counting from field 3 (state): utime 14, stime 15, starttime 22, rss 24.
  const size_t paren = self_stat.rfind(')');
  if (paren == std::string::npos || ticks_per_second <= 0) return std::nullopt;
  std::istringstream fields(self_stat.substr(paren + 1));
  std::vector<std::string> f;
  for (std::string word; fields >> word;) f.push_back(word);
  if (f.size() < 22) return std::nullopt;  // f[0] is field 3
  double btime = -1;
  std::istringstream lines(proc_stat);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("btime ", 0) == 0) btime = std::stod(line.substr(6));
  }
  if (btime < 0) return std::nullopt;
  try {
    ProcessFigures p;
    const double ticks = static_cast<double>(ticks_per_second);
    p.cpu_seconds = (std::stod(f[14 - 3]) + std::stod(f[15 - 3])) / ticks;
    p.start_time_seconds = btime + std::stod(f[22 - 3]) / ticks;
    p.resident_bytes = std::stod(f[24 - 3]) * static_cast<double>(page_size);
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<ProcessFigures> ReadProcessFigures() {
  std::optional<ProcessFigures> p = ParseProcStat(ReadAll("/proc/self/stat"), ReadAll("/proc/stat"),
                                                  sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
  if (!p) return std::nullopt;
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (ec) return std::nullopt;
  p->open_fds = fds - 1;  // the directory iterator's own fd is listed too
  return p;
}

}  // namespace fp8d::api
