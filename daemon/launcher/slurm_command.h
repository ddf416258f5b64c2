// SPDX-License-Identifier: Apache-2.0
// Running Slurm's command-line tools (sbatch, squeue, scontrol, scancel) for the Slurm
// launcher, and reading their answers. Blocking: called only from the launcher's own threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/launcher/launcher.h"

namespace fp8d::launcher {

struct CommandResult {
  int exit_code = -1;  // -1: killed (timeout) or not started
  std::string out;
  std::string err;
};

// Runs argv[0] (looked up in PATH) with `env_overrides` added to this process's environment,
// stdin from /dev/null, and collects stdout and stderr. A command still running after
// `timeout_ms` is killed; the error then says so. Errors only when it could not be started
// or timed out; a non-zero exit is in the result.
// With `base`, the command's environment is `base` plus the overrides instead. With
// `stdin_fd` >= 0, that file is its stdin instead of /dev/null.
fp8::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                        const std::map<std::string, std::string>& env_overrides,
                                        int timeout_ms,
                                        const std::map<std::string, std::string>* base = nullptr,
                                        int stdin_fd = -1);

// One line of `squeue -h -o '%i|%T|%r'`.
struct SlurmJobState {
  int64_t job_id = 0;
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, ...
  std::string reason;  // Resources, Priority, None, ...
};
std::vector<SlurmJobState> ParseSqueue(const std::string& out);

// True for a state after which the job runs no more.
bool IsTerminalSlurmState(const std::string& state);

// sbatch's "Submitted batch job N" or --parsable "N[;cluster]": the job id, or 0.
int64_t ParseSbatchJobId(const std::string& out);

// "Key=Value" fields of `scontrol show job -o` (values run to the next space).
std::map<std::string, std::string> ParseScontrolFields(const std::string& out);

// A PENDING job's squeue reason that no amount of waiting resolves (the request exceeds what
// the partition, account or QOS allows, or names something that does not exist): Slurm
// accepts such jobs unless EnforcePartLimits is set, and keeps them pending forever.
bool NeverStartsReason(const std::string& reason);

// From `sinfo -h -N -o '%N %T'`: the nodes that are down, failing or not responding (a '*'
// after the state), as "n2 (down*), ..."; empty when none.
std::string LostNodes(const std::string& sinfo);

// Slurm's time limit for a limit in ms: whole minutes, rounded up (sbatch --time=M).
int64_t SlurmMinutes(int64_t ms);

// What the launcher knows about an attempt's Slurm job once it ended, for one rank's exit.
struct SlurmEnd {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int64_t slurm_id = 0;
  bool known = true;      // false: squeue no longer lists the job (purged, no accounting to ask)
  bool rejected = false;  // pending for a reason no wait resolves (NeverStartsReason): cancelled
  std::string state;      // squeue's last state: COMPLETED, FAILED, NODE_FAIL, ...
  std::string reason;     // squeue's last reason
  // `scontrol show job -o` fields (Reason, ExitCode "code:signal", NodeList, ...), plus
  // "fp8d.lost_nodes": LostNodes() of the job's nodes, non-empty when one of them is lost.
  std::map<std::string, std::string> fields;
};

// The rank's exit as the core sees it: Slurm's end state mapped to a failure cause (NODE_FAIL,
// BOOT_FAIL or a lost node → kNodeLost, PREEMPTED, TIMEOUT/DEADLINE → kTimeLimit,
// OUT_OF_MEMORY, CANCELLED → kCancelledOutside, rejected → kRejected); COMPLETED and FAILED
// keep kProcess with the exit code or signal of ExitCode, or `adopted` (the events decide) when
// there is no status to be had, as for a job Slurm no longer knows.
WorkerExit SlurmJobExit(const SlurmEnd& end);

// A rank's launcher handle (RankProcess::handle): "slurm:<job id>".
std::string SlurmHandle(int64_t slurm_id);
// The Slurm job id in a handle; 0 for an empty handle (none was recorded), -1 for a handle this
// launcher did not write. Also reads "pid:<job id>:start:0": the job id was once saved as the
// rank's pid, and the store turns such rows into that local-style handle.
int64_t SlurmIdOfHandle(const std::string& handle);

}  // namespace fp8d::launcher
