// SPDX-License-Identifier: Apache-2.0
#include "daemon/launcher/slurm_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "daemon/launcher/process.h"

extern char** environ;

namespace fp8d::launcher {

fp8::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                        const std::map<std::string, std::string>& env_overrides,
                                        int timeout_ms,
                                        const std::map<std::string, std::string>* base,
                                        int stdin_fd) {
  if (argv.empty()) return fp8::InvalidArgumentError("argv: empty");
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fp8::InternalError(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return fp8::InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> env;
  if (base != nullptr) {
    std::map<std::string, std::string> all = *base;
    for (const auto& [k, v] : env_overrides) all[k] = v;
    for (const auto& [k, v] : all) env.push_back(k + "=" + v);
  } else {
    env = MergeEnvironment(environ, env_overrides);
  }
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0].c_str(), &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return fp8::FailedPreconditionError(argv[0] + ": cannot run: " + std::strerror(rc));
  }
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return fp8::FailedPreconditionError(argv[0] + ": no answer within " + std::to_string(timeout_ms) + " ms");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::vector<SlurmJobState> ParseSqueue(const std::string& out) {
  std::vector<SlurmJobState> jobs;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find('|');
    if (a == std::string::npos) continue;
    const size_t b = line.find('|', a + 1);
    SlurmJobState s;
    char* end = nullptr;
    const std::string id = line.substr(0, a);
    s.job_id = std::strtoll(id.c_str(), &end, 10);
    if (end == id.c_str() || *end != '\0' || s.job_id <= 0) continue;  // array or het job ids
    s.state = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    if (b != std::string::npos) s.reason = line.substr(b + 1);
    while (!s.reason.empty() && (s.reason.back() == '\r' || s.reason.back() == ' ')) s.reason.pop_back();
    jobs.push_back(std::move(s));
  }
  return jobs;
}

bool IsTerminalSlurmState(const std::string& state) {
  return !(state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" ||
           state == "COMPLETING" || state == "SUSPENDED" || state == "REQUEUED" ||
           state == "REQUEUE_HOLD" || state == "REQUEUE_FED" || state == "RESIZING" ||
           state == "SIGNALING" || state == "STAGE_OUT" || state == "STOPPED" ||
           state == "RESV_DEL_HOLD" || state == "SPECIAL_EXIT" || state.empty());
}

int64_t ParseSbatchJobId(const std::string& out) {
  size_t i = out.find_first_of("0123456789");
  if (i == std::string::npos) return 0;
  return std::strtoll(out.c_str() + i, nullptr, 10);
}

std::map<std::string, std::string> ParseScontrolFields(const std::string& out) {
  std::map<std::string, std::string> fields;
  std::istringstream in(out);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    fields.emplace(word.substr(0, eq), word.substr(eq + 1));
  }
  return fields;
}

bool NeverStartsReason(const std::string& reason) {
  static const char* kReasons[] = {"PartitionNodeLimit", "PartitionConfig", "PartitionTimeLimit",
                                   "BadConstraints",     "InvalidAccount",  "InvalidQOS",
                                   "AccountNotAllowed",  "QOSNotAllowed"};
  for (const char* r : kReasons) {
    if (reason == r) return true;
  }
  return false;
}

std::string LostNodes(const std::string& sinfo) {
  std::istringstream in(sinfo);
  std::string node, state, out;
  while (in >> node >> state) {
    const bool lost = state.find('*') != std::string::npos || state.rfind("down", 0) == 0 ||
                      state.rfind("fail", 0) == 0;
    if (lost) out += (out.empty() ? "" : ", ") + node + " (" + state + ")";
  }
  return out;
}

WorkerExit SlurmJobExit(const SlurmEnd& end) {
  WorkerExit ex;
  ex.job_id = end.job_id;
  ex.attempt = end.attempt;
  ex.rank = end.rank;
  const std::string where = "Slurm job " + std::to_string(end.slurm_id);
  if (end.rejected) {
    ex.cause = WorkerExit::Cause::kRejected;
    ex.cause_message = where + " can never start: Slurm keeps it pending for " + end.reason +
                       " (the request exceeds what the partition, account or QOS allows); "
                       "cancelled";
    return ex;
  }
  if (!end.known) {
    // Purged from slurmctld's memory and no accounting to ask: the events decide.
    ex.adopted = true;
    return ex;
  }
  const std::map<std::string, std::string>& info = end.fields;
  const std::string& st = end.state;
  std::string reason = end.reason;
  if (auto it = info.find("Reason"); it != info.end() && it->second != "None") reason = it->second;
  const std::string why = where + " ended " + st + (reason.empty() || reason == "None" ? "" : " (" + reason + ")");
  if (st == "NODE_FAIL" || st == "BOOT_FAIL") {
    ex.cause = WorkerExit::Cause::kNodeLost;
  } else if (st == "PREEMPTED") {
    ex.cause = WorkerExit::Cause::kPreempted;
  } else if (st == "TIMEOUT" || st == "DEADLINE") {
    ex.cause = WorkerExit::Cause::kTimeLimit;
  } else if (st == "OUT_OF_MEMORY") {
    ex.cause = WorkerExit::Cause::kOutOfMemory;
  } else if (st == "CANCELLED") {
    ex.cause = WorkerExit::Cause::kCancelledOutside;  // ours too; the core ignores it then
  }
  if (auto it = info.find("fp8d.lost_nodes");
      it != info.end() && !it->second.empty() && st != "CANCELLED") {
    ex.cause = WorkerExit::Cause::kNodeLost;
    ex.cause_message = why + "; node(s) not responding: " + it->second;
    return ex;
  }
  ex.cause_message = why;
  if (ex.cause != WorkerExit::Cause::kProcess) return ex;
  // COMPLETED or FAILED: the batch script exits with srun's status, the highest of the ranks'.
  int code = st == "COMPLETED" ? 0 : -1;
  if (auto it = info.find("ExitCode"); it != info.end() && st != "COMPLETED") {
    const std::string& v = it->second;  // "code:signal"
    const size_t colon = v.find(':');
    const int c = std::atoi(v.substr(0, colon).c_str());
    const int s = colon == std::string::npos ? 0 : std::atoi(v.substr(colon + 1).c_str());
    if (s != 0) {
      ex.signal = s;
    } else {
      code = c;
    }
  }
  if (code < 0 && ex.signal == 0) {
    ex.adopted = true;  // no status to be had: the events decide
  } else {
    ex.exit_code = code;
  }
  return ex;
}

int64_t SlurmMinutes(int64_t ms) { return ms <= 0 ? 0 : (ms + 59999) / 60000; }

std::string SlurmHandle(int64_t slurm_id) { return "slurm:" + std::to_string(slurm_id); }

int64_t SlurmIdOfHandle(const std::string& handle) {
  if (handle.empty()) return 0;
  long long id = 0;
  int consumed = 0;
  if (std::sscanf(handle.c_str(), "slurm:%lld%n", &id, &consumed) == 1 &&
      consumed == static_cast<int>(handle.size()) && id > 0) {
    return id;
  }
  consumed = 0;
  if (std::sscanf(handle.c_str(), "pid:%lld:start:0%n", &id, &consumed) == 1 &&
      consumed == static_cast<int>(handle.size()) && id > 0) {
    return id;
  }
  return -1;
}

}  // namespace fp8d::launcher
