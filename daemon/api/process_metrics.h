// SPDX-License-Identifier: Apache-2.0
// The process metrics every Prometheus client library exports under the same names
// (process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds,
// process_start_time_seconds), read from /proc/self at each scrape. prometheus-cpp has no
// collector for them, so fp8d reads the files itself.
#pragma once

#include <optional>
#include <string>

namespace fp8d::api {

struct ProcessFigures {
  double cpu_seconds = 0;          // user + system
  double resident_bytes = 0;
  double open_fds = 0;
  double start_time_seconds = 0;   // since the Unix epoch
};

// Parses the text of /proc/self/stat and the btime line of /proc/stat; `ticks_per_second` and
// `page_size` as sysconf gives them. nullopt when either text is not what Linux writes.
std::optional<ProcessFigures> ParseProcStat(const std::string& self_stat, const std::string& proc_stat,
                                            long ticks_per_second, long page_size);

// This process's figures now (open_fds counts /proc/self/fd); nullopt off Linux or when /proc
// cannot be read.
std::optional<ProcessFigures> ReadProcessFigures();

}  // namespace fp8d::api
