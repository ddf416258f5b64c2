// SPDX-License-Identifier: Apache-2.0
#include "bench/slurm/slurm_scheduler_clock.h"

#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace fp8d::bench {
namespace {

constexpr double kBatchSchedDelaySeconds = 3.0;
// time() is read a moment after the wake-up the log shows; this much later keeps the whole-
// second comparison on the safe side.
constexpr double kWholeSecondMargin = 0.05;

std::chrono::duration<double> Seconds(double s) { return std::chrono::duration<double>(s); }

}  // namespace

std::optional<WallTime> ParseSlurmLogTime(const std::string& line) {
  if (line.size() < 25 || line[0] != '[' || line[20] != '.' || line[24] != ']') return std::nullopt;
  std::tm tm{};
  std::istringstream in(line.substr(1, 19));
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return std::nullopt;
  tm.tm_isdst = -1;
  const std::time_t secs = std::mktime(&tm);
  if (secs == -1) return std::nullopt;
  const int ms = std::atoi(line.substr(21, 3).c_str());
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(ms);
}

void SlurmSchedulerClock::ReadNewLines() {
  std::ifstream in(log_);
  in.seekg(read_);
  std::string line;
  const std::string allocate = "sched: Allocate JobId=";
  while (std::getline(in, line) && !in.eof()) {  // a last line without '\n' is still being written
    read_ += static_cast<std::streamoff>(line.size()) + 1;
    if (line.find("sched: Running job scheduler") != std::string::npos) {
      if (auto t = ParseSlurmLogTime(line)) last_run_ = t;
    } else if (const size_t at = line.find(allocate); at != std::string::npos) {
      const size_t from = at + allocate.size();
      if (auto t = ParseSlurmLogTime(line)) allocations_[line.substr(from, line.find(' ', from) - from)] = *t;
    }
  }
}

std::optional<WallTime> SlurmSchedulerClock::AllocationOf(const std::string& slurm_job_id) {
  ReadNewLines();
  auto it = allocations_.find(slurm_job_id);
  return it == allocations_.end() ? std::nullopt : std::optional<WallTime>(it->second);
}

std::optional<WallTime> SlurmSchedulerClock::LastSchedulerRun() {
  ReadNewLines();
  return last_run_;
}

void SlurmSchedulerClock::Observe(WallTime wake_up) {
  if (anchor_ && wake_up > *anchor_) {
    const double apart = std::chrono::duration<double>(wake_up - *anchor_).count();
    const double wake_ups = std::round(apart / period_);
    // Only when the count of wake-ups between the two cannot be off by one.
    if (wake_ups >= 1 && std::abs(apart / wake_ups - period_) < 0.02) period_ = apart / wake_ups;
  }
  anchor_ = wake_up;
}

WallTime SlurmSchedulerClock::NextWakeUpAfter(WallTime t) const {
  const double since = std::chrono::duration<double>(t - *anchor_).count();
  const double k = std::ceil(since / period_);
  return *anchor_ + std::chrono::duration_cast<WallTime::duration>(Seconds(k * period_));
}

WallTime SlurmSchedulerClock::NextSchedulingWakeUp(WallTime not_before) {
  WallTime earliest = not_before;
  if (auto last = LastSchedulerRun()) {
    const WallTime allowed =
        *last + std::chrono::duration_cast<WallTime::duration>(Seconds(kBatchSchedDelaySeconds + kWholeSecondMargin));
    earliest = std::max(earliest, allowed);
  }
  return NextWakeUpAfter(earliest);
}

}  // namespace fp8d::bench
