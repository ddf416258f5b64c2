// SPDX-License-Identifier: Apache-2.0
// SlurmLauncher: the launcher for a Slurm cluster. One Slurm job per attempt (sbatch), its ranks
// started by one srun step inside it; never ssh, never node agents of our own.
//
// Files: the attempt directory must be on a path every node sees (a shared filesystem). It
// holds spec.json, the batch script (slurm.sbatch), the batch step's output (slurm.out) and,
// written by srun per task, rank-<r>.events (stdout: the NDJSON events) and rank-<r>.log
// (stderr), exactly the names the local launcher uses, so the API streams them the same way.
// The Gloo rendezvous directory is <attempt dir>/rendezvous, shared the same way.
//
// One observer thread does everything after sbatch: it reads each rank's events file every
// event_poll_ms, asks squeue for the state of every job it watches every poll_interval_ms, runs
// the scancels that Signal() queued (Signal is called on the manager's io thread, which must
// not wait for a command), and once Slurm says a job ended, delivers the ranks' remaining
// events and then their exits, classified by the Slurm job state. While Slurm keeps a job
// PENDING it delivers a synthetic `pending` event (worker_event.proto) on rank 0, which keeps
// the attempt from looking hung and lets the core show Slurm's reason.
//
// Re-adoption: each rank's handle is "slurm:<job id>" (SlurmHandle). Rows stored before
// handles existed were turned into "pid:<job id>:start:0" by the store; both are read. A job Slurm no longer
// knows (it ended while fp8d was down and was purged; there is no accounting database to ask)
// is adopted as ended with an unknown status: its events are the verdict, as for re-adopted
// local workers, so it is never started a second time.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "daemon/launcher/launcher.h"
#include "daemon/launcher/attempt_files.h"
#include "daemon/launcher/event_reader.h"
#include "daemon/launcher/process.h"
#include "daemon/launcher/slurm_command.h"

extern char** environ;

namespace fp8d::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string RankFile(const std::string& dir, int rank, const char* suffix) {
  return dir + "/rank-" + std::to_string(rank) + suffix;
}

std::string AbsolutePath(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

// The batch script in an anonymous memory file, at offset 0: sbatch's stdin.
StatusOr<UniqueFd> ScriptFd(const std::string& script) {
  UniqueFd fd(::memfd_create("slurm.sbatch", MFD_CLOEXEC));
  if (fd.get() < 0) return fp8::InternalError(std::string("memfd_create: ") + std::strerror(errno));
  for (size_t done = 0; done < script.size();) {
    const ssize_t n = ::write(fd.get(), script.data() + done, script.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fp8::InternalError(std::string("writing the batch script: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return fp8::InternalError(std::string("lseek: ") + std::strerror(errno));
  return fd;
}

// Single quotes for /bin/sh: the batch script's only variable parts are paths and argv.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A command's stderr as one line: its lines joined by "; ".
std::string OneLine(const std::string& s) {
  std::string out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    std::string line = s.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) out += (out.empty() ? "" : "; ") + line;
    start = end + 1;
  }
  return out;
}

// sbatch's words for "could not talk to slurmctld" (as opposed to "slurmctld said no").
bool LooksUnreachable(const std::string& message) {
  for (const char* marker : {"Unable to contact", "Socket timed out", "Zero Bytes were transmitted",
                             "Connection refused", "connect failure", "Communication connection failure",
                             "configuration source", "Unable to establish"}) {
    if (message.find(marker) != std::string::npos) return true;
  }
  return false;
}

struct Rank {
  int rank = 0;
  std::unique_ptr<EventFileReader> reader;
};

struct Watched {
  std::string job_id;
  int attempt = 0;
  int64_t slurm_id = 0;
  std::vector<Rank> ranks;
  std::string state = "PENDING";  // last state squeue gave
  std::string reason;
  bool known = true;        // false once squeue no longer lists it
  bool rejected = false;    // pending for a reason that never resolves: cancelled by us
  bool ended = false;       // exits delivered
};

using AttemptKey = std::pair<std::string, int>;

class SlurmLauncher final : public Launcher {
 public:
  SlurmLauncher(SlurmLauncherOptions options, LauncherListener* listener)
      : options_(std::move(options)), listener_(listener) {
    if (options_.poll_interval_ms <= 0) options_.poll_interval_ms = 1000;
    if (options_.event_poll_ms <= 0) options_.event_poll_ms = 20;
    observer_ = std::thread([this] { ObserveLoop(); });
    observer_id_ = observer_.get_id();
  }

  ~SlurmLauncher() override {
    FP8_CHECK(std::this_thread::get_id() != observer_id_);
    Stop();
  }

  std::vector<Slot> Slots() const override { return {}; }
  bool QueuesJobs() const override { return true; }

  StatusOr<std::vector<RankProcess>> Launch(const LaunchRequest& request) override;
  Status Adopt(const std::string& job_id, int attempt, const std::string& attempt_dir,
               const std::vector<RankProcess>& ranks) override;
  void Signal(const std::string& job_id, int attempt, int sig) override;
  void Stop() override;

 private:
  StatusOr<std::string> BatchScript(const LaunchRequest& r, int nodes, int per_node) const;
  // The script itself goes to sbatch's stdin.
  std::vector<std::string> SbatchArgv(const LaunchRequest& r, int nodes, int per_node,
                                      const RunAs& run_as) const;
  // A Slurm job of an earlier attempt that is still alive was orphaned: fp8d died after its
  // sbatch and before it stored the job id, so nothing watches or stops it. (The core starts
  // attempt N only once attempt N-1's ranks have ended, as far as it knows.)
  void CancelEarlierAttempts(const std::string& job_id, int attempt);
  void ObserveLoop();
  void PollSqueue();
  void RunSignals();
  void ReadEvents(Watched& w, bool final);
  void Finish(Watched& w);
  WorkerExit ExitFor(const Watched& w, int rank, const std::map<std::string, std::string>& info) const;

  SlurmLauncherOptions options_;
  LauncherListener* listener_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<AttemptKey, std::shared_ptr<Watched>> watched_;
  std::vector<std::pair<int64_t, int>> signals_;  // (slurm id, signal) for the observer to send
  std::thread observer_;
  std::thread::id observer_id_;
  std::mutex join_mu_;
};

StatusOr<std::string> SlurmLauncher::BatchScript(const LaunchRequest& r, int nodes, int per_node) const {
  std::string worker;
  for (const auto& a : r.worker_argv_prefix) worker += ShellQuote(a) + " ";
  worker += ShellQuote(r.kind) + " --spec " + ShellQuote(r.attempt_dir + "/spec.json");
  const int world = static_cast<int>(r.slots.size());
  std::string s = "#!/bin/sh\n";
  s += "# fp8d job " + r.job_id + " attempt " + std::to_string(r.attempt) +
       ": every rank is one task of this srun step; its stdout (events) and stderr (log)\n"
       "# go to rank-<task>.events / rank-<task>.log in the attempt directory.\n";
  // Each task sets its design-§4 rank variables from srun's and then becomes the worker
  // (exec: signals from scancel reach the worker itself, its exit status is the task's).
  const std::string rank_env =
      "FP8D_RANK=$SLURM_PROCID FP8D_LOCAL_RANK=$SLURM_LOCALID FP8D_LOCAL_WORLD_SIZE=" +
      std::to_string(per_node) + " FP8D_SLURM_NODE=$SLURMD_NODENAME; export FP8D_RANK "
      "FP8D_LOCAL_RANK FP8D_LOCAL_WORLD_SIZE FP8D_SLURM_NODE; exec \"$@\"";
  // With GPUs each task gets one of its node's devices, as a local rank does; a plain srun
  // would show every task all of them.
  const std::string gpu_bind = options_.gpus ? " --gpu-bind=per_task:1" : "";
  s += "srun --ntasks=" + std::to_string(world) + " --nodes=" + std::to_string(nodes) +
       " --ntasks-per-node=" + std::to_string(per_node) + gpu_bind +
       " --kill-on-bad-exit=1 --open-mode=append --output=" +
       ShellQuote(r.attempt_dir + "/rank-%t.events") + " --error=" +
       ShellQuote(r.attempt_dir + "/rank-%t.log") + " /bin/sh -c " + ShellQuote(rank_env) +
       " fp8d-rank " + worker + "\n";
  s += "exit $?\n";
  return s;
}

std::vector<std::string> SlurmLauncher::SbatchArgv(const LaunchRequest& r, int nodes, int per_node,
                                                const RunAs& run_as) const {
  std::vector<std::string> argv = {"sbatch", "--parsable",
                                   "--job-name=fp8d-" + r.job_id + "-" + std::to_string(r.attempt),
                                   "--nodes=" + std::to_string(nodes),
                                   "--ntasks=" + std::to_string(r.slots.size()),
                                   "--ntasks-per-node=" + std::to_string(per_node),
                                   "--no-requeue",  // a retry is fp8d's decision, from a checkpoint
                                   "--export=ALL",
                                   "--chdir=" + r.attempt_dir,
                                   "--output=" + r.attempt_dir + "/slurm.out"};
  auto pick = [](const std::string& job, const std::string& dflt) { return job.empty() ? dflt : job; };
  const std::string partition = pick(r.partition, options_.partition);
  const std::string account = pick(r.account, options_.account);
  const std::string qos = pick(r.qos, options_.qos);
  if (!partition.empty()) argv.push_back("--partition=" + partition);
  if (!account.empty()) argv.push_back("--account=" + account);
  if (!qos.empty()) argv.push_back("--qos=" + qos);
  if (!r.constraint.empty()) argv.push_back("--constraint=" + r.constraint);
  if (options_.gpus) argv.push_back("--gres=gpu:" + std::to_string(per_node));
  if (r.time_limit_ms > 0) argv.push_back("--time=" + std::to_string(SlurmMinutes(r.time_limit_ms)));
  // The job's owner, not fp8d's user (Slurm lets root submit for another user).
  if (run_as.uid > 0) {
    argv.push_back("--uid=" + std::to_string(run_as.uid));
    argv.push_back("--gid=" + std::to_string(run_as.gid));
  }
  for (const auto& a : options_.sbatch_args) argv.push_back(a);
  return argv;
}

StatusOr<std::vector<RankProcess>> SlurmLauncher::Launch(const LaunchRequest& original) {
  if (original.job_id.empty()) return fp8::InvalidArgumentError("job_id: must not be empty");
  if (original.slots.empty()) return fp8::InvalidArgumentError("slots: at least one rank is needed");
  if (original.worker_argv_prefix.empty() || original.worker_argv_prefix[0].empty()) {
    return fp8::InvalidArgumentError("worker_argv_prefix: must name the worker program");
  }
  LaunchRequest r = original;
  r.attempt_dir = AbsolutePath(r.attempt_dir);
  r.checkpoint_dir = AbsolutePath(r.checkpoint_dir);
  r.resume_from = AbsolutePath(r.resume_from);
  // Relative worker paths mean nothing on another node.
  if (r.worker_argv_prefix[0].find('/') != std::string::npos) {
    r.worker_argv_prefix[0] = AbsolutePath(r.worker_argv_prefix[0]);
  }
  const int world = static_cast<int>(r.slots.size());
  int per_node = r.ranks_per_node > 0 ? r.ranks_per_node : 1;
  int nodes = r.nodes > 0 ? r.nodes : (world + per_node - 1) / per_node;
  if (nodes * per_node != world) {
    return fp8::InvalidArgumentError("resources: " + std::to_string(world) + " ranks do not fill " +
                                     std::to_string(nodes) + " node(s) × " + std::to_string(per_node));
  }
  const AttemptKey key{r.job_id, r.attempt};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return fp8::FailedPreconditionError("launcher is stopped");
    if (watched_.count(key)) {
      return fp8::AlreadyExistsError("job " + r.job_id + " attempt " + std::to_string(r.attempt) +
                                     " is already submitted");
    }
  }
  // Ranks of a job with an owner run as that uid, as the local launcher's do: the job folder,
  // the attempt directory (where Slurm writes slurm.out) and the files srun appends to become
  // the owner's. Nothing in them is opened by name as root (attempt_files.h).
  StatusOr<RunAs> run_as = ResolveRunAs(r);
  if (!run_as.ok()) return run_as.status();
  StatusOr<AttemptFolder> folder = PrepareAttemptFolder(r, *run_as);
  if (!folder.ok()) return AsLaunchError(folder.status());
  auto watched = std::make_shared<Watched>();
  watched->job_id = r.job_id;
  watched->attempt = r.attempt;
  for (int rank = 0; rank < world; ++rank) {
    // Created empty here so they can be opened (and streamed) before Slurm starts the ranks.
    StatusOr<UniqueFd> events = CreateRankFile(folder->attempt, rank, ".events", O_RDONLY, *run_as);
    if (!events.ok()) return AsLaunchError(events.status());
    if (StatusOr<UniqueFd> log = CreateRankFile(folder->attempt, rank, ".log", O_WRONLY, *run_as); !log.ok()) {
      return AsLaunchError(log.status());
    }
    Rank rk;
    rk.rank = rank;
    rk.reader = std::make_unique<EventFileReader>(RankFile(r.attempt_dir, rank, ".events"), 0, std::move(*events));
    FP8_RETURN_IF_ERROR(rk.reader->Open());
    watched->ranks.push_back(std::move(rk));
  }
  StatusOr<std::string> script = BatchScript(r, nodes, per_node);
  if (!script.ok()) return script.status();
  // Kept in the attempt folder for operators; sbatch (root) reads the script from a memfd on
  // its stdin, not from the owner's folder, where the name could lead anywhere by then.
  if (Status st = folder->attempt.WriteAtomically("slurm.sbatch", *script); !st.ok()) return AsLaunchError(st);
  StatusOr<UniqueFd> script_fd = ScriptFd(*script);
  if (!script_fd.ok()) return script_fd.status();

  // The batch script and srun inherit sbatch's environment (--export=ALL): the part of design
  // §4 that is the same for every rank. srun adds each rank's numbers (SLURM_PROCID, ...).
  std::map<std::string, std::string> env = {
      {"FP8D_JOB", r.job_id},
      {"FP8D_ATTEMPT", std::to_string(r.attempt)},
      {"FP8D_WORLD_SIZE", std::to_string(world)},
      {"FP8D_RENDEZVOUS_DIR", r.attempt_dir + "/rendezvous"},
      {"FP8D_CHECKPOINT_DIR", r.checkpoint_dir},
      {"FP8D_RESUME_FROM", r.resume_from},
  };
  // CPU ranks see no GPU; with gres Slurm sets CUDA_VISIBLE_DEVICES per task itself.
  if (!options_.gpus) env["CUDA_VISIBLE_DEVICES"] = "";
  for (const auto& [k, v] : r.extra_env) env[k] = v;
  // The ranks inherit sbatch's environment: with a clean base (r.env: fp8d's allowlist plus the
  // job's env) that base, plus the Slurm client's own SLURM_* settings (SLURM_CONF, ...) that
  // sbatch and the batch script's srun need; else fp8d's environment.
  // (ResolveRunAs has put the owner's HOME, USER and LOGNAME into it.)
  std::optional<std::map<std::string, std::string>> base;
  if (r.env) base = run_as->env;
  if (base) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const size_t eq = kv.find('=');
      if (eq != std::string::npos && kv.rfind("SLURM_", 0) == 0) (*base)[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  CancelEarlierAttempts(r.job_id, r.attempt);
  auto result = RunCommand(SbatchArgv(r, nodes, per_node, *run_as), env, options_.command_timeout_ms,
                           base ? &*base : nullptr, script_fd->get());
  // Not UNAVAILABLE: to the core that means the controller's own disk, retried without counting;
  // an unreachable Slurm counts against max_attempts.
  if (!result.ok()) return fp8::FailedPreconditionError("Slurm is not reachable: sbatch: " + result.status().message());
  const int64_t slurm_id = ParseSbatchJobId(result->out);
  if (result->exit_code != 0 || slurm_id <= 0) {
    const std::string why = OneLine(result->err.empty() ? result->out : result->err);
    // Slurm answered and said no (bad partition, account, QOS, time, an sbatch_args typo):
    // the same request would be refused again. Not reaching Slurm at all may pass.
    const bool rejected = result->exit_code != 0 && !LooksUnreachable(why);
    return fp8::Status(rejected ? fp8::StatusCode::kInvalidArgument : fp8::StatusCode::kFailedPrecondition,
                       "Slurm " + std::string(rejected ? "rejected the job" : "is not reachable") +
                           ": " + why);
  }
  watched->slurm_id = slurm_id;
  spdlog::info("job {} attempt {}: Slurm job {} submitted ({} node(s) × {} rank(s))", r.job_id,
               r.attempt, slurm_id, nodes, per_node);
  std::vector<RankProcess> out;
  for (int rank = 0; rank < world; ++rank) out.push_back(RankProcess{rank, SlurmHandle(slurm_id), 0, slurm_id});
  {
    std::lock_guard<std::mutex> lock(mu_);
    watched_[key] = std::move(watched);
  }
  cv_.notify_all();
  return out;
}

Status SlurmLauncher::Adopt(const std::string& job_id, int attempt, const std::string& attempt_dir,
                         const std::vector<RankProcess>& ranks) {
  if (ranks.empty()) return fp8::InvalidArgumentError("ranks: nothing to adopt");
  auto w = std::make_shared<Watched>();
  w->job_id = job_id;
  w->attempt = attempt;
  w->slurm_id = SlurmIdOfHandle(ranks.front().handle);
  w->state.clear();  // unknown until the first squeue
  if (w->slurm_id < 0) {
    return fp8::InvalidArgumentError("ranks[0].handle: \"" + ranks.front().handle +
                                     "\" is not a Slurm job handle");
  }
  if (w->slurm_id == 0) {
    // fp8d stopped before it stored the Slurm job id (or before sbatch): nothing to follow. A
    // Slurm job it did submit is cancelled when the next attempt is submitted.
    return fp8::NotFoundError("job " + job_id + " attempt " + std::to_string(attempt) +
                              ": no Slurm job id was recorded");
  }
  const int64_t slurm_id = w->slurm_id;
  for (const RankProcess& rp : ranks) {
    if (SlurmIdOfHandle(rp.handle) != w->slurm_id) {
      return fp8::InvalidArgumentError("ranks: one Slurm job per attempt expected, got " +
                                       ranks.front().handle + " and " + rp.handle);
    }
    Rank rk;
    rk.rank = rp.rank;
    rk.reader = std::make_unique<EventFileReader>(RankFile(AbsolutePath(attempt_dir), rp.rank, ".events"),
                                                  rp.events_offset);
    FP8_RETURN_IF_ERROR(rk.reader->Open());
    w->ranks.push_back(std::move(rk));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return fp8::FailedPreconditionError("launcher is stopped");
    if (watched_.count({job_id, attempt})) {
      return fp8::AlreadyExistsError("job " + job_id + " attempt " + std::to_string(attempt) +
                                     " is already observed");
    }
    watched_[{job_id, attempt}] = std::move(w);
  }
  spdlog::info("job {} attempt {}: watching Slurm job {} again", job_id, attempt, slurm_id);
  cv_.notify_all();
  return fp8::OkStatus();
}

void SlurmLauncher::Signal(const std::string& job_id, int attempt, int sig) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = watched_.find({job_id, attempt});
    if (it == watched_.end() || it->second->ended) return;
    signals_.emplace_back(it->second->slurm_id, sig);
  }
  cv_.notify_all();
}

void SlurmLauncher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (std::this_thread::get_id() == observer_id_) return;
  std::lock_guard<std::mutex> lock(join_mu_);
  if (observer_.joinable()) observer_.join();
}

void SlurmLauncher::RunSignals() {
  std::vector<std::pair<int64_t, int>> queued_signals;
  std::map<int64_t, std::string> states;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_signals.swap(signals_);
    for (auto& [key, w] : watched_) states[w->slurm_id] = w->state;
  }
  for (const auto& [id, sig] : queued_signals) {
    const std::string sid = std::to_string(id);
    const std::string& state = states[id];
    std::vector<std::vector<std::string>> commands;
    if (sig == SIGKILL) {
      // The tasks at once, then the allocation (the batch script waiting on srun).
      commands = {{"scancel", "--signal=KILL", sid}, {"scancel", sid}};
    } else if (state == "PENDING" || state.empty()) {
      // Nothing runs yet that could stop gracefully: take it out of the queue.
      commands = {{"scancel", sid}};
    } else {
      // The ranks (job steps) only: the batch script waits for srun and ends with it.
      commands = {{"scancel", "--signal=" + std::string(sig == SIGTERM ? "TERM" : sigabbrev_np(sig)), sid}};
    }
    for (const auto& argv : commands) {
      auto r = RunCommand(argv, {}, options_.command_timeout_ms);
      if (!r.ok() || r->exit_code != 0) {
        spdlog::warn("Slurm job {}: {} failed: {}", id, argv[1],
                     r.ok() ? OneLine(r->err) : r.status().message());
      }
    }
  }
}

void SlurmLauncher::CancelEarlierAttempts(const std::string& job_id, int attempt) {
  if (attempt <= 1) return;
  std::string names;
  for (int a = 1; a < attempt; ++a) names += (a > 1 ? "," : "") + ("fp8d-" + job_id + "-" + std::to_string(a));
  auto r = RunCommand({"squeue", "-h", "--states=PD,R,CG,CF,S", "--name=" + names, "-o", "%i"}, {},
                      options_.command_timeout_ms);
  if (!r.ok() || r->exit_code != 0) return;  // sbatch will say whether Slurm is reachable
  std::istringstream in(r->out);
  std::string id;
  while (in >> id) {
    spdlog::warn("job {}: Slurm job {} of an earlier attempt is still there; cancelling it", job_id, id);
    (void)RunCommand({"scancel", id}, {}, options_.command_timeout_ms);
  }
}

void SlurmLauncher::PollSqueue() {
  std::string ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : watched_) {
      if (w->ended) continue;
      if (!ids.empty()) ids += ",";
      ids += std::to_string(w->slurm_id);
    }
  }
  if (ids.empty()) return;
  auto r = RunCommand({"squeue", "-h", "--states=all", "--jobs=" + ids, "-o", "%i|%T|%r"}, {},
                      options_.command_timeout_ms);
  // "Invalid job id": Slurm forgot every job we asked about. Anything else: not reachable now;
  // keep the last known states and ask again next time.
  const bool none_known = r.ok() && r->exit_code != 0 && r->err.find("Invalid job id") != std::string::npos;
  if (!r.ok() || (r->exit_code != 0 && !none_known)) {
    spdlog::warn("squeue: {}", r.ok() ? OneLine(r->err) : r.status().message());
    return;
  }
  std::map<int64_t, SlurmJobState> by_id;
  if (!none_known) {
    for (auto& s : ParseSqueue(r->out)) by_id[s.job_id] = s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, w] : watched_) {
    auto it = by_id.find(w->slurm_id);
    if (it == by_id.end()) {
      w->known = false;
      continue;
    }
    w->state = it->second.state;
    w->reason = it->second.reason;
  }
}

void SlurmLauncher::ReadEvents(Watched& w, bool final) {
  for (Rank& rk : w.ranks) {
    auto lines = rk.reader->ReadAvailable();
    std::vector<EventLine> all = lines.ok() ? std::move(*lines) : std::vector<EventLine>{};
    if (final) {
      if (auto tail = rk.reader->TakeUnterminatedTail()) all.push_back(std::move(*tail));
    }
    for (const EventLine& line : all) {
      std::optional<WorkerEvent> ev = ToWorkerEvent(w.job_id, w.attempt, rk.rank, line);
      if (ev && listener_ != nullptr) listener_->OnWorkerEvent(std::move(*ev));
    }
  }
}

WorkerExit SlurmLauncher::ExitFor(const Watched& w, int rank,
                               const std::map<std::string, std::string>& info) const {
  SlurmEnd end;
  end.job_id = w.job_id;
  end.attempt = w.attempt;
  end.rank = rank;
  end.slurm_id = w.slurm_id;
  end.known = w.known;
  end.rejected = w.rejected;
  end.state = w.state;
  end.reason = w.reason;
  end.fields = info;
  return SlurmJobExit(end);
}

void SlurmLauncher::Finish(Watched& w) {
  std::map<std::string, std::string> info;
  if (w.known && !w.rejected && w.state != "COMPLETED") {
    auto r = RunCommand({"scontrol", "show", "job", "-o", std::to_string(w.slurm_id)}, {},
                        options_.command_timeout_ms);
    if (r.ok() && r->exit_code == 0) info = ParseScontrolFields(r->out);
    // srun gives up on a node that stops answering before slurmctld declares it down, so the
    // job often ends FAILED rather than NODE_FAIL: ask about its nodes.
    const std::string nodes = info.count("NodeList") ? info["NodeList"] : std::string();
    if (w.state != "NODE_FAIL" && !nodes.empty() && nodes != "(null)") {
      auto s = RunCommand({"sinfo", "-h", "-N", "-n", nodes, "-o", "%N %T"}, {}, options_.command_timeout_ms);
      if (s.ok() && s->exit_code == 0) info["fp8d.lost_nodes"] = LostNodes(s->out);
    }
  }
  // Every byte the ranks wrote is on disk once Slurm reports the job ended.
  ReadEvents(w, /*final=*/true);
  spdlog::info("job {} attempt {}: Slurm job {} ended {}", w.job_id, w.attempt, w.slurm_id,
               w.known ? w.state : std::string("(no longer known to Slurm)"));
  for (const Rank& rk : w.ranks) {
    if (listener_ != nullptr) listener_->OnWorkerExit(ExitFor(w, rk.rank, info));
  }
}

void SlurmLauncher::ObserveLoop() {
  Clock::time_point next_squeue = Clock::now();
  for (;;) {
    bool signals_queued;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.event_poll_ms),
                   [this] { return stopping_ || !signals_.empty(); });
      if (stopping_) return;
      signals_queued = !signals_.empty();
    }
    // How a signal is sent depends on the job's state (pending: out of the queue; running: to
    // the ranks), and ranks start within a poll interval: a cancel right after they did must
    // reach them, not become Slurm's own cancel. So signals go out on a fresh squeue.
    const bool poll = signals_queued || Clock::now() >= next_squeue;
    if (poll) {
      PollSqueue();
      next_squeue = Clock::now() + std::chrono::milliseconds(options_.poll_interval_ms);
    }
    RunSignals();
    std::vector<std::shared_ptr<Watched>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, w] : watched_) all.push_back(w);
    }
    for (auto& w : all) {
      bool done, pending;
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done = !w->known || IsTerminalSlurmState(w->state);
        pending = w->state == "PENDING";
        reason = w->reason;
      }
      if (!done && pending && NeverStartsReason(reason)) {
        auto r = RunCommand({"scancel", std::to_string(w->slurm_id)}, {}, options_.command_timeout_ms);
        if (!r.ok() || r->exit_code != 0) {
          spdlog::warn("Slurm job {}: scancel failed: {}", w->slurm_id,
                       r.ok() ? OneLine(r->err) : r.status().message());
        }
        std::lock_guard<std::mutex> lock(mu_);
        w->rejected = true;
        done = true;
      }
      if (!done) {
        ReadEvents(*w, false);
        if (poll && pending && listener_ != nullptr) {
          WorkerEvent ev;
          ev.job_id = w->job_id;
          ev.attempt = w->attempt;
          ev.rank = 0;
          ev.event.mutable_pending()->set_reason(reason);
          ev.event.mutable_pending()->set_slurm_job_id(w->slurm_id);
          ev.raw = ev.event.ShortDebugString();
          for (const Rank& rk : w->ranks) {
            if (rk.rank == 0) ev.offset_after = rk.reader->consumed_offset();
          }
          listener_->OnWorkerEvent(std::move(ev));
        }
        continue;
      }
      Finish(*w);
      std::lock_guard<std::mutex> lock(mu_);
      w->ended = true;
      watched_.erase({w->job_id, w->attempt});
    }
  }
}

}  // namespace

std::unique_ptr<Launcher> NewSlurmLauncher(SlurmLauncherOptions options, LauncherListener* listener) {
  return std::make_unique<SlurmLauncher>(std::move(options), listener);
}

}  // namespace fp8d::launcher
