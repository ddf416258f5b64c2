// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/job_isolation.h"

#include <grp.h>
#include <pwd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "jobspec/paths.h"

namespace fp8d::api {

namespace fs = std::filesystem;

namespace {

fp8::Status Bad(const std::string& field, const std::string& why) {
  return fp8::InvalidArgumentError(field + ": " + why);
}

// The filesystem half of init_from's checks (jobspec holds the rest): it must name a model
// directory. The worker validates the tensors themselves (exit 65).
fp8::Status InitFromIsModelDir(const fp8d::v1::Job& job) {
  if (job.spec_case() != fp8d::v1::Job::kTrain || job.train().init_from().empty()) return fp8::OkStatus();
  const std::string& value = job.train().init_from();
  const std::string field = "job.train.init_from";
  std::error_code ec;
  const fs::path dir(value);
  if (!fs::is_directory(dir, ec)) return Bad(field, "no such directory: " + value);
  if (fs::exists(dir / "config.json", ec) || fs::exists(dir / "trainer_state.json", ec)) return fp8::OkStatus();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with("step-") && fs::exists(e.path() / "trainer_state.json", ec)) {
      return fp8::OkStatus();
    }
  }
  return Bad(field, value + " has neither config.json (Hugging Face GPT-2) nor trainer_state.json (fp8d checkpoint)");
}

fp8::Status CheckPathsAndModelDir(const fp8d::v1::Job& job, const std::vector<std::string>& roots,
                                  fp8::jobspec::ResolvedPaths* resolved) {
  FP8_RETURN_IF_ERROR(fp8::jobspec::CheckSpecPaths(job, "job", roots, fp8::jobspec::PathCheck::kAtCreate, resolved));
  return InitFromIsModelDir(job);
}

// Runs `check` on a thread of its own whose filesystem uid, gid and groups are `uid`'s, so the
// answer is what that user would see (root would see every path). Raw syscalls: glibc's
// setgroups changes every thread of the process; the kernel's changes this thread's
// credentials only, and they end with it. A filesystem uid other than 0 also drops the
// thread's CAP_DAC_* capabilities.
fp8::Status AsFilesystemUser(int64_t uid, const std::function<fp8::Status()>& check) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(static_cast<uid_t>(uid), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return fp8::FailedPreconditionError("CreateJob: uid " + std::to_string(uid) + " has no passwd entry");
  }
  int count = 64;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(count));
    getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count);
  }
  groups.resize(static_cast<size_t>(count));
  const gid_t gid = pw.pw_gid;
  fp8::Status result;
  std::thread thread([&] {
    if (syscall(SYS_setgroups, groups.size(), groups.data()) != 0) {
      result = fp8::InternalError("CreateJob: setgroups for uid " + std::to_string(uid) + " failed");
      return;
    }
    syscall(SYS_setfsgid, gid);
    syscall(SYS_setfsuid, static_cast<uid_t>(uid));
    // setfsuid/setfsgid report the previous id, not failure: read them back.
    if (syscall(SYS_setfsuid, static_cast<uid_t>(-1)) != uid || syscall(SYS_setfsgid, static_cast<gid_t>(-1)) != gid) {
      result = fp8::InternalError("CreateJob: could not take uid " + std::to_string(uid) + "'s filesystem rights");
      return;
    }
    result = check();
  });
  thread.join();
  return result;
}

}  // namespace

fp8::StatusOr<int64_t> RunAsUid(const IsolationOptions& options, const Principal& principal) {
  if (!options.run_as_owner) return int64_t{0};
  if (principal.uid == 0) {
    if (options.allow_root_jobs) return int64_t{0};  // fp8d's own uid: root
    return fp8::FailedPreconditionError(
        "CreateJob: principal " + principal.name +
        " is uid 0, and fp8d runs no job as root unless started with --allow-root-jobs (submit "
        "as an unprivileged user instead)");
  }
  return principal.uid > 0 ? principal.uid : options.default_uid;
}

std::vector<std::string> AllowedRoots(const IsolationOptions& options, int64_t run_as_uid) {
  std::vector<std::string> roots = options.allowed_roots;
  if (roots.empty()) {
    roots.push_back(options.data_dir);
    const uid_t uid = run_as_uid > 0 ? static_cast<uid_t>(run_as_uid) : geteuid();
    if (struct passwd* pw = getpwuid(uid); pw != nullptr && pw->pw_dir != nullptr) {
      roots.push_back(pw->pw_dir);
    }
  }
  return fp8::jobspec::ResolveRoots(roots);
}

fp8::Status CheckJobPaths(const fp8d::v1::Job& job, const std::vector<std::string>& roots, int64_t run_as_uid,
                          fp8::jobspec::ResolvedPaths* resolved) {
  const auto check = [&] { return CheckPathsAndModelDir(job, roots, resolved); };
  // Workers that run as fp8d's own uid see what fp8d sees.
  if (run_as_uid <= 0 || geteuid() != 0) return check();
  return AsFilesystemUser(run_as_uid, check);
}

}  // namespace fp8d::api
