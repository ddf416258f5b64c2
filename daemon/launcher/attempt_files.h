// SPDX-License-Identifier: Apache-2.0
// An attempt's folder, <jobs root>/<job id>/attempt-<n>, as both launchers keep it. The jobs root
// is root's and trusted; the job folder and everything below it are the job owner's, so they
// are only ever reached through BeneathDir (beneath_dir.h): fp8d, as root, follows no link the
// owner planted there.
#pragma once

#include <string>

#include "common/status.h"
#include "daemon/launcher/launcher.h"
#include "daemon/launcher/beneath_dir.h"
#include "daemon/launcher/process.h"

namespace fp8d::launcher {

struct AttemptFolder {
  BeneathDir job;      // jobs/<id>
  BeneathDir attempt;  // jobs/<id>/attempt-<n>
};

// `attempt_dir` is absolute; its grandparent is the jobs root. With `create`, missing folders
// are made (the jobs root by name, the two below beneath it).
fp8::StatusOr<AttemptFolder> OpenAttemptFolder(const std::string& attempt_dir, bool create);

// Launch's common part: the job folder (0700), the attempt folder and rendezvous/ (0750) and
// spec.json (0640, written atomically), all handed to `run_as` on their fds, and the jobs root
// made passable (0711) for the owners of the folders in it.
fp8::StatusOr<AttemptFolder> PrepareAttemptFolder(const LaunchRequest& request, const RunAs& run_as);

// "rank-<r><suffix>", e.g. "rank-0.log".
std::string RankFileName(int rank, const char* suffix);

// A new, empty rank file made by fp8d and handed to `run_as` (0640).
fp8::StatusOr<UniqueFd> CreateRankFile(const BeneathDir& attempt, int rank, const char* suffix, int flags,
                                       const RunAs& run_as);

// `<attempt dir>/<name>` opened read-only, through the attempt folder.
fp8::StatusOr<UniqueFd> OpenAttemptFile(const std::string& path);

// A refused entry (PERMISSION_DENIED: a link or a stranger where fp8d's own file belongs) was put
// there by the job's owner: launching again cannot help, so Launch reports it as
// INVALID_ARGUMENT, which fails the job (INVALID_SPEC) with the message naming the entry. Other
// statuses pass unchanged.
fp8::Status AsLaunchError(fp8::Status status);

}  // namespace fp8d::launcher
