// SPDX-License-Identifier: Apache-2.0
// The node launcher: starts, signals and observes fp8-worker processes on one node, and reports
// the node's slots. It decides no policy (that is daemon/core). LocalLauncher (local_launcher.cc)
// runs in-process for the local machine; a remote LauncherService client can implement the same
// interface later.
//
// Threading: Launch/Adopt/Signal may be called from any thread. The launcher calls its listener
// from its own observer thread; the listener must not block (the manager posts to its strand).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/worker_event.pb.h"

namespace fp8d::launcher {

using fp8::Status;
using fp8::StatusOr;

struct Slot {
  std::string node;  // hostname
  int gpu = -1;      // GPU index, or -1 for a CPU slot
};

struct LaunchRequest {
  std::string job_id;          // "<id>" (without "jobs/")
  int attempt = 1;
  std::string kind;            // "train" | "calibrate": the worker subcommand
  std::string spec_json;       // written to <attempt_dir>/spec.json
  std::string attempt_dir;     // <data dir>/jobs/<id>/attempt-<n>, created by the launcher
  std::vector<Slot> slots;     // slot of rank r = slots[r]; world size = slots.size()
  std::string checkpoint_dir;  // FP8D_CHECKPOINT_DIR
  std::string resume_from;     // FP8D_RESUME_FROM (empty: fresh start)
  std::vector<std::string> worker_argv_prefix;  // e.g. {"/path/fp8-worker"}; tests use a test worker
  std::map<std::string, std::string> extra_env;
  // Isolation: the uid/gid the ranks run as (0: fp8d's own; gid 0: the uid's primary group),
  // and, when set, the base environment instead of fp8d's own (see AllowlistedEnvironment).
  int64_t uid = 0;
  int64_t gid = 0;
  std::optional<std::map<std::string, std::string>> env;
  // Used by launchers that place ranks themselves (Slurm); the local launcher ignores them.
  int nodes = 0;                // 0: as many as the launcher needs
  int ranks_per_node = 0;       // 0: 1 when nodes is set, else the launcher's choice
  std::string partition, account, qos, constraint;  // empty: the launcher's defaults
  int64_t time_limit_ms = 0;    // 0: none (the attempt deadline plus the kill grace)
};

// The part of `base` (e.g. environ) a worker may inherit: PATH, HOME, LANG, LC_*, TZ, TMPDIR,
// USER, LOGNAME, LD_LIBRARY_PATH, CUDA_*, NCCL_*, FP8_* (the worker's knobs; FP8D_* come from
// the launcher), and the names (or PREFIX*) in `extra_allow`. Everything else (credentials, tokens)
// stays with fp8d.
std::map<std::string, std::string> AllowlistedEnvironment(
    char** base, const std::vector<std::string>& extra_allow);

// What the core stores per rank to re-adopt it. `handle` is opaque to the core and the store:
// the launcher writes it at Launch and reads it back at Adopt (local: "pid:<pid>:start:<proc
// start time>", see local_handle.h; Slurm: "slurm:<job id>"). Empty: nothing was recorded
// (the controller stopped before saving it). One line of text, no newline.
struct RankProcess {
  int rank = 0;
  std::string handle;
  int64_t events_offset = 0;  // where to continue reading the rank's events
  int64_t pid = 0;            // shown as the rank's pid in the API; 0 where it is not a local process
};

// One line from rank-<r>.events, parsed (proto/fp8d/v1/worker_event.proto). `garbage` is set
// (and `event` empty) for a line that is not an event.
struct WorkerEvent {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  fp8d::v1::WorkerEvent event;
  bool garbage = false;
  std::string raw;            // the line, for logs
  int64_t offset_after = 0;   // byte offset just past this line (persist for re-adoption)
};

struct WorkerExit {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  // For children of this launcher: the exit code, or -1 when killed by `signal`. For re-adopted
  // processes (not our children) the status is unknowable: exit_code = -1, signal = 0,
  // adopted = true; the manager decides from the events seen (a `done` event means success).
  int exit_code = -1;
  int signal = 0;
  bool adopted = false;
  // AdoptForRecovery: the rank has neither a process nor an events file, so it was never
  // started (the controller stopped part-way through launching the attempt).
  bool never_started = false;
  // Set when the launcher itself knows why the rank ended (Slurm's job state): the core maps
  // it to a failure class before looking at the exit status.
  // kRejected: the launcher will never be able to start the attempt (Slurm keeps it pending
  // for a reason no wait resolves, e.g. more nodes than the partition has).
  enum class Cause { kProcess, kNodeLost, kPreempted, kTimeLimit, kOutOfMemory, kCancelledOutside, kRejected };
  Cause cause = Cause::kProcess;
  std::string cause_message;  // e.g. "Slurm job 12 ended NODE_FAIL"
};

// A rank's human log (its stderr) of one attempt, read through the launcher that keeps it.
// Blocking I/O: read off the io thread. One reader at a time.
class RankStream {
 public:
  virtual ~RankStream() = default;
  // The next bytes (at most `max_bytes`) after those already read; empty at the current end,
  // which grows while the rank runs.
  virtual StatusOr<std::string> Read(size_t max_bytes) = 0;
};

class LauncherListener {
 public:
  virtual ~LauncherListener() = default;
  virtual void OnWorkerEvent(WorkerEvent event) = 0;
  // Delivered after every event line the rank wrote before exiting has been delivered.
  virtual void OnWorkerExit(WorkerExit exit) = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual std::vector<Slot> Slots() const = 0;
  // Starts one process per slot, each in its own process group, stdout → rank-<r>.events,
  // stderr → rank-<r>.log, environment as in docs/design.md §4. Returns once all are started.
  virtual StatusOr<std::vector<RankProcess>> Launch(const LaunchRequest& request) = 0;
  // Re-adopts ranks that survived a controller restart. NOT_FOUND if any pid is gone or its
  // start time differs (pid reused); then nothing is adopted.
  virtual Status Adopt(const std::string& job_id, int attempt, const std::string& attempt_dir,
                       const std::vector<RankProcess>& ranks) = 0;
  // Recovery's adopt, after a controller restart: a rank whose process is alive is adopted as
  // Adopt does; a rank whose process is gone (pid 0, exited, or reused) is observed as already
  // exited, so its events file is read on from its offset to the end before its exit is
  // delivered (adopted = true): a worker that finished, crashed or checkpointed while the
  // controller was down is judged by what it wrote. NOT_FOUND, adopting nothing, when no rank
  // is alive and no rank's events file exists (the attempt's workers were never started).
  // Launchers that cannot read a finished rank's events fall back to Adopt.
  virtual Status AdoptForRecovery(const std::string& job_id, int attempt,
                                  const std::string& attempt_dir,
                                  const std::vector<RankProcess>& ranks) {
    return Adopt(job_id, attempt, attempt_dir, ranks);
  }
  // Every live worker process this launcher started, found without saved pids (a controller
  // killed between spawning workers and saving their pids), so recovery can adopt them or
  // kill them. `attempt_dir` is the absolute attempt dir given at launch. A launcher that
  // finds its attempts another way (Slurm: by job id, at adoption) finds none here.
  struct FoundWorker {
    std::string attempt_dir;
    RankProcess process;  // events_offset 0
  };
  virtual StatusOr<std::vector<FoundWorker>> FindWorkers() { return std::vector<FoundWorker>{}; }
  // Sends `sig` to the process group of every live rank of the attempt.
  virtual void Signal(const std::string& job_id, int attempt, int sig) = 0;
  // Stops observing (the daemon's SIGTERM path): workers keep running.
  virtual void Stop() = 0;
  // Removes the files of a deleted job's attempts (spec, events, logs) and then their job
  // folder when it is left empty; never anything else (a job's output dir is the user's). The
  // default removes `attempt_dirs` on this machine's file system, where the local launcher and a
  // launcher on a shared data dir keep them. Blocking I/O: call off the io thread.
  virtual Status RemoveAttemptFiles(const std::string& job_id, const std::vector<std::string>& attempt_dirs);
  // True for a launcher with a queue of its own (Slurm): the core's scheduler then reserves no
  // slots and hands every queued job over at once; Slots() is not consulted.
  virtual bool QueuesJobs() const { return false; }
  // Opens the human log of `rank` of an attempt (`attempt_dir` as given at launch) for
  // GetJobLogs: the launcher names and keeps its files, the core and the API do not. NOT_FOUND
  // while the rank has written none. Blocking I/O: call off the io thread; thread-safe. The
  // default reads the rank's stderr file in the attempt directory, where both launchers have
  // it written (for Slurm, by srun onto the shared path).
  virtual StatusOr<std::unique_ptr<RankStream>> OpenRankLog(const std::string& job_id, int attempt,
                                                            const std::string& attempt_dir,
                                                            int rank) const;
};

struct LocalLauncherOptions {
  std::string node_name;             // default: hostname
  int cpu_slots = 0;                 // used when there are no GPUs; 0 = number of cores
  std::vector<int> gpus;             // empty = detect (nvidia-smi -L), none found = CPU slots
  bool detect_gpus = true;
  int poll_interval_ms = 20;         // event file / child polling period
};

std::unique_ptr<Launcher> NewLocalLauncher(LocalLauncherOptions options, LauncherListener* listener);

// The Slurm launcher (slurm_launcher.cc): one Slurm job per attempt, ranks via srun.
struct SlurmLauncherOptions {
  std::string partition, account, qos;  // defaults; a job's Resources.slurm overrides them
  std::vector<std::string> sbatch_args;  // extra sbatch arguments, e.g. {"--exclusive"}
  int poll_interval_ms = 1000;           // squeue period
  int event_poll_ms = 20;                // events file period
  bool gpus = false;                     // ranks are GPUs: --gres=gpu:<ranks_per_node>
  int command_timeout_ms = 30000;        // an sbatch/squeue/scancel that takes longer failed
};
std::unique_ptr<Launcher> NewSlurmLauncher(SlurmLauncherOptions options, LauncherListener* listener);

// True when `pid` is alive and its /proc start time equals `start_time`.
bool ProcessMatches(int64_t pid, uint64_t start_time);
uint64_t ProcessStartTime(int64_t pid);  // 0 when the process does not exist

}  // namespace fp8d::launcher
