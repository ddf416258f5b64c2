// SPDX-License-Identifier: Apache-2.0
// Principals and job environments through the real fp8d (docs/security.md, "Principals"):
// two real local users run fp8ctl as themselves (setpriv) over the unix socket and over
// loopback TCP; root submits over the unix socket; bearer tokens go over gRPC and HTTP; job
// environments are read back from the running workers' /proc/<pid>/environ. Needs root.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "daemon/api/auth_policy.h"
#include "tests/integration/daemon_process.h"

namespace fp8d::itest {
namespace {

namespace fs = std::filesystem;
using fp8::StatusCode;

#define SKIP_UNLESS_ROOT()                                                          \
  if (geteuid() != 0) GTEST_SKIP() << "needs root: it adds users and runs as them"

// A world-readable sandbox: the test users reach the socket, the job files and the shared
// folder their workers write into (TempDir alone is 0700).
class Sandbox {
 public:
  Sandbox() {
    chmod(dir_.path().c_str(), 0755);
    fs::create_directories(shared());
    chmod(shared().c_str(), 01777);
  }
  std::string path() const { return dir_.path(); }
  std::string data() const { return dir_.path() + "/data"; }
  std::string shared() const { return dir_.path() + "/shared"; }
  std::string socket() const { return "unix:" + dir_.path() + "/fp8d.sock"; }

 private:
  TempDir dir_;
};

// A job file any user can read: the fault-injection worker runs 100 ms steps until cancelled.
std::string WriteJobFile(const Sandbox& box, const std::string& name) {
  const std::string out = box.shared() + "/" + name;
  const std::string path = box.shared() + "/" + name + ".yaml";
  std::ofstream(path) << "display_name: " << name << "\n"
                      << "train:\n  model: {preset: tiny}\n  data: {train: '" << out << "/data/*.bin'}\n"
                      << "  precision: {recipe: fp8-blockwise}\n  training: {max_steps: 600}\n"
                      << "  output_dir: '" << out << "'\n  backend: cpu\n"
                      << "resources: {ranks: 1}\nenv: {FP8_TEST_STEP_MS: '100'}\n";
  chmod(path.c_str(), 0644);
  return path;
}

fp8d::v1::Job LongJob(const Sandbox& box, const std::string& name) {
  fp8d::v1::Job job = TestTrainJob(box.shared() + "/" + name, 600);
  (*job.mutable_env())["FP8_TEST_STEP_MS"] = "100";
  return job;
}

// fp8ctl as `user` (real, effective and saved uid and gid), with no token and no config file.
ProcessResult Fp8ctlAs(const TestUser& user, const std::string& server, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(user.uid()),
                                   "--regid=" + std::to_string(user.gid()), "--clear-groups",
                                   Fp8ctlPath(), "--server", server};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {{"HOME", "/nonexistent"}, {"XDG_CONFIG_HOME", "/nonexistent"},
                           {"FP8D_TOKEN", ""}, {"FP8D_ADDR", ""}});
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The pid of the job's rank 0 once it runs.
int64_t RankPid(fp8d::client::JobClient& client, const std::string& name) {
  int64_t pid = 0;
  PollUntil([&] {
    auto job = client.GetJob(name, fp8d::v1::JOB_VIEW_FULL);
    if (!job.ok() || job->state() != fp8d::v1::RUNNING) return false;
    for (const auto& attempt : job->attempts()) {
      for (const auto& rank : attempt.ranks()) pid = pid != 0 ? pid : rank.pid();
    }
    return pid != 0 && ProcessAlive(pid);
  });
  return pid;
}

int64_t ProcessUid(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
}

std::vector<std::string> ProcessEnviron(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::vector<std::string> out;
  for (std::string entry; std::getline(in, entry, '\0');) out.push_back(entry);
  return out;
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

void CancelAndWait(fp8d::client::JobClient& client, const std::string& name) {
  (void)client.CancelJob(name);
  (void)WaitTerminal(client, name, std::chrono::seconds(60));
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// HTTP status of GET `url` (curl), with `token` as a bearer token when not empty.
std::string HttpCode(const std::string& url, const std::string& token) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"};
  if (!token.empty()) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + token});
  argv.push_back(url);
  return RunProcess(argv).out;
}

fp8d::client::JobClient WithToken(const Daemon& d, const std::string& token) {
  fp8d::client::ConnectionOptions options;
  options.address = d.address();
  options.token = token;
  return fp8d::client::JobClient(options);
}

// The attack of main: both users submitted over loopback TCP, were both `nobody`, and one
// cancelled the other's job. Now loopback TCP does not submit at all, and over the unix
// socket each user is itself.
TEST(SecurityPrincipals, OneLocalUserCannotCancelAnothersJob) {
  SKIP_UNLESS_ROOT();
  TestUser alice("fp8dspa"), bob("fp8dspb");
  ASSERT_TRUE(alice.ok()) << alice.error();
  ASSERT_TRUE(bob.ok()) << bob.error();
  Sandbox box;
  const std::string job_file = WriteJobFile(box, "alice-job");
  {
    DaemonOptions tcp;
    tcp.loopback_role = "";  // fp8d's default
    Daemon d(box.data() + "-tcp", tcp);
    ASSERT_TRUE(d.Start().ok()) << d.Log();
    ProcessResult r = Fp8ctlAs(alice, d.address(), {"submit", "-f", job_file, "--parsable"});
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find("PERMISSION_DENIED"), std::string::npos) << r.err;
  }
  DaemonOptions options;
  options.listen = box.socket();
  options.run_jobs_as_owner = true;
  Daemon d(box.data(), options);
  ASSERT_TRUE(d.Start().ok()) << d.Log();
  ProcessResult submitted = Fp8ctlAs(alice, box.socket(), {"submit", "-f", job_file, "--parsable"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string name = "jobs/" + Trimmed(submitted.out);
  auto job = d.client().GetJob(name);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->owner(), alice.name());
  EXPECT_EQ(job->run_as_uid(), static_cast<int64_t>(alice.uid()));
  const int64_t pid = RankPid(d.client(), name);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ProcessUid(pid), static_cast<int64_t>(alice.uid()));

  ProcessResult cancel = Fp8ctlAs(bob, box.socket(), {"cancel", name});
  EXPECT_NE(cancel.exit_code, 0);
  EXPECT_NE(cancel.err.find("PERMISSION_DENIED"), std::string::npos) << cancel.err;
  ProcessResult del = Fp8ctlAs(bob, box.socket(), {"delete", name});
  EXPECT_NE(del.err.find("PERMISSION_DENIED"), std::string::npos) << del.err;
  EXPECT_EQ(d.client().GetJob(name)->state(), fp8d::v1::RUNNING);

  ProcessResult own = Fp8ctlAs(alice, box.socket(), {"cancel", name});
  EXPECT_EQ(own.exit_code, 0) << own.err;
  auto done = WaitTerminal(d.client(), name);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->state(), fp8d::v1::CANCELLED);
}

// Without --loopback-role, a loopback TCP caller without a token is a viewer: it reads, and
// creates, cancels and deletes nothing, not even with the job of a token's submitter at hand.
TEST(SecurityPrincipals, LoopbackWithoutTokenIsReadOnly) {
  SKIP_UNLESS_ROOT();
  Sandbox box;
  const std::string token = "tok-alice";
  const std::string tokens = box.path() + "/tokens";
  std::ofstream(tokens) << fp8d::api::Sha256Hex(token) << " alice submitter\n";
  DaemonOptions options;
  options.loopback_role = "";
  options.extra_args = {"--auth-tokens", tokens};
  Daemon d(box.data(), options);
  ASSERT_TRUE(d.Start().ok()) << d.Log();
  fp8d::client::JobClient alice = WithToken(d, token);
  auto job = alice.CreateJob(LongJob(box, "a"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();

  fp8d::client::JobClient& anonymous = d.client();
  auto created = anonymous.CreateJob(LongJob(box, "b"));
  EXPECT_EQ(created.status().code(), StatusCode::kPermissionDenied) << created.status().ToString();
  EXPECT_NE(created.status().message().find("viewer"), std::string::npos) << created.status().message();
  EXPECT_EQ(anonymous.CancelJob(job->name()).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(anonymous.DeleteJob(job->name()).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(anonymous.GetJob(job->name()).ok());
  fp8d::v1::ListJobsRequest list;
  auto page = anonymous.ListJobs(list);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->jobs_size(), 1);
  EXPECT_NE(anonymous.GetJob(job->name())->state(), fp8d::v1::CANCELLED);
  CancelAndWait(alice, job->name());

  // Loopback may be made a submitter, never an admin.
  ProcessResult admin = RunProcess({Fp8dPath(), "--loopback-role", "admin", "--data-dir", box.path() + "/other"});
  EXPECT_EQ(admin.exit_code, 2) << admin.err;
  EXPECT_NE(admin.err.find("--loopback-role admin"), std::string::npos) << admin.err;
}

// Root's own jobs (root over the unix socket) are refused unless fp8d runs them as root, which
// it does only with --allow-root-jobs; main ran them as `nobody`, whom any nobody process could
// signal.
TEST(SecurityPrincipals, RootJobsNeedAllowRootJobs) {
  SKIP_UNLESS_ROOT();
  Sandbox box;
  {
    DaemonOptions options;
    options.listen = box.socket();
    options.run_jobs_as_owner = true;
    Daemon d(box.data(), options);
    ASSERT_TRUE(d.Start().ok()) << d.Log();
    auto refused = d.client().CreateJob(LongJob(box, "root-a"));
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().ToString();
    EXPECT_NE(refused.status().message().find("--allow-root-jobs"), std::string::npos)
        << refused.status().message();
  }
  DaemonOptions options;
  options.listen = box.socket();
  options.run_jobs_as_owner = true;
  options.extra_args = {"--allow-root-jobs"};
  Daemon d(box.data() + "-allowed", options);
  ASSERT_TRUE(d.Start().ok()) << d.Log();
  auto job = d.client().CreateJob(LongJob(box, "root-b"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->owner(), "root");
  EXPECT_EQ(job->run_as_uid(), 0);
  const int64_t pid = RankPid(d.client(), job->name());
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ProcessUid(pid), 0);
  CancelAndWait(d.client(), job->name());
}

// A bearer token that is sent is checked, whether or not --auth-tokens is set: on loopback,
// main ignored a wrong one and answered as for no token at all.
TEST(SecurityPrincipals, PresentedTokensAreAlwaysChecked) {
  SKIP_UNLESS_ROOT();
  Sandbox box;
  const std::string tokens = box.path() + "/tokens";
  std::ofstream(tokens) << fp8d::api::Sha256Hex("tok-vera") << " vera viewer\n";
  for (const bool configured : {false, true}) {
    SCOPED_TRACE(configured ? "with --auth-tokens" : "without --auth-tokens");
    const int http_port = FreePort();
    DaemonOptions options;
    options.loopback_role = "";
    options.extra_args = {"--http-listen", "127.0.0.1:" + std::to_string(http_port)};
    if (configured) options.extra_args.insert(options.extra_args.end(), {"--auth-tokens", tokens});
    Daemon d(box.data() + (configured ? "-tokens" : ""), options);
    ASSERT_TRUE(d.Start().ok()) << d.Log();
    const std::string url = "http://127.0.0.1:" + std::to_string(http_port) + "/v1/jobs";
    fp8d::v1::ListJobsRequest list;

    fp8d::client::JobClient wrong = WithToken(d, "wrong");
    auto refused = wrong.ListJobs(list);
    EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
    if (!configured) {
      EXPECT_NE(refused.status().message().find("no tokens are configured"), std::string::npos)
          << refused.status().message();
    }
    EXPECT_EQ(wrong.CreateJob(LongJob(box, "w")).status().code(), StatusCode::kUnauthenticated);
    EXPECT_EQ(HttpCode(url, "wrong"), "401");

    EXPECT_TRUE(d.client().ListJobs(list).ok());  // no token: the loopback viewer
    EXPECT_EQ(HttpCode(url, ""), "200");
    if (configured) {
      EXPECT_TRUE(WithToken(d, "tok-vera").ListJobs(list).ok());
      EXPECT_EQ(HttpCode(url, "tok-vera"), "200");
    }
  }
}

// Job.env admits the allowlist (and the operator's --job-env-allow) and nothing that makes a
// loader, shell or interpreter run code; what it admits reaches the worker.
TEST(SecurityPrincipals, JobEnvIsAllowlisted) {
  SKIP_UNLESS_ROOT();
  Sandbox box;
  {
    Daemon d(box.data(), {});
    ASSERT_TRUE(d.Start().ok()) << d.Log();
    for (const char* name : {"LD_PRELOAD", "LD_LIBRARY_PATH", "GCONV_PATH", "PYTHONPATH", "BASH_ENV",
                             "PERL5OPT", "WANDB_PROJECT"}) {
      fp8d::v1::Job job = LongJob(box, std::string("bad-") + name);
      (*job.mutable_env())[name] = box.shared();
      auto refused = d.client().CreateJob(job);
      EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << name;
      EXPECT_NE(refused.status().message().find(std::string("job.env[") + name + "]: not allowed"),
                std::string::npos)
          << refused.status().message();
    }
    fp8d::v1::Job job = LongJob(box, "good");
    (*job.mutable_env())["OMP_NUM_THREADS"] = "3";
    auto created = d.client().CreateJob(job);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    const int64_t pid = RankPid(d.client(), created->name());
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(Contains(ProcessEnviron(pid), "OMP_NUM_THREADS=3"));
    CancelAndWait(d.client(), created->name());
  }
  // A name only the operator can admit: with --job-env-allow it is accepted and reaches the
  // worker; an entry that could admit only refused names stops fp8d at start-up.
  DaemonOptions options;
  options.extra_args = {"--job-env-allow", "WANDB_*"};
  Daemon d(box.data() + "-allow", options);
  ASSERT_TRUE(d.Start().ok()) << d.Log();
  fp8d::v1::Job job = LongJob(box, "wandb");
  (*job.mutable_env())["WANDB_PROJECT"] = "fp8";
  auto created = d.client().CreateJob(job);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const int64_t pid = RankPid(d.client(), created->name());
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(Contains(ProcessEnviron(pid), "WANDB_PROJECT=fp8"));
  fp8d::v1::Job preload = LongJob(box, "preload");
  (*preload.mutable_env())["LD_PRELOAD"] = "/tmp/x.so";
  EXPECT_EQ(d.client().CreateJob(preload).status().code(), StatusCode::kInvalidArgument);
  CancelAndWait(d.client(), created->name());

  ProcessResult bad = RunProcess({Fp8dPath(), "--job-env-allow", "LD_*", "--data-dir", box.path() + "/other"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--job-env-allow LD_*"), std::string::npos) << bad.err;
}

// A job already in the database whose env the allowlist no longer admits (stored by an older
// fp8d, or before the operator dropped a --job-env-allow entry) fails INVALID_SPEC at launch,
// with the reason, and is not retried.
TEST(SecurityPrincipals, StoredJobEnvIsCheckedAgainAtLaunch) {
  SKIP_UNLESS_ROOT();
  Sandbox box;
  std::string blocker, queued;
  {
    DaemonOptions options;
    options.cpu_slots = 1;
    options.extra_args = {"--job-env-allow", "WANDB_PROJECT"};
    Daemon d(box.data(), options);
    ASSERT_TRUE(d.Start().ok()) << d.Log();
    auto first = d.client().CreateJob(LongJob(box, "blocker"));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_GT(RankPid(d.client(), first->name()), 0);
    fp8d::v1::Job job = LongJob(box, "queued");
    (*job.mutable_env())["WANDB_PROJECT"] = "fp8";
    auto second = d.client().CreateJob(job);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(second->state(), fp8d::v1::QUEUED);
    blocker = first->name();
    queued = second->name();
    d.Signal(SIGTERM);  // stops fp8d only: the blocker's worker runs on for the next one
    ASSERT_GE(d.Wait(), 0);
  }
  DaemonOptions options;
  options.cpu_slots = 1;
  Daemon d(box.data(), options);
  ASSERT_TRUE(d.Start().ok()) << d.Log();
  EXPECT_EQ(d.client().GetJob(queued)->state(), fp8d::v1::QUEUED);
  CancelAndWait(d.client(), blocker);
  auto failed = WaitTerminal(d.client(), queued);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->state(), fp8d::v1::FAILED);
  EXPECT_EQ(failed->error().failure_class(), fp8d::v1::INVALID_SPEC);
  EXPECT_NE(failed->error().message().find("job.env[WANDB_PROJECT]: not allowed"), std::string::npos)
      << failed->error().message();
  EXPECT_EQ(failed->attempts_size(), 1);
}

}  // namespace
}  // namespace fp8d::itest
