// SPDX-License-Identifier: Apache-2.0
// The attempt folder as both launchers keep it: its creation at launch, rank logs read for
// GetJobLogs, and removal of a deleted job's attempt folders, all beneath the jobs root without
// following a link.
#include "daemon/launcher/attempt_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

namespace fp8d::launcher {
namespace {

namespace fs = std::filesystem;

// A file that may still grow: each Read continues where the last stopped.
class FileRankStream final : public RankStream {
 public:
  FileRankStream(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  StatusOr<std::string> Read(size_t max_bytes) override {
    std::string buf(max_bytes, '\0');
    ssize_t n;
    do {
      n = ::read(fd_.get(), buf.data(), buf.size());
    } while (n < 0 && errno == EINTR);
    if (n < 0) return fp8::InternalError("read " + path_ + ": " + std::strerror(errno));
    buf.resize(static_cast<size_t>(n));
    return buf;
  }

 private:
  const std::string path_;
  const UniqueFd fd_;
};

Handover HandoverOf(const RunAs& run_as, mode_t mode) {
  return Handover{run_as.uid, run_as.gid, mode};
}

}  // namespace

fp8::StatusOr<AttemptFolder> OpenAttemptFolder(const std::string& attempt_dir, bool create) {
  const fs::path attempt(attempt_dir);
  const fs::path job = attempt.parent_path();
  FP8_ASSIGN_OR_RETURN(BeneathDir jobs, BeneathDir::OpenTrusted(job.parent_path().string(), create));
  FP8_ASSIGN_OR_RETURN(BeneathDir job_dir, jobs.OpenDir(job.filename().string(), create));
  FP8_ASSIGN_OR_RETURN(BeneathDir attempt_folder, job_dir.OpenDir(attempt.filename().string(), create));
  return AttemptFolder{std::move(job_dir), std::move(attempt_folder)};
}

fp8::StatusOr<AttemptFolder> PrepareAttemptFolder(const LaunchRequest& request, const RunAs& run_as) {
  const fs::path attempt(request.attempt_dir);
  FP8_ASSIGN_OR_RETURN(BeneathDir jobs, BeneathDir::OpenTrusted(attempt.parent_path().parent_path().string(), true));
  // jobs/ is passable (not listable) by the owners of the folders inside it.
  if (run_as.uid > 0 && ::fchmod(jobs.fd(), 0711) != 0) {
    return fp8::UnavailableError("chmod " + jobs.path() + ": " + std::strerror(errno));
  }
  FP8_ASSIGN_OR_RETURN(BeneathDir job, jobs.OpenDir(attempt.parent_path().filename().string(), true));
  FP8_RETURN_IF_ERROR(job.HandOverSelf(HandoverOf(run_as, 0700)));
  FP8_ASSIGN_OR_RETURN(BeneathDir attempt_folder, job.OpenDir(attempt.filename().string(), true));
  FP8_RETURN_IF_ERROR(attempt_folder.HandOverSelf(HandoverOf(run_as, 0750)));
  FP8_ASSIGN_OR_RETURN(BeneathDir rendezvous, attempt_folder.OpenDir("rendezvous", true));
  FP8_RETURN_IF_ERROR(rendezvous.HandOverSelf(HandoverOf(run_as, 0750)));
  FP8_RETURN_IF_ERROR(attempt_folder.WriteAtomically("spec.json", request.spec_json, HandoverOf(run_as, 0640)));
  return AttemptFolder{std::move(job), std::move(attempt_folder)};
}

std::string RankFileName(int rank, const char* suffix) { return "rank-" + std::to_string(rank) + suffix; }

fp8::StatusOr<UniqueFd> CreateRankFile(const BeneathDir& attempt, int rank, const char* suffix, int flags,
                                       const RunAs& run_as) {
  const std::string name = RankFileName(rank, suffix);
  FP8_ASSIGN_OR_RETURN(UniqueFd fd, attempt.CreateFile(name, flags));
  FP8_RETURN_IF_ERROR(HandOver(fd.get(), HandoverOf(run_as, 0640), attempt.path() + "/" + name));
  return fd;
}

fp8::StatusOr<UniqueFd> OpenAttemptFile(const std::string& path) {
  const fs::path file(path);
  FP8_ASSIGN_OR_RETURN(AttemptFolder folder, OpenAttemptFolder(file.parent_path().string(), false));
  return folder.attempt.OpenFile(file.filename().string(), O_RDONLY);
}

fp8::Status AsLaunchError(fp8::Status status) {
  if (status.code() != fp8::StatusCode::kPermissionDenied) return status;
  return fp8::InvalidArgumentError("job folder: " + status.message());
}

StatusOr<std::unique_ptr<RankStream>> Launcher::OpenRankLog(const std::string& job_id, int attempt,
                                                         const std::string& attempt_dir,
                                                         int rank) const {
  const std::string path = attempt_dir + "/" + RankFileName(rank, ".log");
  StatusOr<UniqueFd> fd = OpenAttemptFile(path);
  if (!fd.ok() && fd.status().code() == fp8::StatusCode::kNotFound) {
    return fp8::NotFoundError("no log yet for rank " + std::to_string(rank) + " of job " + job_id +
                              " attempt " + std::to_string(attempt));
  }
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<RankStream>(std::make_unique<FileRankStream>(path, std::move(*fd)));
}

Status Launcher::RemoveAttemptFiles(const std::string& job_id, const std::vector<std::string>& attempt_dirs) {
  // Grouped by job folder; each folder is reached beneath the jobs root, its attempts removed
  // without following a link, and the folder itself removed only when that left it empty.
  std::map<fs::path, std::vector<std::string>> by_job;
  for (const auto& dir : attempt_dirs) {
    const fs::path path(dir);
    // Only attempt folders: a name that is not attempt-<n> is not ours to remove.
    if (path.filename().string().rfind("attempt-", 0) != 0) {
      return fp8::InvalidArgumentError("job " + job_id + ": " + dir + " is not an attempt folder");
    }
    by_job[path.parent_path()].push_back(path.filename().string());
  }
  for (const auto& [job, attempts] : by_job) {
    StatusOr<BeneathDir> jobs = BeneathDir::OpenTrusted(job.parent_path().string(), false);
    if (!jobs.ok() && jobs.status().code() == fp8::StatusCode::kNotFound) continue;
    if (!jobs.ok()) return jobs.status();
    const std::string job_name = job.filename().string();
    StatusOr<BeneathDir> folder = jobs->OpenDir(job_name);
    if (!folder.ok() && folder.status().code() == fp8::StatusCode::kNotFound) continue;
    if (!folder.ok()) return folder.status();
    for (const std::string& attempt : attempts) FP8_RETURN_IF_ERROR(folder->RemoveTree(attempt));
    FP8_RETURN_IF_ERROR(jobs->RemoveDirIfEmpty(job_name));
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::launcher
