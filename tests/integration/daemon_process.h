// SPDX-License-Identifier: Apache-2.0
// Integration-test harness: the real fp8d binary started as a process on a free loopback port
// (fp8d --listen 127.0.0.1:0 --addr-file ...), a temporary data dir, the fault-injection
// worker, and helpers that poll for conditions with generous limits (the suite must pass on
// a loaded 2-core machine, so nothing asserts on how fast something happened unless the
// contract names a bound).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/job_client.h"
#include "common/status.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::itest {

// Where the binaries are: the build tree, unless FP8D_ITEST_FP8D, FP8D_ITEST_FP8CTL,
// FP8D_ITEST_TEST_WORKER or FP8D_ITEST_REAL_WORKER name others (binaries carried elsewhere).
std::string Fp8dPath();
std::string Fp8ctlPath();
std::string TestWorkerPath();
std::string RealWorkerPath();

// A fresh directory under $TMPDIR, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct DaemonOptions {
  std::map<std::string, std::string> env;  // set in fp8d's environment; workers inherit it
  std::vector<std::string> extra_args;
  std::string worker;                      // default: the fault-injection worker
  int cpu_slots = 4;
  int cancel_grace_ms = 1500;
  std::string log_level = "debug";
  // Workers run as the test's user unless set (then, under root, as each job's owner).
  bool run_jobs_as_owner = false;
  // --listen; "unix:PATH" makes client() connect over the socket (as the test's uid).
  std::string listen = "127.0.0.1:0";
  // --loopback-role: the harness's client submits over loopback TCP without a token, so it
  // asks for submitter; empty leaves fp8d's default (viewer).
  std::string loopback_role = "submitter";
};

class Daemon {
 public:
  Daemon(std::string data_dir, DaemonOptions options);
  ~Daemon();  // cancels live jobs (so no worker outlives the test), then SIGTERM

  // Starts fp8d and waits until its health service says SERVING.
  fp8::Status Start(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void Signal(int sig);
  // Waits for the process to exit; returns its exit code (128+signal when killed).
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& data_dir() const { return data_dir_; }
  fp8d::client::JobClient& client() { return *client_; }
  std::string Log() const;  // fp8d's stderr so far
  // Cancel every non-terminal job and wait until all are terminal.
  void CancelAll();

 private:
  std::string data_dir_;
  DaemonOptions options_;
  pid_t pid_ = -1;
  std::string address_;
  std::unique_ptr<fp8d::client::JobClient> client_;
  int starts_ = 0;
};

// The port fp8d logged for --http-listen 127.0.0.1:0 (waits up to 30 s for the line; 0 if none).
int HttpPort(const Daemon& daemon);

// Polls `pred` every 20 ms until it holds or `timeout` passes.
bool PollUntil(const std::function<bool()>& pred,
               std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Waits until the job is in a terminal state; returns it (or the last error).
fp8::StatusOr<fp8d::v1::Job> WaitTerminal(fp8d::client::JobClient& client, const std::string& name,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(90));
fp8::StatusOr<fp8d::v1::Job> WaitState(fp8d::client::JobClient& client, const std::string& name,
                                       fp8d::v1::JobState state,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(60));

// One line of the test worker's steps.log (FP8_TEST_STEP_LOG): "<attempt> <rank> <step> <pid>".
struct StepLine {
  int attempt = 0;
  int rank = 0;
  long step = 0;
  long pid = 0;
};
// The lines of a steps.log in the order they were written.
std::vector<StepLine> ReadSteps(const std::string& path);

// A TRAIN job for the fault-injection worker: `steps` steps, a checkpoint every `save_steps`.
fp8d::v1::Job TestTrainJob(const std::string& output_dir, int steps, int save_steps = 0);

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs argv with extra environment; captures stdout/stderr.
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env = {},
                         std::chrono::milliseconds timeout = std::chrono::seconds(120));

bool ProcessAlive(int64_t pid);

// A system user for one test: created when missing, removed again only if the test made it.
// Needs root (useradd); ok() is false otherwise and error() says why.
class TestUser {
 public:
  explicit TestUser(std::string name);
  ~TestUser();
  TestUser(const TestUser&) = delete;
  TestUser& operator=(const TestUser&) = delete;
  bool ok() const { return uid_ > 0; }
  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  std::string name_, error_;
  bool created_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace fp8d::itest
