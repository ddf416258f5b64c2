// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/daemon_process.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <iterator>
#include <sstream>
#include <thread>

extern char** environ;

namespace fp8d::itest {
namespace fs = std::filesystem;

namespace {
// The build tree's binary, unless `env` names another one (binaries carried to another
// machine, where the build tree's absolute paths do not exist).
std::string BinaryPath(const char* env, const char* built) {
  const char* value = std::getenv(env);
  return value != nullptr && value[0] != '\0' ? value : built;
}
}  // namespace

std::string Fp8dPath() { return BinaryPath("FP8D_ITEST_FP8D", FP8D_BINARY); }
std::string Fp8ctlPath() { return BinaryPath("FP8D_ITEST_FP8CTL", FP8CTL_BINARY); }
std::string TestWorkerPath() { return BinaryPath("FP8D_ITEST_TEST_WORKER", FP8_TEST_WORKER_BINARY); }
std::string RealWorkerPath() { return BinaryPath("FP8D_ITEST_REAL_WORKER", FP8_WORKER_BINARY); }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && base[0] ? base : "/tmp") + "/fp8d-itest-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  if (std::getenv("FP8D_ITEST_KEEP") != nullptr) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

namespace {

fp8::Status DeadlineError(std::string message) {
  return fp8::Status(fp8::StatusCode::kDeadlineExceeded, std::move(message));
}

std::vector<std::string> MergedEnv(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

// fork + execve with stdout/stderr redirected to files (or inherited when empty).
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> env_strings = MergedEnv(env);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // Unblock what gtest or the parent may have blocked; fp8d sets up its own mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    if (!out_path.empty()) {
      int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
    }
    if (!err_path.empty()) {
      int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 2);
    }
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  return pid;
}

int WaitPid(pid_t pid, std::chrono::milliseconds timeout, bool* exited) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  *exited = false;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      *exited = true;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0) {
      *exited = true;
      return -1;
    }
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsTerminal(fp8d::v1::JobState s) {
  return s == fp8d::v1::SUCCEEDED || s == fp8d::v1::FAILED || s == fp8d::v1::CANCELLED;
}

// Workers outlive fp8d by design (the next fp8d re-adopts them), so a test whose worker
// ignores SIGTERM (hang_after_start) would leave it running once its daemon has stopped. Every
// process whose command line names a spec under this daemon's data dir is one of its workers:
// SIGKILL its process group (each rank leads its own).
void KillStrayWorkers(const std::string& data_dir) {
  const std::string marker = data_dir + "/jobs/";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string pid_text = entry.path().filename().string();
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) == std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    const pid_t group = getpgid(pid);
    if (group > 0 && group != getpgrp()) ::kill(-group, SIGKILL);
    ::kill(pid, SIGKILL);
  }
}

}  // namespace

Daemon::Daemon(std::string data_dir, DaemonOptions options)
    : data_dir_(std::move(data_dir)), options_(std::move(options)) {
  if (options_.worker.empty()) options_.worker = TestWorkerPath();
}

Daemon::~Daemon() {
  if (pid_ <= 0) return;
  CancelAll();
  Signal(SIGTERM);
  if (Wait(std::chrono::seconds(30)) < 0 && pid_ > 0) {
    Signal(SIGKILL);
    Wait(std::chrono::seconds(10));
  }
  KillStrayWorkers(data_dir_);
}

fp8::Status Daemon::Start(std::chrono::milliseconds timeout) {
  ++starts_;
  const std::string addr_file = data_dir_ + "/fp8d.addr";
  std::error_code ec;
  fs::create_directories(data_dir_, ec);
  fs::remove(addr_file, ec);
  std::vector<std::string> argv = {Fp8dPath(),
                                   "--listen", options_.listen,
                                   "--addr-file", addr_file,
                                   "--data-dir", data_dir_,
                                   "--worker", options_.worker,
                                   "--gpus", "none",
                                   "--cpu-slots", std::to_string(options_.cpu_slots),
                                   "--cancel-grace-ms", std::to_string(options_.cancel_grace_ms),
                                   "--log-level", options_.log_level,
                                   // The harness's jobs use temp dirs, run as the test's user
                                   // and read FP8_TEST_* knobs from fp8d's environment.
                                   "--allowed-root", "/",
                                   "--run-jobs-as-owner", options_.run_jobs_as_owner ? "true" : "false",
                                   "--worker-env-allow", "FP8_TEST_*"};
  if (!options_.loopback_role.empty()) {
    argv.insert(argv.end(), {"--loopback-role", options_.loopback_role});
  }
  for (const auto& a : options_.extra_args) argv.push_back(a);
  pid_ = Spawn(argv, options_.env, data_dir_ + "/fp8d.log", data_dir_ + "/fp8d.log");
  if (pid_ <= 0) return fp8::InternalError("fork failed");
  const auto end = std::chrono::steady_clock::now() + timeout;
  bool have_addr = PollUntil([&] {
    if (fs::exists(addr_file)) return true;
    bool exited = false;
    WaitPid(pid_, std::chrono::milliseconds(0), &exited);
    if (exited) {
      pid_ = -1;
      return true;
    }
    return false;
  }, timeout);
  if (pid_ <= 0) return fp8::InternalError("fp8d exited during start-up:\n" + Log());
  if (!have_addr) return DeadlineError("fp8d wrote no address:\n" + Log());
  std::string addr = ReadFile(addr_file);
  while (!addr.empty() && (addr.back() == '\n' || addr.back() == ' ')) addr.pop_back();
  address_ = addr;
  client_ = std::make_unique<fp8d::client::JobClient>(address_);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
  if (!client_->WaitForServing(std::max(left, std::chrono::milliseconds(1000)))) {
    return DeadlineError("fp8d never reported SERVING:\n" + Log());
  }
  return fp8::OkStatus();
}

void Daemon::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int Daemon::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  bool exited = false;
  int code = WaitPid(pid_, timeout, &exited);
  if (exited) pid_ = -1;
  return exited ? code : -1;
}

std::string Daemon::Log() const { return ReadFile(data_dir_ + "/fp8d.log"); }

void Daemon::CancelAll() {
  if (client_ == nullptr) return;
  fp8d::v1::ListJobsRequest request;
  request.set_page_size(1000);
  auto page = client_->ListJobs(request);
  if (!page.ok()) return;
  std::vector<std::string> live;
  for (const auto& j : page->jobs()) {
    if (!IsTerminal(j.state())) {
      (void)client_->CancelJob(j.name());
      live.push_back(j.name());
    }
  }
  for (const auto& name : live) (void)WaitTerminal(*client_, name, std::chrono::seconds(30));
}

bool PollUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

fp8::StatusOr<fp8d::v1::Job> WaitTerminal(fp8d::client::JobClient& client, const std::string& name,
                                          std::chrono::milliseconds timeout) {
  fp8::StatusOr<fp8d::v1::Job> last = DeadlineError(name + " never became terminal");
  PollUntil([&] {
    auto got = client.GetJob(name, fp8d::v1::JOB_VIEW_FULL);
    if (!got.ok()) return false;
    last = got;
    return IsTerminal(got->state());
  }, timeout);
  if (last.ok() && !IsTerminal(last->state())) {
    return DeadlineError(name + " still " + fp8d::v1::JobState_Name(last->state()));
  }
  return last;
}

fp8::StatusOr<fp8d::v1::Job> WaitState(fp8d::client::JobClient& client, const std::string& name,
                                       fp8d::v1::JobState state, std::chrono::milliseconds timeout) {
  fp8d::v1::Job last;
  bool found = PollUntil([&] {
    auto got = client.GetJob(name, fp8d::v1::JOB_VIEW_FULL);
    if (!got.ok()) return false;
    last = *got;
    return got->state() == state;
  }, timeout);
  if (!found) {
    return DeadlineError(name + " never reached " + fp8d::v1::JobState_Name(state) +
                                      "; last " + fp8d::v1::JobState_Name(last.state()));
  }
  return last;
}

fp8d::v1::Job TestTrainJob(const std::string& output_dir, int steps, int save_steps) {
  fp8d::v1::Job job;
  job.set_display_name("itest");
  auto* t = job.mutable_train();
  t->mutable_model()->set_preset("tiny");
  t->mutable_data()->set_train(output_dir + "/data/*.bin");
  t->mutable_precision()->set_recipe("fp8-blockwise");
  t->mutable_training()->set_max_steps(steps);
  t->mutable_training()->set_save_steps(save_steps);
  t->set_output_dir(output_dir);
  t->set_backend("cpu");
  job.mutable_resources()->set_ranks(1);
  job.mutable_retry()->set_max_attempts(3);
  job.mutable_retry()->mutable_initial_backoff()->set_nanos(200 * 1000 * 1000);
  job.mutable_retry()->mutable_max_backoff()->set_seconds(1);
  return job;
}

ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env,
                         std::chrono::milliseconds timeout) {
  TempDir dir;
  const std::string out = dir.path() + "/out", err = dir.path() + "/err";
  ProcessResult result;
  pid_t pid = Spawn(argv, env, out, err);
  bool exited = false;
  result.exit_code = WaitPid(pid, timeout, &exited);
  if (!exited) {
    kill(pid, SIGKILL);
    WaitPid(pid, std::chrono::seconds(10), &exited);
    result.exit_code = -1;
  }
  result.out = ReadFile(out);
  result.err = ReadFile(err);
  return result;
}

int HttpPort(const Daemon& daemon) {
  int port = 0;
  PollUntil([&] {
    std::smatch m;
    const std::string log = daemon.Log();
    if (!std::regex_search(log, m, std::regex("http listening on 127\\.0\\.0\\.1:(\\d+)"))) return false;
    port = std::stoi(m[1]);
    return true;
  }, std::chrono::seconds(30));
  return port;
}

std::vector<StepLine> ReadSteps(const std::string& path) {
  std::vector<StepLine> out;
  std::ifstream in(path);
  StepLine l;
  while (in >> l.attempt >> l.rank >> l.step >> l.pid) out.push_back(l);
  return out;
}

bool ProcessAlive(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0) return false;
  // A zombie (exited, not yet reaped) is not alive.
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z';
}

TestUser::TestUser(std::string name) : name_(std::move(name)) {
  if (::getpwnam(name_.c_str()) == nullptr) {
    ProcessResult r = RunProcess({"/usr/sbin/useradd", "--system", "--no-create-home", "--shell",
                                  "/usr/sbin/nologin", name_});
    error_ = r.exit_code == 0 ? "" : "useradd " + name_ + ": " + r.err;
    created_ = r.exit_code == 0;
  }
  if (const struct passwd* pw = ::getpwnam(name_.c_str()); pw != nullptr) {
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
  }
}

TestUser::~TestUser() {
  if (created_) (void)RunProcess({"/usr/sbin/userdel", name_});
}

}  // namespace fp8d::itest
