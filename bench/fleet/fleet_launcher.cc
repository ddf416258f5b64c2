// SPDX-License-Identifier: Apache-2.0
#include "bench/fleet/fleet_launcher.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "daemon/launcher/attempt_files.h"
#include "daemon/launcher/event_reader.h"
#include "daemon/launcher/process.h"

namespace fp8d::bench {

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<launcher::Slot> FleetSlots(const FleetOptions& o) {
  std::vector<launcher::Slot> slots;
  slots.reserve(static_cast<size_t>(o.nodes) * o.gpus_per_node);
  for (int n = 0; n < o.nodes; ++n) {
    for (int g = 0; g < o.gpus_per_node; ++g) slots.push_back({"node-" + std::to_string(n), g});
  }
  return slots;
}

// A rank's phase in [0, 1): its lines spread over the period instead of arriving together.
double Phase(const std::string& job_id, int attempt, int rank, uint64_t salt) {
  const uint64_t h = std::hash<std::string>{}(job_id) ^ (static_cast<uint64_t>(attempt) << 20) ^
                     (static_cast<uint64_t>(rank) << 8) ^ salt;
  return static_cast<double>((h * 0x9E3779B97F4A7C15ull) >> 11) / 9007199254740992.0;
}

void NameThisThread(const char* name, std::atomic<pid_t>* tid) {
  pthread_setname_np(pthread_self(), name);
  tid->store(static_cast<pid_t>(::syscall(SYS_gettid)));
}

}  // namespace

struct FleetLauncher::Rank {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int world = 0;
  int64_t pid = 0;  // shown in `started` only
  // Observer thread only, except fd: the reader's own fd, which the ranks thread appends to
  // (O_APPEND) while the rank is not gone. Reset (closed) once the exit is delivered.
  std::unique_ptr<launcher::EventFileReader> reader;
  int fd = -1;
  bool exit_delivered = false;  // observer thread
  // Under mu_.
  bool silent = false;
  bool gone = false;
  bool in_written = false;
  int signal = 0;
  int64_t step = 0;
  int64_t last_line_us = 0;
};

FleetLauncher::FleetLauncher(FleetOptions options, launcher::LauncherListener* listener)
    : options_(options), listener_(listener), slots_(FleetSlots(options_)) {
  ranks_ = std::thread([this] { RanksLoop(); });
  observer_ = std::thread([this] { ObserveLoop(); });
}

FleetLauncher::~FleetLauncher() { Stop(); }

void FleetLauncher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ranks_cv_.notify_all();
  observer_cv_.notify_all();
  if (std::this_thread::get_id() == observer_.get_id()) return;  // from a listener callback
  if (ranks_.joinable()) ranks_.join();
  if (observer_.joinable()) observer_.join();
}

fp8::StatusOr<std::vector<launcher::RankProcess>> FleetLauncher::Launch(const launcher::LaunchRequest& original) {
  if (original.slots.empty()) return fp8::InvalidArgumentError("slots: at least one rank is needed");
  launcher::LaunchRequest request = original;
  request.attempt_dir = std::filesystem::absolute(request.attempt_dir).lexically_normal().string();
  // The attempt folder, spec.json and the events files exactly as the local launcher makes them.
  FP8_ASSIGN_OR_RETURN(launcher::RunAs run_as, launcher::ResolveRunAs(request));
  fp8::StatusOr<launcher::AttemptFolder> folder = launcher::PrepareAttemptFolder(request, run_as);
  if (!folder.ok()) return launcher::AsLaunchError(folder.status());
  std::vector<RankPtr> ranks;
  std::vector<launcher::RankProcess> out;
  for (int r = 0; r < static_cast<int>(request.slots.size()); ++r) {
    FP8_ASSIGN_OR_RETURN(launcher::UniqueFd fd, launcher::CreateRankFile(folder->attempt, r, ".events",
                                                                         O_RDWR | O_APPEND, run_as));
    auto rank = std::make_shared<Rank>();
    rank->job_id = request.job_id;
    rank->attempt = request.attempt;
    rank->rank = r;
    rank->world = static_cast<int>(request.slots.size());
    rank->reader = std::make_unique<launcher::EventFileReader>(
        request.attempt_dir + "/" + launcher::RankFileName(r, ".events"), 0, std::move(fd));
    FP8_RETURN_IF_ERROR(rank->reader->Open());
    rank->fd = rank->reader->fd();
    out.push_back(launcher::RankProcess{r, "fleet:" + request.job_id + ":" + std::to_string(request.attempt) + ":" +
                                               std::to_string(r), 0, 0});
    ranks.push_back(std::move(rank));
  }
  const int64_t now = SteadyMicros();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return fp8::FailedPreconditionError("launcher is stopped");
    const auto key = std::make_pair(request.job_id, request.attempt);
    if (attempts_.count(key)) return fp8::AlreadyExistsError("job " + request.job_id + " attempt is already running");
    for (const RankPtr& r : ranks) {
      r->pid = 100000 + counts_.launches * 64 + r->rank;
      // Ranks of a gang come up within a few ms of each other.
      due_.push(Due{now + options_.start_ms * 1000 + r->rank * 2000, Line::kStarted, r});
    }
    ++counts_.launches;
    counts_.live_ranks += static_cast<int64_t>(ranks.size());
    attempts_[key] = std::move(ranks);
  }
  ranks_cv_.notify_one();
  return out;
}

fp8::Status FleetLauncher::Adopt(const std::string& job_id, int attempt, const std::string&,
                                 const std::vector<launcher::RankProcess>&) {
  return fp8::NotFoundError("job " + job_id + " attempt " + std::to_string(attempt) +
                            ": a fleet's ranks do not outlive its process");
}

void FleetLauncher::Signal(const std::string& job_id, int attempt, int sig) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find({job_id, attempt});
    if (it == attempts_.end()) return;
    for (const RankPtr& r : it->second) {
      if (r->gone) continue;
      // A worker without a SIGTERM handler dies of it; a wedged one only of SIGKILL.
      if (sig == SIGKILL || (sig == SIGTERM && !r->silent)) EndLocked(r, sig);
    }
  }
  observer_cv_.notify_one();
}

fp8::StatusOr<FleetLauncher::Injected> FleetLauncher::Inject(const std::string& job_id, int attempt, int rank,
                                                             Fault fault) {
  Injected injected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find({job_id, attempt});
    if (it == attempts_.end()) return fp8::NotFoundError("no such attempt");
    // Ranks leave the attempt's list as their exits are delivered: look for the number.
    auto found = std::find_if(it->second.begin(), it->second.end(), [rank](const RankPtr& r) { return r->rank == rank; });
    if (found == it->second.end()) return fp8::NotFoundError("no such rank");
    const RankPtr& r = *found;
    if (r->gone || r->silent || r->last_line_us == 0) return fp8::NotFoundError("rank is not live and writing");
    if (fault == Fault::kSigkill) {
      injected.at_us = SteadyMicros();
      EndLocked(r, SIGKILL);
    } else {
      r->silent = true;
      injected.at_us = r->last_line_us;
    }
  }
  observer_cv_.notify_one();
  return injected;
}

FleetLauncher::Counts FleetLauncher::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counts c = counts_;
  c.events_delivered = events_delivered_.load();
  c.exits_delivered = exits_delivered_.load();
  return c;
}

void FleetLauncher::EndLocked(const RankPtr& rank, int sig) {
  rank->gone = true;
  rank->signal = sig;
  ended_.push_back(rank);
}

void FleetLauncher::WriteLocked(Rank& r, Line kind, int64_t now_us) {
  char buf[512];
  int n = 0;
  const double t = UnixSeconds();
  switch (kind) {
    case Line::kStarted: {
      // As fp8-worker's proto JSON printer writes it: zero fields left out, int64 as strings.
      char rank_field[32] = "";
      if (r.rank != 0) std::snprintf(rank_field, sizeof rank_field, "\"rank\":%d,", r.rank);
      n = std::snprintf(buf, sizeof buf,
                        "{\"time\":%.3f,\"started\":{%s\"world_size\":%d,\"pid\":\"%lld\","
                        "\"recipe\":\"fp8-tensorwise\",\"num_params\":\"124439808\"}}\n",
                        t, rank_field, r.world, static_cast<long long>(r.pid));
      break;
    }
    case Line::kProgress: {
      ++r.step;
      const double loss = 2.0 + 8.0 / static_cast<double>(r.step + 10);
      n = std::snprintf(buf, sizeof buf,
                        "{\"time\":%.3f,\"progress\":{\"step\":\"%lld\",\"total_steps\":\"1000000\","
                        "\"loss\":%.4f,\"lr\":0.0003,\"grad_norm\":%.4f,\"tokens_per_sec\":%.1f,"
                        "\"eta_seconds\":%.1f}}\n",
                        t, static_cast<long long>(r.step), loss, 0.5 + loss / 10.0, 16384.0 + r.rank,
                        static_cast<double>(1000000 - r.step));
      break;
    }
    case Line::kHeartbeat:
      n = std::snprintf(buf, sizeof buf, "{\"time\":%.3f,\"heartbeat\":{}}\n", t);
      break;
  }
  ssize_t w;
  do {
    w = ::write(r.fd, buf, static_cast<size_t>(n));
  } while (w < 0 && errno == EINTR);
  if (w != n) {
    std::fprintf(stderr, "fleet: writing %s rank %d's events: %s\n", r.job_id.c_str(), r.rank,
                 w < 0 ? std::strerror(errno) : "short write");
    return;
  }
  r.last_line_us = now_us;
  ++counts_.lines_written;
}

void FleetLauncher::RanksLoop() {
  NameThisThread("fleet-ranks", &ranks_tid_);
  // Lines due within one batch are written together and the observer is told once, as a busy
  // observer finds several inotify events waiting.
  constexpr int64_t kBatchUs = 10'000;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const int64_t now = SteadyMicros();
    bool wrote = false;
    while (!due_.empty() && due_.top().at_us <= now) {
      Due d = due_.top();
      due_.pop();
      Rank& r = *d.rank;
      if (r.gone || r.silent) continue;  // a dead or wedged process writes nothing
      WriteLocked(r, d.line, now);
      if (!r.in_written) {
        r.in_written = true;
        written_.push_back(d.rank);
      }
      wrote = true;
      switch (d.line) {
        case Line::kStarted:
          due_.push(Due{now + static_cast<int64_t>(Phase(r.job_id, r.attempt, r.rank, 1) * options_.progress_ms * 1000),
                        Line::kProgress, d.rank});
          due_.push(Due{now + static_cast<int64_t>(Phase(r.job_id, r.attempt, r.rank, 2) * options_.heartbeat_ms * 1000),
                        Line::kHeartbeat, d.rank});
          break;
        case Line::kProgress:
          due_.push(Due{d.at_us + options_.progress_ms * 1000, Line::kProgress, d.rank});
          break;
        case Line::kHeartbeat:
          due_.push(Due{d.at_us + options_.heartbeat_ms * 1000, Line::kHeartbeat, d.rank});
          break;
      }
    }
    if (wrote) observer_cv_.notify_one();
    const int64_t next = due_.empty() ? now + 100'000 : std::max(due_.top().at_us, now + kBatchUs);
    ranks_cv_.wait_for(lock, std::chrono::microseconds(next - now));
  }
}

void FleetLauncher::Drain(Rank& r, bool exited) {
  if (r.exit_delivered) return;
  auto deliver = [&](const launcher::EventLine& line) {
    if (std::optional<launcher::WorkerEvent> ev = launcher::ToWorkerEvent(r.job_id, r.attempt, r.rank, line)) {
      listener_->OnWorkerEvent(std::move(*ev));
      events_delivered_.fetch_add(1, std::memory_order_relaxed);
    }
  };
  fp8::StatusOr<std::vector<launcher::EventLine>> lines = r.reader->ReadAvailable();
  if (lines.ok()) {
    for (const launcher::EventLine& line : *lines) deliver(line);
  } else {
    std::fprintf(stderr, "fleet: %s\n", lines.status().ToString().c_str());
  }
  if (!exited) return;
  if (auto tail = r.reader->TakeUnterminatedTail()) deliver(*tail);
  launcher::WorkerExit ex;
  ex.job_id = r.job_id;
  ex.attempt = r.attempt;
  ex.rank = r.rank;
  ex.exit_code = -1;
  ex.signal = r.signal;
  listener_->OnWorkerExit(std::move(ex));
  exits_delivered_.fetch_add(1, std::memory_order_relaxed);
  r.exit_delivered = true;
  r.reader.reset();  // closes the events file
}

void FleetLauncher::ObserveLoop() {
  NameThisThread("fleet-observer", &observer_tid_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    observer_cv_.wait(lock, [this] { return stopping_ || !written_.empty() || !ended_.empty(); });
    if (stopping_) return;
    std::vector<RankPtr> written, ended;
    written.swap(written_);
    ended.swap(ended_);
    for (const RankPtr& r : written) r->in_written = false;
    lock.unlock();
    // Lines first, then exits: a rank's exit follows every line it wrote.
    for (const RankPtr& r : written) Drain(*r, false);
    for (const RankPtr& r : ended) Drain(*r, true);
    lock.lock();
    for (const RankPtr& r : ended) {
      auto it = attempts_.find({r->job_id, r->attempt});
      if (it == attempts_.end()) continue;
      auto& v = it->second;
      v.erase(std::remove(v.begin(), v.end(), r), v.end());
      --counts_.live_ranks;
      if (v.empty()) attempts_.erase(it);
    }
  }
}

}  // namespace fp8d::bench
