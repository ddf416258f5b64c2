// SPDX-License-Identifier: Apache-2.0
// SpawnAsUser and the worker environment allowlist: the isolation half of the launcher. fork is
// used only here, because only a forked child can change its user before exec; between fork
// and exec the child calls async-signal-safe functions only (everything it needs is prepared
// by the parent).
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <sstream>

#include "daemon/launcher/launcher.h"
#include "daemon/launcher/process.h"

namespace fp8d::launcher {

namespace {

// argv[0] as a path: the PATH lookup happens in the parent (it allocates).
std::string ResolveProgram(const std::string& program, const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return program;
}

// The child's pid as decimal text into `fd` (an empty file the parent made), with
// async-signal-safe calls only.
bool WritePid(int fd) {
  char digits[24];
  int n = 0;
  for (long v = static_cast<long>(getpid()); v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  char text[25];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n++] = '\n';
  const bool ok = write(fd, text, n) == n;
  return close(fd) == 0 && ok;
}

[[noreturn]] void ChildFail(int pipe_fd) {
  const int err = errno;
  (void)!write(pipe_fd, &err, sizeof(err));
  _exit(127);
}

}  // namespace

fp8::StatusOr<int64_t> SpawnAsUser(const SpawnRequest& request) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return fp8::InvalidArgumentError("worker_argv_prefix: empty program");
  }
  if (geteuid() != 0) {
    return fp8::FailedPreconditionError("running a worker as uid " + std::to_string(request.uid) +
                                        " needs fp8d to run as root");
  }
  const std::string program = ResolveProgram(request.argv[0], request.env);
  std::vector<char*> argv = ExecArray(request.argv);
  std::vector<char*> envp = ExecArray(request.env);
  std::vector<gid_t> groups(request.groups.begin(), request.groups.end());
  const uid_t uid = static_cast<uid_t>(request.uid);
  const gid_t gid = static_cast<gid_t>(request.gid);
  // The child dup2s over 0-2 before it closes the rest: fds it needs must not be among them.
  const int stdout_fd = request.stdout_fd, stderr_fd = request.stderr_fd, pid_fd = request.pid_fd;
  if (stdout_fd <= 2 || stderr_fd <= 2 || (pid_fd >= 0 && pid_fd <= 2)) {
    return fp8::InvalidArgumentError("spawn: the worker's files must be fds above 2");
  }

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return fp8::InternalError(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(report[0]);
    close(report[1]);
    return fp8::InternalError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    close(report[0]);
    if (setsid() < 0) ChildFail(report[1]);
    // Still root here: nothing is opened by a name the job's owner controls. stdout, stderr
    // and the pid file are fds the parent opened beneath the attempt folder.
    const int in = open("/dev/null", O_RDONLY);
    if (in < 0) ChildFail(report[1]);
    if (dup2(in, 0) < 0 || dup2(stdout_fd, 1) < 0 || dup2(stderr_fd, 2) < 0) ChildFail(report[1]);
    if (pid_fd >= 0 && !WritePid(pid_fd)) ChildFail(report[1]);
    // Every other fd except the report pipe (close-on-exec) goes: the daemon's sockets and
    // database must not leak into a worker.
    for (int fd = 3; fd < 65536; ++fd) {
      if (fd != report[1]) close(fd);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Groups first, the uid last: after setuid the child could no longer change the others.
    if (setgroups(groups.size(), groups.data()) != 0) ChildFail(report[1]);
    if (setgid(gid) != 0 || setuid(uid) != 0) ChildFail(report[1]);
    if (setuid(0) == 0) {  // must be impossible now
      errno = EPERM;
      ChildFail(report[1]);
    }
    execve(program.c_str(), argv.data(), envp.data());
    ChildFail(report[1]);
  }
  close(report[1]);
  int child_errno = 0;
  ssize_t n;
  while ((n = read(report[0], &child_errno, sizeof(child_errno))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n > 0) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return fp8::Status(child_errno == ENOENT || child_errno == EACCES
                           ? fp8::StatusCode::kFailedPrecondition
                           : fp8::StatusCode::kInternal,
                       "starting '" + request.argv[0] + "' as uid " + std::to_string(uid) + ": " +
                           std::strerror(child_errno));
  }
  return static_cast<int64_t>(pid);
}

std::map<std::string, std::string> AllowlistedEnvironment(
    char** base, const std::vector<std::string>& extra_allow) {
  // LD_LIBRARY_PATH: where an operator installed the CUDA/NCCL libraries; FP8_*: the worker's
  // own tuning knobs. Both are set by whoever runs fp8d, and neither holds a credential.
  static const char* kNames[] = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "USER", "LOGNAME",
                                 "LD_LIBRARY_PATH"};
  static const char* kPrefixes[] = {"LC_", "CUDA_", "NCCL_", "FP8_"};
  auto allowed = [&](const std::string& key) {
    for (const char* n : kNames) {
      if (key == n) return true;
    }
    for (const char* p : kPrefixes) {
      if (key.rfind(p, 0) == 0) return true;
    }
    for (const std::string& a : extra_allow) {
      if (!a.empty() && a.back() == '*' ? key.rfind(a.substr(0, a.size() - 1), 0) == 0 : key == a) {
        return true;
      }
    }
    return false;
  };
  std::map<std::string, std::string> env;
  for (char** e = base; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string key = kv.substr(0, eq);
    if (allowed(key)) env.emplace(std::move(key), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace fp8d::launcher

namespace fp8d::launcher {

std::vector<std::string> MergeEnvironment(std::map<std::string, std::string> base,
                                          const std::map<std::string, std::string>& overrides) {
  for (const auto& [k, v] : overrides) base[k] = v;
  std::vector<std::string> out;
  out.reserve(base.size());
  for (const auto& [k, v] : base) out.push_back(k + "=" + v);
  return out;
}

fp8::StatusOr<RunAs> ResolveRunAs(const LaunchRequest& request) {
  RunAs run_as;
  if (request.env) run_as.env = *request.env;
  if (request.uid <= 0) return run_as;
  struct passwd* pw = getpwuid(static_cast<uid_t>(request.uid));
  if (pw == nullptr) {
    return fp8::FailedPreconditionError("uid " + std::to_string(request.uid) + ": no such user");
  }
  run_as.uid = request.uid;
  run_as.gid = request.gid > 0 ? request.gid : pw->pw_gid;
  int count = 64;
  std::vector<gid_t> groups(count);
  if (getgrouplist(pw->pw_name, static_cast<gid_t>(run_as.gid), groups.data(), &count) < 0) {
    groups.resize(count);
    getgrouplist(pw->pw_name, static_cast<gid_t>(run_as.gid), groups.data(), &count);
  }
  groups.resize(std::max(count, 0));
  run_as.groups.assign(groups.begin(), groups.end());
  if (request.env) {
    run_as.env["HOME"] = pw->pw_dir;
    run_as.env["USER"] = pw->pw_name;
    run_as.env["LOGNAME"] = pw->pw_name;
  }
  return run_as;
}

}  // namespace fp8d::launcher
