// SPDX-License-Identifier: Apache-2.0
// The path rule against the real fp8d and fp8-worker: a glob that climbs out after its
// wildcard, init_from looked at as the owner, a directory swapped for a symlink while the job
// was queued, a symlink alias of an output_dir in use, an unreadable init_from, and a create
// retried with its request_id after fp8d was killed or stopped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tests/integration/daemon_process.h"

namespace {

namespace fs = std::filesystem;
using fp8d::itest::Daemon;
using fp8d::itest::DaemonOptions;
using fp8d::itest::PollUntil;
using fp8d::itest::ProcessResult;
using fp8d::itest::RealWorkerPath;
using fp8d::itest::RunProcess;
using fp8d::itest::TempDir;
using fp8d::itest::TestTrainJob;
using fp8d::itest::TestUser;
using fp8d::itest::WaitState;
using fp8d::itest::WaitTerminal;
using fp8d::v1::Job;

class DaemonPaths : public ::testing::Test {
 protected:
  void TearDown() override {
    daemon_.reset();
    if (!saved_fp8d_.empty()) ::setenv("FP8D_ITEST_FP8D", saved_fp8d_.c_str(), 1);
  }

  void StartDaemon(DaemonOptions options) {
    daemon_ = std::make_unique<Daemon>(tmp_.path() + "/data", std::move(options));
    ASSERT_TRUE(daemon_->Start().ok()) << daemon_->Log();
  }

  // fp8d with `roots` instead of the harness's "/" (the harness always passes --allowed-root /;
  // fp8d_with_roots.sh swaps it).
  void StartDaemonWithRoots(DaemonOptions options, const std::string& roots) {
    const char* real = std::getenv("FP8D_ITEST_FP8D");
    saved_fp8d_ = real != nullptr ? real : "";
    options.env["FP8D_TEST_REAL_FP8D"] = fp8d::itest::Fp8dPath();
    options.env["FP8D_TEST_ROOTS"] = roots;
    ::setenv("FP8D_ITEST_FP8D", FP8D_WITH_ROOTS_SCRIPT, 1);
    StartDaemon(std::move(options));
    if (saved_fp8d_.empty()) ::unsetenv("FP8D_ITEST_FP8D");
  }

  fp8d::client::JobClient& client() { return daemon_->client(); }

  // Workers of the fault-injection worker that start, then stay RUNNING.
  static DaemonOptions Hanging() {
    DaemonOptions options;
    options.env["FP8_TEST_MODE"] = "hang_after_start";
    return options;
  }

  // llm.c shards of the repository's corpus, made by the real worker.
  std::string Shards(const std::string& dir) {
    ProcessResult prep = RunProcess({RealWorkerPath(), "prepare-data", "--text",
                                     std::string(FP8D_SOURCE_DIR) + "/data/corpus.txt", "--out", dir});
    EXPECT_EQ(prep.exit_code, 0) << prep.err;
    return dir + "/train_*.bin";
  }

  // Created and owned by `user`, so only the path rule stands between its jobs and it.
  static void MakeOwnedDir(const std::string& dir, const TestUser& user) {
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms(0755));
    ASSERT_EQ(::chown(dir.c_str(), user.uid(), user.gid()), 0) << dir;
  }

  TempDir tmp_;
  std::unique_ptr<Daemon> daemon_;
  std::string saved_fp8d_;
};

TEST_F(DaemonPaths, GlobClimbingOutAfterItsWildcardIsRefusedAtCreate) {
  StartDaemon({});
  fs::create_directories(tmp_.path() + "/d1");
  Job job = TestTrainJob(tmp_.path() + "/out", 5);
  const std::string glob = tmp_.path() + "/d*/../../etc/*.bin";
  job.mutable_train()->mutable_data()->set_train(glob);
  auto created = client().CreateJob(job);
  ASSERT_FALSE(created.ok()) << created->name();
  EXPECT_EQ(created.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(created.status().message(), "job.train.data.train: " + glob + ": a glob must not contain '..'");
}

TEST_F(DaemonPaths, SymlinkAliasOfAnOutputDirInUseIsRefused) {
  StartDaemon(Hanging());
  fs::create_directories(tmp_.path() + "/out-a");
  fs::create_directory_symlink(tmp_.path() + "/out-a", tmp_.path() + "/alias");
  auto a = client().CreateJob(TestTrainJob(tmp_.path() + "/out-a", 5));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = client().CreateJob(TestTrainJob(tmp_.path() + "/alias", 5));
  ASSERT_FALSE(b.ok()) << "two active jobs share one output dir: " << b->name();
  EXPECT_EQ(b.status().code(), fp8::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.status().message().rfind("output_dir " + tmp_.path() + "/alias is used by " + a->name(), 0), 0u)
      << b.status().message();
}

// Restarted after `sig`, fp8d answers a create retried with the same request_id and body with
// the job it made the first time.
void ExpectRetryAfterRestartReturnsTheSameJob(Daemon& daemon, const TempDir& tmp, int sig) {
  const Job job = TestTrainJob(tmp.path() + "/out-retry", 5);
  auto first = daemon.client().CreateJob(job, "retry-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(WaitState(daemon.client(), first->name(), fp8d::v1::RUNNING).ok());
  daemon.Signal(sig);
  ASSERT_GE(daemon.Wait(), 0) << daemon.Log();
  ASSERT_TRUE(daemon.Start().ok()) << daemon.Log();
  auto again = daemon.client().CreateJob(job, "retry-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->name(), first->name());
  // Another request_id for the same folder is still refused.
  auto other = daemon.client().CreateJob(job, "retry-2");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), fp8::StatusCode::kFailedPrecondition) << other.status().ToString();
}

TEST_F(DaemonPaths, CreateRetriedWithItsRequestIdAfterSigkillReturnsTheSameJob) {
  StartDaemon(Hanging());
  ExpectRetryAfterRestartReturnsTheSameJob(*daemon_, tmp_, SIGKILL);
}

TEST_F(DaemonPaths, CreateRetriedWithItsRequestIdAfterSigtermReturnsTheSameJob) {
  StartDaemon(Hanging());
  ExpectRetryAfterRestartReturnsTheSameJob(*daemon_, tmp_, SIGTERM);
}

TEST_F(DaemonPaths, InitFromTheOwnerCannotSeeIsRefusedLikeAMissingOne) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: jobs run as a second user";
  TestUser user("fp8d-paths-user");
  ASSERT_TRUE(user.ok()) << user.error();
  fs::permissions(tmp_.path(), fs::perms(0755));
  const std::string secret = tmp_.path() + "/root-only";
  fs::create_directories(secret + "/model");
  std::ofstream(secret + "/model/config.json") << "{}";
  fs::permissions(secret, fs::perms(0700));
  MakeOwnedDir(tmp_.path() + "/out", user);
  DaemonOptions options;
  options.extra_args = {"--default-user", user.name()};
  options.run_jobs_as_owner = true;
  StartDaemon(options);
  for (const std::string& init_from : {secret + "/model", secret + "/absent"}) {
    Job job = TestTrainJob(tmp_.path() + "/out/run", 5);
    job.mutable_train()->clear_model();
    job.mutable_train()->set_init_from(init_from);
    auto created = client().CreateJob(job);
    ASSERT_FALSE(created.ok()) << init_from << " was accepted: the owner cannot see it";
    EXPECT_EQ(created.status().code(), fp8::StatusCode::kInvalidArgument);
    EXPECT_EQ(created.status().message(), "job.train.init_from: " + init_from + ": cannot be resolved: Permission denied");
  }
}

TEST_F(DaemonPaths, DirectorySwappedForASymlinkWhileQueuedIsRefusedByTheWorker) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: jobs run as a second user";
  if (!fs::exists(RealWorkerPath())) GTEST_SKIP() << RealWorkerPath() << " not built";
  TestUser user("fp8d-paths-user");
  ASSERT_TRUE(user.ok()) << user.error();
  fs::permissions(tmp_.path(), fs::perms(0755));
  const std::string root = tmp_.path() + "/root", outside = tmp_.path() + "/outside";
  MakeOwnedDir(root, user);
  MakeOwnedDir(outside, user);
  const std::string shards = Shards(root + "/tokens");
  MakeOwnedDir(root + "/busy", user);
  MakeOwnedDir(root + "/swap", user);
  DaemonOptions options;
  options.worker = RealWorkerPath();
  options.cpu_slots = 1;
  options.run_jobs_as_owner = true;
  options.extra_args = {"--default-user", user.name()};
  StartDaemonWithRoots(options, root);
  // The one slot is busy, so the second job waits in the queue while its folder is swapped.
  Job busy = TestTrainJob(root + "/busy", 1000000);
  busy.mutable_train()->mutable_data()->set_train(shards);
  auto a = client().CreateJob(busy);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(WaitState(client(), a->name(), fp8d::v1::RUNNING, std::chrono::seconds(120)).ok()) << daemon_->Log();
  Job queued = TestTrainJob(root + "/swap/run", 20, 10);
  queued.mutable_train()->mutable_data()->set_train(shards);
  auto b = client().CreateJob(queued);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  fs::rename(root + "/swap", root + "/swap.orig");
  fs::create_directory_symlink(outside, root + "/swap");
  ASSERT_TRUE(client().CancelJob(a->name()).ok());
  auto job = WaitTerminal(client(), b->name(), std::chrono::seconds(300));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::INVALID_SPEC);
  EXPECT_NE(job->error().message().find("output_dir: " + root + "/swap/run is outside the allowed roots"),
            std::string::npos) << job->error().message();
  EXPECT_TRUE(fs::is_empty(outside)) << "the job wrote outside its roots";
}

TEST_F(DaemonPaths, UnreadableInitFromIsDataErrorNotACrash) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the worker runs as a second user";
  if (!fs::exists(RealWorkerPath())) GTEST_SKIP() << RealWorkerPath() << " not built";
  TestUser user("fp8d-paths-user");
  ASSERT_TRUE(user.ok()) << user.error();
  fs::permissions(tmp_.path(), fs::perms(0755));
  const std::string shards = Shards(tmp_.path() + "/tokens");
  const std::string model = tmp_.path() + "/model";  // root's, 0700: a directory it cannot enter
  fs::create_directories(model);
  std::ofstream(model + "/config.json") << "{}";
  fs::permissions(model, fs::perms(0700));
  MakeOwnedDir(tmp_.path() + "/out", user);
  const std::string spec = tmp_.path() + "/spec.json";
  std::ofstream(spec) << R"({"data": {"train": ")" << shards << R"("}, "output_dir": ")" << tmp_.path()
                      << R"(/out/run", "init_from": ")" << model << R"(", "backend": "cpu"})";
  fs::permissions(spec, fs::perms(0644));
  ProcessResult r = RunProcess({"/usr/bin/setpriv", "--reuid=" + std::to_string(user.uid()),
                                "--regid=" + std::to_string(user.gid()), "--clear-groups", RealWorkerPath(), "train",
                                "--spec", spec});
  EXPECT_EQ(r.exit_code, 65) << r.out << r.err;
  EXPECT_NE(r.out.find(R"("class":"DATA_ERROR")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("init_from: " + model + ": cannot be read"), std::string::npos) << r.out;
}

}  // namespace
