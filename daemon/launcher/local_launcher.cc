// SPDX-License-Identifier: Apache-2.0
// LocalLauncher: the in-process launcher for the machine the daemon runs on.
//
// One observer thread does all the watching: every poll it reaps exited children (only the
// pids it started: the daemon may have other children), checks adopted pids through /proc,
// reads new lines from every rank's events file and calls the listener. Between polls it
// sleeps in poll(2) on a pidfd per rank, so a worker's death wakes it at once instead of at
// the next tick (without pidfds, e.g. under a seccomp filter, it simply polls), and on an
// inotify watch per events file, so a worker's event is read as soon as it is written rather
// than up to a poll interval later (WatchJob latency). Because one thread
// delivers everything, a rank's events arrive in file order and its exit strictly after its
// last event. The listener is called without the launcher's lock held, so it may call Signal.
//
// After a controller restart, FindWorkers finds the ranks it started by their environment
// (each rank leads its own process group and carries FP8D_RENDEZVOUS_DIR and FP8D_RANK), or,
// for a rank running as another uid whose environment fp8d may not read, by the pid file its
// child wrote before it dropped to that uid (rank-<r>.pid, FindRankByPidFile); and
// AdoptForRecovery observes a rank that is already gone as exited, so the rest of its events
// file is still read and delivered.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "daemon/launcher/launcher.h"
#include "daemon/launcher/attempt_files.h"
#include "daemon/launcher/event_reader.h"
#include "daemon/launcher/local_handle.h"
#include "daemon/launcher/process.h"
#include "daemon/launcher/slots.h"

extern char** environ;

namespace fp8d::launcher {

namespace {

namespace fs = std::filesystem;

std::string RankFile(const std::string& attempt_dir, int rank, const char* suffix) {
  return attempt_dir + "/rank-" + std::to_string(rank) + suffix;
}

std::string AbsolutePath(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

// A pidfd for `pid`, or -1 where the kernel (or a seccomp filter) does not offer them.
int OpenPidFd(int64_t pid) {
#ifdef SYS_pidfd_open
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  return fd >= 0 ? fd : -1;  // pidfds are always close-on-exec
#else
  (void)pid;
  return -1;
#endif
}

struct RankState {
  ~RankState() {
    if (pidfd >= 0) ::close(pidfd);
  }

  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int64_t pid = 0;
  uint64_t start_time = 0;
  bool our_child = false;  // started by this launcher: reap it; else watch /proc
  bool never_started = false;  // recovery: no process and no events file
  std::unique_ptr<EventFileReader> reader;
  // Readable once the process has exited. Only the observer thread touches it after the
  // rank is registered; `pidfd_fired` keeps a readable one out of later poll sets.
  int pidfd = -1;
  bool pidfd_fired = false;
  int watch = -1;  // inotify watch on the events file, -1 if none
  // Guarded by LocalLauncher::mu_: set once the process is gone (reaped, or seen gone).
  bool gone = false;
  WorkerExit exit;
};

using AttemptKey = std::pair<std::string, int>;

class LocalLauncher final : public Launcher {
 public:
  LocalLauncher(LocalLauncherOptions options, LauncherListener* listener)
      : options_(std::move(options)), listener_(listener), slots_(ComputeSlots(options_)) {
    if (options_.poll_interval_ms <= 0) options_.poll_interval_ms = 20;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);  // -1: events are polled
    observer_ = std::thread([this] { ObserveLoop(); });
    observer_id_ = observer_.get_id();
  }

  ~LocalLauncher() override {
    // Stop() may be called from a callback, but destroying the launcher there would pull the
    // observer's own state from under it.
    FP8_CHECK(std::this_thread::get_id() != observer_id_);
    Stop();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (inotify_fd_ >= 0) ::close(inotify_fd_);
  }

  std::vector<Slot> Slots() const override { return slots_; }

  StatusOr<std::vector<RankProcess>> Launch(const LaunchRequest& request) override;
  Status Adopt(const std::string& job_id, int attempt, const std::string& attempt_dir,
               const std::vector<RankProcess>& ranks) override {
    return AdoptRanks(job_id, attempt, attempt_dir, ranks, /*recovery=*/false);
  }
  Status AdoptForRecovery(const std::string& job_id, int attempt, const std::string& attempt_dir,
                          const std::vector<RankProcess>& ranks) override {
    return AdoptRanks(job_id, attempt, attempt_dir, ranks, /*recovery=*/true);
  }
  StatusOr<std::vector<FoundWorker>> FindWorkers() override { return FindWorkerProcesses(); }
  void Signal(const std::string& job_id, int attempt, int sig) override;
  void Stop() override;

 private:
  // `recovery`: gone ranks are observed as exited instead of refusing the whole attempt.
  Status AdoptRanks(const std::string& job_id, int attempt, const std::string& attempt_dir,
                    const std::vector<RankProcess>& ranks, bool recovery);
  Status ValidateLaunch(const LaunchRequest& request) const;
  std::map<std::string, std::string> RankEnvironment(const LaunchRequest& request, int rank) const;
  StatusOr<std::vector<FoundWorker>> FindWorkerProcesses();
  void ObserveLoop();
  void PollOnce();
  // Under mu_: updates rank.gone / rank.exit.
  void CheckGoneLocked(RankState& rank);
  void Deliver(RankState& rank, const EventLine& line);
  // Interrupts the observer's sleep (stop, or a new rank whose pidfd must join the poll set).
  void Wake();
  // Sleeps up to one poll interval, less if a watched process exits or Wake() is called.
  void SleepUntilSomethingHappens();
  // Wakes the observer whenever `rank`'s events file is written (best effort).
  void WatchEvents(RankState& rank);
  void UnwatchEvents(RankState& rank);

  LocalLauncherOptions options_;
  LauncherListener* listener_;
  const std::vector<Slot> slots_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<AttemptKey, std::vector<std::shared_ptr<RankState>>> attempts_;
  std::thread observer_;
  std::thread::id observer_id_;
  std::mutex join_mu_;
  int wake_fd_ = -1;
  int inotify_fd_ = -1;
};

Status LocalLauncher::ValidateLaunch(const LaunchRequest& request) const {
  if (request.job_id.empty()) return fp8::InvalidArgumentError("job_id: must not be empty");
  if (request.attempt < 1) return fp8::InvalidArgumentError("attempt: must be >= 1");
  if (request.kind.empty()) return fp8::InvalidArgumentError("kind: must not be empty");
  if (request.attempt_dir.empty()) return fp8::InvalidArgumentError("attempt_dir: must not be empty");
  if (request.slots.empty()) return fp8::InvalidArgumentError("slots: at least one rank is needed");
  if (request.worker_argv_prefix.empty() || request.worker_argv_prefix[0].empty()) {
    return fp8::InvalidArgumentError("worker_argv_prefix: must name the worker program");
  }
  std::string node = slots_.empty() ? LocalHostname() : slots_.front().node;
  for (size_t r = 0; r < request.slots.size(); ++r) {
    const std::string& n = request.slots[r].node;
    if (!n.empty() && n != node) {
      return fp8::InvalidArgumentError("slots[" + std::to_string(r) + "].node: '" + n +
                                       "' is not this node ('" + node + "')");
    }
  }
  return fp8::OkStatus();
}

std::map<std::string, std::string> LocalLauncher::RankEnvironment(const LaunchRequest& request,
                                                               int rank) const {
  const Slot& slot = request.slots[rank];
  int local_rank = 0, local_world = 0;
  for (size_t r = 0; r < request.slots.size(); ++r) {
    if (request.slots[r].node != slot.node) continue;
    if (static_cast<int>(r) < rank) ++local_rank;
    ++local_world;
  }
  std::map<std::string, std::string> env = {
      {"FP8D_JOB", request.job_id},
      {"FP8D_ATTEMPT", std::to_string(request.attempt)},
      {"FP8D_RANK", std::to_string(rank)},
      {"FP8D_WORLD_SIZE", std::to_string(request.slots.size())},
      {"FP8D_LOCAL_RANK", std::to_string(local_rank)},
      {"FP8D_LOCAL_WORLD_SIZE", std::to_string(local_world)},
      // Empty for a CPU slot: hides every GPU, so a CPU rank never grabs one by accident.
      {"CUDA_VISIBLE_DEVICES", slot.gpu >= 0 ? std::to_string(slot.gpu) : std::string()},
      {"FP8D_RENDEZVOUS_DIR", request.attempt_dir + "/rendezvous"},
      {"FP8D_CHECKPOINT_DIR", request.checkpoint_dir},
      {"FP8D_RESUME_FROM", request.resume_from},
  };
  // Last, so a caller (tests, the integration harness) can add or override anything.
  for (const auto& [k, v] : request.extra_env) env[k] = v;
  return env;
}

StatusOr<std::vector<RankProcess>> LocalLauncher::Launch(const LaunchRequest& original) {
  FP8_RETURN_IF_ERROR(ValidateLaunch(original));
  // Absolute paths in the environment and argv: a worker that changes directory (or a
  // daemon started from elsewhere) must still find them.
  LaunchRequest request = original;
  request.attempt_dir = AbsolutePath(request.attempt_dir);
  request.checkpoint_dir = AbsolutePath(request.checkpoint_dir);
  request.resume_from = AbsolutePath(request.resume_from);
  const AttemptKey key{request.job_id, request.attempt};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return fp8::FailedPreconditionError("launcher is stopped");
    if (attempts_.count(key)) {
      return fp8::AlreadyExistsError("job " + request.job_id + " attempt " +
                                     std::to_string(request.attempt) + " is already running");
    }
  }
  StatusOr<RunAs> run_as = ResolveRunAs(request);
  if (!run_as.ok()) return run_as.status();
  // The attempt's own files (attempt dir, spec.json, rank files) are the controller's: failing
  // to write them (a full disk, say) is not the job's fault, and UNAVAILABLE tells the manager
  // to retry without counting an attempt. A link the job's owner planted there is the job's
  // fault (AsLaunchError).
  StatusOr<AttemptFolder> folder = PrepareAttemptFolder(request, *run_as);
  if (!folder.ok()) return AsLaunchError(folder.status());
  const std::string spec_path = request.attempt_dir + "/spec.json";

  std::vector<std::shared_ptr<RankState>> started;
  auto kill_started = [&started] {
    // A gang starts whole or not at all: a half-started attempt would only wait for ranks
    // that never come. These are our children, so reaping them is ours to do.
    for (auto& r : started) ::kill(-static_cast<pid_t>(r->pid), SIGKILL);
    for (auto& r : started) {
      int st;
      while (::waitpid(static_cast<pid_t>(r->pid), &st, 0) < 0 && errno == EINTR) {
      }
    }
  };
  for (int rank = 0; rank < static_cast<int>(request.slots.size()); ++rank) {
    SpawnRequest spawn;
    spawn.argv = request.worker_argv_prefix;
    spawn.argv.push_back(request.kind);
    spawn.argv.push_back("--spec");
    spawn.argv.push_back(spec_path);
    spawn.env = request.env ? MergeEnvironment(run_as->env, RankEnvironment(request, rank))
                            : MergeEnvironment(environ, RankEnvironment(request, rank));
    spawn.uid = run_as->uid;
    spawn.gid = run_as->gid;
    spawn.groups = run_as->groups;
    // Made here, beneath the attempt folder, and handed to the child as fds. The events file is
    // opened for reading too: the reader's fd is a copy of the child's stdout, never the name
    // again. The pid file stays root's (0644).
    UniqueFd events, log, pid_file, reader_fd;
    const Status files = [&]() -> Status {
      FP8_ASSIGN_OR_RETURN(events, CreateRankFile(folder->attempt, rank, ".events", O_RDWR | O_APPEND, *run_as));
      FP8_ASSIGN_OR_RETURN(log, CreateRankFile(folder->attempt, rank, ".log", O_WRONLY | O_APPEND, *run_as));
      if (spawn.uid > 0) {
        FP8_ASSIGN_OR_RETURN(pid_file, folder->attempt.CreateFile(RankFileName(rank, ".pid"), O_WRONLY));
      }
      FP8_ASSIGN_OR_RETURN(reader_fd, events.Dup());
      return fp8::OkStatus();
    }();
    spawn.stdout_fd = events.get();
    spawn.stderr_fd = log.get();
    spawn.pid_fd = pid_file.get();
    StatusOr<int64_t> pid = files.ok() ? SpawnInOwnSession(spawn) : StatusOr<int64_t>(files);
    if (!pid.ok()) {
      kill_started();
      const Status st = AsLaunchError(pid.status());
      return fp8::Status(st.code(), "rank " + std::to_string(rank) + ": " + st.message());
    }
    auto state = std::make_shared<RankState>();
    state->job_id = request.job_id;
    state->attempt = request.attempt;
    state->rank = rank;
    state->pid = *pid;
    // The child exists from the moment posix_spawn returns (it is ours and unreaped), so its
    // /proc entry is there to read even if it has exited already.
    state->start_time = ProcessStartTime(*pid);
    state->our_child = true;
    state->pidfd = OpenPidFd(*pid);  // an unreaped child: the pid is surely still this process
    state->reader = std::make_unique<EventFileReader>(RankFile(request.attempt_dir, rank, ".events"), 0,
                                                      std::move(reader_fd));
    started.push_back(std::move(state));
  }
  std::vector<RankProcess> out;
  for (auto& r : started) {
    Status st = r->reader->Open();
    if (!st.ok()) {
      kill_started();
      return st;
    }
    WatchEvents(*r);
    out.push_back(RankProcess{r->rank, LocalHandle(r->pid, r->start_time), 0, r->pid});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    attempts_[key] = std::move(started);
  }
  Wake();
  return out;
}

Status LocalLauncher::AdoptRanks(const std::string& job_id, int attempt,
                              const std::string& attempt_dir,
                              const std::vector<RankProcess>& ranks, bool recovery) {
  if (ranks.empty()) return fp8::InvalidArgumentError("ranks: nothing to adopt");
  const AttemptKey key{job_id, attempt};
  std::vector<std::shared_ptr<RankState>> adopted;
  bool any_alive = false, any_events = false;
  for (const RankProcess& saved : ranks) {
    // An empty handle (never saved) is a rank without a process; a foreign one is refused.
    const std::optional<LocalProcessId> id = ParseLocalHandle(saved.handle);
    if (!id && !saved.handle.empty()) {
      return fp8::InvalidArgumentError("ranks[" + std::to_string(saved.rank) + "].handle: \"" +
                                       saved.handle + "\" is not a local process handle");
    }
    struct {
      int rank;
      int64_t pid;
      uint64_t start_time;
      int64_t events_offset;
    } rp{saved.rank, id ? id->pid : 0, id ? id->start_time : 0, saved.events_offset};
    // Opened before the start-time check: if the check passes, the pidfd names that process
    // and not a later holder of the pid.
    int pidfd = rp.pid > 0 ? OpenPidFd(rp.pid) : -1;
    const bool alive = rp.pid > 0 && ProcessMatches(rp.pid, rp.start_time);
    if (!alive && !recovery) {
      if (pidfd >= 0) ::close(pidfd);
      ProcStat now = ReadProcStat(rp.pid);
      std::string why = !now.exists ? "is gone"
                        : now.zombie ? "has exited"
                                     : "belongs to another process now (start time " +
                                           std::to_string(now.start_time) + ", expected " +
                                           std::to_string(rp.start_time) + ")";
      return fp8::NotFoundError("job " + job_id + " attempt " + std::to_string(attempt) +
                                " rank " + std::to_string(rp.rank) + ": pid " +
                                std::to_string(rp.pid) + " " + why);
    }
    if (!alive && pidfd >= 0) {
      ::close(pidfd);
      pidfd = -1;
    }
    auto state = std::make_shared<RankState>();
    state->job_id = job_id;
    state->attempt = attempt;
    state->rank = rp.rank;
    // A gone rank keeps no pid: nothing may ever be signalled through it.
    state->pid = alive ? rp.pid : 0;
    state->start_time = alive ? rp.start_time : 0;
    state->our_child = false;
    state->pidfd = pidfd;
    state->reader = std::make_unique<EventFileReader>(RankFile(AbsolutePath(attempt_dir), rp.rank, ".events"),
                                                      rp.events_offset);
    Status opened = state->reader->Open();
    if (opened.ok()) {
      any_events = true;
    } else if (recovery && !alive && opened.code() == fp8::StatusCode::kNotFound) {
      // A gone rank without an events file was never started: its exit is delivered with no
      // events, marked so.
      state->never_started = true;
    } else {
      // A live rank without its file, or a file shorter than the offset, cannot be observed
      // correctly.
      return opened;
    }
    any_alive = any_alive || alive;
    WatchEvents(*state);
    adopted.push_back(std::move(state));
  }
  if (recovery && !any_alive && !any_events) {
    for (auto& r : adopted) UnwatchEvents(*r);
    return fp8::NotFoundError("job " + job_id + " attempt " + std::to_string(attempt) +
                              ": no rank is alive and no rank wrote an events file");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return fp8::FailedPreconditionError("launcher is stopped");
  if (attempts_.count(key)) {
    return fp8::AlreadyExistsError("job " + job_id + " attempt " + std::to_string(attempt) +
                                   " is already observed");
  }
  attempts_[key] = std::move(adopted);
  Wake();
  return fp8::OkStatus();
}

StatusOr<std::vector<Launcher::FoundWorker>> LocalLauncher::FindWorkerProcesses() {
  struct Found {
    FoundWorker worker;
    uint64_t start_time = 0;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid_text = entry.path().filename().string();
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t pid = std::stoll(pid_text);
    // Every rank leads its own process group; its helpers (same environment) do not.
    ProcStat st = ReadProcStat(pid);
    if (!st.exists || st.zombie || st.pgrp != pid) continue;
    FoundWorker w;
    w.process.pid = pid;
    w.process.handle = LocalHandle(pid, st.start_time);
    auto env = ReadProcEnviron(pid);
    auto rendezvous = env.find("FP8D_RENDEZVOUS_DIR");
    auto rank = env.find("FP8D_RANK");
    const std::string suffix = "/rendezvous";
    if (rendezvous != env.end() && rank != env.end()) {
      const std::string& dir = rendezvous->second;
      if (dir.size() <= suffix.size() || dir.compare(dir.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      w.attempt_dir = dir.substr(0, dir.size() - suffix.size());
      w.process.rank = std::atoi(rank->second.c_str());
    } else if (env.empty()) {
      // Another uid's environ is unreadable without CAP_SYS_PTRACE: its pid file names it.
      w.process.rank = FindRankByPidFile(pid, &w.attempt_dir);
      if (w.process.rank < 0) continue;
    } else {
      continue;
    }
    found.push_back(Found{std::move(w), st.start_time});
  }
  if (ec) return fp8::InternalError("listing /proc: " + ec.message());
  // A helper that made itself a group leader (setsid) carries the rank's environment too; the
  // rank itself started first.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.worker.attempt_dir, a.worker.process.rank, a.start_time) <
           std::tie(b.worker.attempt_dir, b.worker.process.rank, b.start_time);
  });
  std::vector<FoundWorker> out;
  for (Found& f : found) {
    if (!out.empty() && out.back().attempt_dir == f.worker.attempt_dir &&
        out.back().process.rank == f.worker.process.rank) {
      continue;
    }
    out.push_back(std::move(f.worker));
  }
  return out;
}

void LocalLauncher::Signal(const std::string& job_id, int attempt, int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find({job_id, attempt});
  if (it == attempts_.end()) return;
  for (auto& r : it->second) {
    if (r->gone) continue;
    // An unreaped child's pid cannot be reused, so signalling its group is safe. An adopted
    // pid could have been reused since the last poll: check it right before the kill.
    if (!r->our_child && !ProcessMatches(r->pid, r->start_time)) continue;
    ::kill(-static_cast<pid_t>(r->pid), sig);
  }
}

void LocalLauncher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  Wake();
  // From a listener callback (the observer thread itself) the loop ends after this poll;
  // joining here would deadlock.
  if (std::this_thread::get_id() == observer_id_) return;
  std::lock_guard<std::mutex> lock(join_mu_);
  if (observer_.joinable()) observer_.join();
}

void LocalLauncher::Wake() {
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
  cv_.notify_all();
}

void LocalLauncher::WatchEvents(RankState& rank) {
  if (inotify_fd_ < 0 || rank.reader->fd() < 0) return;
  // The file the reader holds, through its fd: the name may have been replaced since.
  const std::string opened = "/proc/self/fd/" + std::to_string(rank.reader->fd());
  rank.watch = ::inotify_add_watch(inotify_fd_, opened.c_str(), IN_MODIFY);
}

void LocalLauncher::UnwatchEvents(RankState& rank) {
  if (inotify_fd_ < 0 || rank.watch < 0) return;
  ::inotify_rm_watch(inotify_fd_, rank.watch);
  rank.watch = -1;
}

void LocalLauncher::SleepUntilSomethingHappens() {
  if (wake_fd_ < 0) {
    // No eventfd: a plain timed wait that Stop() can still cut short.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms),
                 [this] { return stopping_; });
    return;
  }
  std::vector<pollfd> fds;
  std::vector<std::shared_ptr<RankState>> watched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    fds.push_back(pollfd{wake_fd_, POLLIN, 0});
    fds.push_back(pollfd{inotify_fd_, POLLIN, 0});  // ignored by poll(2) when -1
    for (auto& [key, ranks] : attempts_) {
      for (auto& r : ranks) {
        if (r->pidfd < 0 || r->pidfd_fired || r->gone) continue;
        fds.push_back(pollfd{r->pidfd, POLLIN, 0});
        watched.push_back(r);
      }
    }
  }
  int n = ::poll(fds.data(), fds.size(), options_.poll_interval_ms);
  if (n <= 0) return;
  if (fds[0].revents != 0) {
    uint64_t count;
    [[maybe_unused]] ssize_t got = ::read(wake_fd_, &count, sizeof(count));
  }
  if (fds[1].revents != 0) {
    // Which file changed does not matter: the poll that follows reads every rank's file.
    alignas(inotify_event) char buf[4096];
    while (::read(inotify_fd_, buf, sizeof(buf)) > 0) {
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 2; i < fds.size(); ++i) {
    // Readable stays readable: keep it out of later poll sets (the exit is picked up by this
    // poll, or by the next tick should /proc lag behind).
    if (fds[i].revents != 0) watched[i - 2]->pidfd_fired = true;
  }
}

void LocalLauncher::ObserveLoop() {
  for (;;) {
    SleepUntilSomethingHappens();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    PollOnce();
  }
}

void LocalLauncher::CheckGoneLocked(RankState& r) {
  if (r.gone) return;
  r.exit.job_id = r.job_id;
  r.exit.attempt = r.attempt;
  r.exit.rank = r.rank;
  if (!r.our_child) {
    if (ProcessMatches(r.pid, r.start_time)) return;
    r.gone = true;
    r.exit.exit_code = -1;
    r.exit.signal = 0;
    r.exit.adopted = true;
    r.exit.never_started = r.never_started;
    return;
  }
  const pid_t pid = static_cast<pid_t>(r.pid);
  siginfo_t info{};
  // Look without reaping first: while the leader is an unreaped zombie its pid (= the group
  // id) cannot be reused, so this is the one moment the rest of its group can be killed
  // safely. A rank's helpers (data loaders, a forked compiler) must not outlive it and hold
  // its GPU or files.
  int rc = ::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT);
  if (rc == 0 && info.si_pid == 0) return;  // still running
  if (rc == 0) ::kill(-pid, SIGKILL);
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return;  // raced with nothing: still running
  r.gone = true;
  if (got < 0) {
    // ECHILD: someone else in the daemon reaped it (e.g. a waitpid(-1)); the status is lost.
    r.exit.exit_code = -1;
    r.exit.signal = 0;
  } else if (WIFEXITED(status)) {
    r.exit.exit_code = WEXITSTATUS(status);
    r.exit.signal = 0;
  } else if (WIFSIGNALED(status)) {
    r.exit.exit_code = -1;
    r.exit.signal = WTERMSIG(status);
  }
}

void LocalLauncher::Deliver(RankState& r, const EventLine& line) {
  std::optional<WorkerEvent> ev = ToWorkerEvent(r.job_id, r.attempt, r.rank, line);
  if (ev && listener_ != nullptr) listener_->OnWorkerEvent(std::move(*ev));
}

void LocalLauncher::PollOnce() {
  std::vector<std::shared_ptr<RankState>> ranks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, rs] : attempts_) ranks.insert(ranks.end(), rs.begin(), rs.end());
  }
  for (auto& r : ranks) {
    bool gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      CheckGoneLocked(*r);
      gone = r->gone;
    }
    // Read after the exit check: everything the rank wrote before exiting is in the file by
    // now, so its exit is delivered after its last event.
    auto lines = r->reader->ReadAvailable();
    if (lines.ok()) {
      for (const EventLine& line : *lines) Deliver(*r, line);
    }
    if (!gone) continue;
    if (auto tail = r->reader->TakeUnterminatedTail()) Deliver(*r, *tail);
    if (listener_ != nullptr) listener_->OnWorkerExit(r->exit);
    UnwatchEvents(*r);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find({r->job_id, r->attempt});
    if (it != attempts_.end()) {
      auto& v = it->second;
      v.erase(std::remove(v.begin(), v.end(), r), v.end());
      if (v.empty()) attempts_.erase(it);
    }
  }
}

}  // namespace

std::unique_ptr<Launcher> NewLocalLauncher(LocalLauncherOptions options, LauncherListener* listener) {
  return std::make_unique<LocalLauncher>(std::move(options), listener);
}

}  // namespace fp8d::launcher
