// SPDX-License-Identifier: Apache-2.0
// fp8d on a real Slurm cluster: scripts/slurm-cluster.sh starts munge, slurmctld and two
// slurmd (nodes n1, n2) on this machine for each test and stops them after it; fp8d runs with
// --launcher slurm. Every test skips when the cluster cannot start (no Slurm installed).
//
// The ranks are the fault-injection worker (fast and scriptable) except in the test that
// compares the real trainer's losses on Slurm with the local launcher's.
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fp8d/v1/worker_event.pb.h"
#include "tests/integration/daemon_process.h"

namespace fp8d::itest {
namespace {

namespace fs = std::filesystem;
using fp8d::v1::Job;

std::string ClusterScript() { return std::string(FP8D_SOURCE_DIR) + "/scripts/slurm-cluster.sh"; }

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_dir_ = tmp_.path() + "/cluster";
    ProcessResult r = RunProcess({"/bin/bash", ClusterScript(), "start", cluster_dir_, "2"}, cluster_env_,
                                 std::chrono::seconds(90));
    if (r.exit_code != 0) {
      (void)RunProcess({"/bin/bash", ClusterScript(), "stop", cluster_dir_});
      GTEST_SKIP() << "no Slurm cluster: " << r.err;
    }
    cluster_up_ = true;
    slurm_env_ = {{"SLURM_CONF", cluster_dir_ + "/slurm.conf"}};
  }

  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "---- fp8d log ----\n" << daemon_->Log();
    if (HasFailure() && cluster_up_) std::cerr << "---- squeue ----\n" << Slurm({"squeue", "--states=all"}).out;
    daemon_.reset();  // cancels its live jobs first
    if (cluster_up_) {
      ProcessResult r = RunProcess({"/bin/bash", ClusterScript(), "stop", cluster_dir_});
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
  }

  // fp8d with the Slurm launcher; `worker_env` reaches the ranks through sbatch --export=ALL.
  // With `owner`, jobs run as their owner's uid and a loopback caller without a token (this
  // test's client) is that user.
  void StartSlurmDaemon(std::map<std::string, std::string> worker_env = {},
                        const std::string& worker = TestWorkerPath(), const std::string& owner = "") {
    const std::string config = tmp_.path() + "/fp8d.yaml";
    std::ofstream(config) << "launcher: slurm\nslurm:\n  partition: debug\n  poll_interval: 200ms\n"
                          << slurm_yaml_extra_;
    DaemonOptions options;
    options.worker = worker;
    options.env = worker_env;
    for (const auto& [k, v] : slurm_env_) options.env[k] = v;
    options.extra_args = {"--config", config};
    options.cancel_grace_ms = 3000;
    if (!owner.empty()) {
      options.run_jobs_as_owner = true;
      options.extra_args.insert(options.extra_args.end(), {"--default-user", owner});
    }
    daemon_ = std::make_unique<Daemon>(tmp_.path() + "/data", options);
    fp8::Status st = daemon_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // Runs a Slurm client command (found in PATH) against the test cluster.
  ProcessResult Slurm(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "/usr/bin/env");
    return RunProcess(argv, slurm_env_);
  }

  // Slurm jobs not yet ended (pending, running, completing), as squeue lists them.
  std::string LiveSlurmJobs() { return Slurm({"squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i %T %j"}).out; }

  // The Slurm job ids fp8d submitted for `name` (all states squeue still remembers).
  std::vector<std::string> SlurmJobsOf(const std::string& name) {
    const std::string id = name.substr(name.find('/') + 1);
    std::istringstream in(Slurm({"squeue", "-h", "--states=all", "-o", "%i %j"}).out);
    std::vector<std::string> ids;
    std::string sid, jname;
    while (in >> sid >> jname) {
      if (jname.rfind("fp8d-" + id + "-", 0) == 0) ids.push_back(sid);
    }
    return ids;
  }

  // The Slurm job of `name`'s first attempt once fp8d has submitted it, as squeue prints it with
  // `format` (`-o`).
  std::string SqueueFieldsOf(const std::string& name, const std::string& format) {
    if (!PollUntil([&] { return SlurmJobsOf(name).size() == 1; }, std::chrono::seconds(30))) {
      return "no Slurm job for " + name;
    }
    return Slurm({"squeue", "-h", "-j", SlurmJobsOf(name)[0], "-o", format}).out;
  }

  // Cancels each job and checks that it ends CANCELLED.
  void CancelAndExpectCancelled(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      ASSERT_TRUE(client().CancelJob(name).ok());
      auto job = WaitTerminal(client(), name, std::chrono::seconds(60));
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      EXPECT_EQ(job->state(), fp8d::v1::CANCELLED) << job->error().message();
    }
  }

  // Every rank of the last attempt shows the node as "slurm" and the Slurm job id as its pid
  // (job.proto, RankPlacement), so `squeue -j <pid>` finds it.
  static void ExpectPlacementsShowTheSlurmJob(const Job& job, const std::string& slurm_id) {
    ASSERT_FALSE(job.attempts().empty());
    const auto& ranks = job.attempts(job.attempts_size() - 1).ranks();
    ASSERT_FALSE(ranks.empty());
    for (const auto& r : ranks) {
      EXPECT_EQ(r.node(), "slurm") << r.ShortDebugString();
      EXPECT_EQ(std::to_string(r.pid()), slurm_id) << r.ShortDebugString();
    }
  }

  Job TwoNodeJob(const std::string& out, int steps, int save_steps) {
    Job job = TestTrainJob(out, steps, save_steps);
    job.mutable_resources()->set_ranks(0);
    job.mutable_resources()->set_nodes(2);
    job.mutable_resources()->set_ranks_per_node(1);
    return job;
  }

  // After n2 was lost: once attempt 2 exists, n2 comes back and the job must end SUCCEEDED
  // at `steps`, its first attempt NODE_LOST and the second resumed from a checkpoint.
  // Returns the job's full view (empty on a failed assertion).
  std::optional<Job> ExpectRetriedAfterNodeLoss(const std::string& name, int steps,
                                                std::chrono::seconds retry_within) {
    std::optional<Job> full_view;
    [&] {
      ASSERT_TRUE(PollUntil([&] {
        auto j = client().GetJob(name);
        return j.ok() && j->attempt() >= 2;
      }, retry_within));
      ProcessResult start = RunProcess({"/bin/bash", ClusterScript(), "start-node", cluster_dir_, "n2"});
      ASSERT_EQ(start.exit_code, 0) << start.err;
      auto job = WaitTerminal(client(), name, std::chrono::seconds(180));
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
      auto full = client().GetJob(name, fp8d::v1::JOB_VIEW_FULL);
      ASSERT_TRUE(full.ok());
      ASSERT_GE(full->attempts_size(), 2);
      EXPECT_EQ(full->attempts(0).failure_class(), fp8d::v1::NODE_LOST) << full->attempts(0).failure_message();
      EXPECT_NE(full->attempts(1).resumed_from().find("step-"), std::string::npos);
      EXPECT_EQ(job->progress().step(), steps);
      full_view = *full;
    }();
    return full_view;
  }

  fp8d::client::JobClient& client() { return daemon_->client(); }
  std::string Out(const std::string& name) { return tmp_.path() + "/out/" + name; }

  TempDir tmp_;
  std::string cluster_dir_;
  bool cluster_up_ = false;
  std::map<std::string, std::string> slurm_env_;
  std::map<std::string, std::string> cluster_env_;  // for slurm-cluster.sh start (SLURM_CLUSTER_GPUS)
  std::string slurm_yaml_extra_;                     // more lines of fp8d's `slurm:` config
  std::unique_ptr<Daemon> daemon_;
};

std::string AttemptDir(const Daemon& d, const std::string& name, int attempt) {
  return d.data_dir() + "/jobs/" + name.substr(name.find('/') + 1) + "/attempt-" + std::to_string(attempt);
}

// (step, loss) of every progress event in a rank's events file, as the worker wrote them.
std::vector<std::pair<int64_t, std::string>> Losses(const std::string& events_file) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::ifstream in(events_file);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("progress")) continue;  // worker_event.proto as JSON
    const nlohmann::json& p = j["progress"];
    out.emplace_back(std::stoll(p.value("step", "-1")), p.contains("loss") ? p["loss"].dump() : "");
  }
  return out;
}

// Every regular file under `dir`, by its path relative to `dir`, with its bytes.
std::map<std::string, std::string> ReadTree(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    files[fs::relative(entry.path(), dir).string()].assign(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

// A calibration output file as two runs of the same calibration can be compared: the reports
// record the run as well as its result, so report.json loses its summary's output_dir, seconds
// and input_gb_per_sec and its fingerprint's spec.output_dir (two jobs cannot share an output
// dir; the time is the machine's), and report.txt's "summary: {...}" line the same summary
// fields. Everything else, in every file, stays as written.
std::string ComparableCalibrationFile(const std::string& path, const std::string& bytes) {
  auto erase_run_fields = [](nlohmann::json& summary) {
    for (const char* k : {"output_dir", "seconds", "input_gb_per_sec"}) summary.erase(k);
  };
  if (path == "report.json") {
    nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
    if (!j.is_object() || !j.contains("summary")) return bytes;
    erase_run_fields(j["summary"]);
    if (j.contains("fingerprint") && j["fingerprint"].contains("spec")) j["fingerprint"]["spec"].erase("output_dir");
    return j.dump(2);
  }
  if (path == "report.txt") {
    const std::string key = "\nsummary: ";
    const size_t at = bytes.find(key);
    if (at == std::string::npos) return bytes;
    const size_t from = at + key.size();
    const size_t end = std::min(bytes.find('\n', from), bytes.size());
    nlohmann::json j = nlohmann::json::parse(bytes.substr(from, end - from), nullptr, false);
    if (!j.is_object()) return bytes;
    erase_run_fields(j);
    return bytes.substr(0, from) + j.dump() + bytes.substr(end);
  }
  return bytes;
}

TEST_F(SlurmTest, TwoRanksOnTwoNodesSucceedAndReportTheirNodes) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "20"}});
  auto created = client().CreateJob(TwoNodeJob(Out("two"), 10, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->resources().ranks(), 2);  // nodes × ranks_per_node
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(120));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->progress().step(), 10);
  EXPECT_TRUE(job->pending_reason().empty()) << job->pending_reason();
  // One Slurm job on both nodes, whose ranks got their numbers from srun.
  const std::vector<std::string> ids = SlurmJobsOf(created->name());
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(Slurm({"squeue", "-h", "--states=all", "-j", ids[0], "-o", "%N"}).out, "n[1-2]\n");
  ExpectPlacementsShowTheSlurmJob(*job, ids[0]);
  const std::string dir = AttemptDir(*daemon_, created->name(), 1);
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/rank-" + std::to_string(r) + ".log");
    const std::string log(std::istreambuf_iterator<char>(in), {});
    EXPECT_NE(log.find("env FP8D_RANK=" + std::to_string(r) + "\n"), std::string::npos) << log;
    EXPECT_NE(log.find("env FP8D_WORLD_SIZE=2\n"), std::string::npos) << log;
  }
}

TEST_F(SlurmTest, WaitingInSlurmsQueueShowsItsReasonAndHoldsNoLocalSlot) {
  // Both nodes taken by a job of someone else: fp8d's job waits in Slurm's queue.
  ProcessResult blocker = Slurm({"sbatch", "--parsable", "-N2", "-o", "/dev/null", "--wrap", "sleep 300"});
  ASSERT_EQ(blocker.exit_code, 0) << blocker.err;
  const std::string blocker_id = blocker.out.substr(0, blocker.out.find_first_of(";\n"));
  ASSERT_TRUE(PollUntil([&] {
    return Slurm({"squeue", "-h", "-j", blocker_id, "-o", "%T"}).out == "RUNNING\n";
  }));
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "20"}});
  // More jobs than the cluster has nodes: fp8d holds none back (Slurm queues them).
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    auto created = client().CreateJob(TestTrainJob(Out("queued" + std::to_string(i)), 3));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    names.push_back(created->name());
  }
  for (const std::string& name : names) {
    ASSERT_TRUE(PollUntil([&] {
      auto j = client().GetJob(name);
      return j.ok() && j->state() == fp8d::v1::STARTING && !j->pending_reason().empty() &&
             j->pending_reason() != "None";
    }, std::chrono::seconds(30))) << name << ": " << client().GetJob(name)->ShortDebugString();
  }
  EXPECT_EQ(client().GetJob(names[0])->pending_reason(), "Resources");
  ASSERT_EQ(Slurm({"scancel", blocker_id}).exit_code, 0);
  for (const std::string& name : names) {
    auto job = WaitTerminal(client(), name, std::chrono::seconds(120));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
    EXPECT_EQ(job->pending_reason(), "");
  }
}

TEST_F(SlurmTest, CancelEndsTheSlurmJobWithinTheGrace) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  auto created = client().CreateJob(TwoNodeJob(Out("cancel"), 100000, 0));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING, std::chrono::seconds(60)).ok());
  ASSERT_FALSE(LiveSlurmJobs().empty());
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = RunProcess({Fp8ctlPath(), "--server", daemon_->address(), "cancel", created->name()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::CANCELLED);
  // The grace is 3 s; Slurm's own steps (polls, epilog) get a few seconds more.
  EXPECT_TRUE(PollUntil([&] { return LiveSlurmJobs().empty(); }, std::chrono::seconds(10))) << LiveSlurmJobs();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(13));
  ProcessResult ps = RunProcess({"/usr/bin/pgrep", "-f", "fp8-test-worker train --spec " + tmp_.path()});
  EXPECT_NE(ps.exit_code, 0) << "workers left: " << ps.out;
}

// The Slurm time limit is the attempt deadline plus the cancel grace in whole minutes, rounded
// up (README "Running on a Slurm cluster"): 58 s + the fixture's 3 s grace = 61 s → 2 minutes,
// a limit that neither the deadline alone nor rounding down gives. A job without a deadline
// asks for no --time and gets the partition's limit (MaxTime=INFINITE on the test cluster).
TEST_F(SlurmTest, TheTimeLimitIsTheAttemptDeadlinePlusTheGrace) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  Job limited = TestTrainJob(Out("limited"), 100000);
  limited.mutable_timeouts()->mutable_attempt_deadline()->set_seconds(58);
  auto a = client().CreateJob(limited);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = client().CreateJob(TestTrainJob(Out("unlimited"), 100000));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(SqueueFieldsOf(a->name(), "%l"), "2:00\n");
  EXPECT_EQ(SqueueFieldsOf(b->name(), "%l"), "UNLIMITED\n");
  CancelAndExpectCancelled({a->name(), b->name()});
}

// Ranks that ignore SIGTERM: fp8ctl cancel's `scancel --signal=TERM` leaves them running, and
// only the SIGKILL fp8d sends once the 3 s grace is over ends the Slurm job: not before the grace
// (the ranks did outlive SIGTERM), within the grace plus Slurm's kill time, no worker left. The
// cancel comes right after the ranks started, as a user's might: before fp8d's next squeue poll.
TEST_F(SlurmTest, CancelOfRanksIgnoringSigtermEndsWithSigkillAfterTheGrace) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}, {"FP8_TEST_MODE", "ignore_sigterm"}});
  auto created = client().CreateJob(TwoNodeJob(Out("ignores-sigterm"), 100000, 0));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING, std::chrono::seconds(60)).ok());
  const std::vector<std::string> ids = SlurmJobsOf(created->name());
  ASSERT_EQ(ids.size(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = RunProcess({Fp8ctlPath(), "--server", daemon_->address(), "cancel", created->name()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Halfway through the grace: fp8d's SIGTERM went to the ranks alone, so the job still runs
  // (Slurm's own cancel would have it COMPLETING, its grace Slurm's KillWait instead of fp8d's).
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(1500));
  EXPECT_EQ(Slurm({"squeue", "-h", "-j", ids[0], "-o", "%T"}).out, "RUNNING\n");
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::CANCELLED);
  EXPECT_TRUE(PollUntil([&] { return LiveSlurmJobs().empty(); }, std::chrono::seconds(10))) << LiveSlurmJobs();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::seconds(3)) << "the ranks ended before the grace: SIGTERM was not ignored";
  // Then Slurm's own end of a killed job: srun waits up to KillWait + 2 = 7 s for the step.
  EXPECT_LT(took, std::chrono::seconds(3 + 7 + 5));
  EXPECT_NE(daemon_->Log().find("after SIGTERM; SIGKILL"), std::string::npos) << "fp8d sent no SIGKILL";
  ProcessResult ps = RunProcess({"/usr/bin/pgrep", "-f", "fp8-test-worker train --spec " + tmp_.path()});
  EXPECT_NE(ps.exit_code, 0) << "workers left: " << ps.out;
}

// fp8d's config file: its `slurm:` section reaches every sbatch (sbatch_args: the comment;
// account, which Slurm records as given with no accounting database to check it; partition,
// though `debug` is the cluster's only one), and a job's resources.slurm fields override it
// (account). The test cluster has no QOS or node features, so qos and constraint stay unset.
TEST_F(SlurmTest, TheConfigsSlurmSectionAndAJobsOverridesReachSbatch) {
  slurm_yaml_extra_ = "  account: fp8d-config-account\n  sbatch_args: [\"--comment=fp8d-config-test\"]\n";
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  auto a = client().CreateJob(TestTrainJob(Out("config"), 100000));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Job override = TestTrainJob(Out("override"), 100000);
  override.mutable_resources()->mutable_slurm()->set_account("fp8d-job-account");
  auto b = client().CreateJob(override);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(SqueueFieldsOf(a->name(), "%k|%P|%a"), "fp8d-config-test|debug|fp8d-config-account\n");
  EXPECT_EQ(SqueueFieldsOf(b->name(), "%k|%P|%a"), "fp8d-config-test|debug|fp8d-job-account\n");
  CancelAndExpectCancelled({a->name(), b->name()});
}

// fp8d runs as root, the job's owner is another user: Slurm runs the ranks as that user
// (sbatch --uid/--gid), as the local launcher does, never as root.
TEST_F(SlurmTest, RanksRunAsTheJobOwnersUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root may submit a Slurm job for another user";
  TestUser user("fp8d-slurm-owner");
  ASSERT_TRUE(user.ok()) << user.error();
  // The owner's ranks reach the cluster's slurm.conf and munge socket (srun), the worker, and
  // write their output under out/.
  fs::permissions(tmp_.path(), fs::perms(0755));
  fs::create_directories(tmp_.path() + "/out");
  ASSERT_EQ(::chown((tmp_.path() + "/out").c_str(), user.uid(), user.gid()), 0);
  StartSlurmDaemon({{"FP8_TEST_MODE", "hang_after_start"}}, TestWorkerPath(), user.name());
  auto created = client().CreateJob(TestTrainJob(Out("owner"), 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING, std::chrono::seconds(60)).ok());
  const std::vector<std::string> ids = SlurmJobsOf(created->name());
  ASSERT_EQ(ids.size(), 1u);
  // Slurm's record of the job, and the worker process itself (the pid of its started event).
  EXPECT_EQ(Slurm({"squeue", "-h", "-j", ids[0], "-o", "%U"}).out, std::to_string(user.uid()) + "\n");
  std::ifstream events(AttemptDir(*daemon_, created->name(), 1) + "/rank-0.events");
  std::string line;
  ASSERT_TRUE(std::getline(events, line));
  fp8d::v1::WorkerEvent started;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &started).ok()) << line;
  ASSERT_TRUE(started.has_started() && started.started().pid() > 0) << line;
  struct stat proc {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(started.started().pid())).c_str(), &proc), 0) << line;
  EXPECT_EQ(proc.st_uid, user.uid());
  EXPECT_EQ(proc.st_gid, user.gid());
  ASSERT_TRUE(client().CancelJob(created->name()).ok());
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::CANCELLED);
  // Nothing of the user's is left running when the user is removed.
  EXPECT_TRUE(PollUntil([&] { return LiveSlurmJobs().empty(); }, std::chrono::seconds(15))) << LiveSlurmJobs();
}

TEST_F(SlurmTest, BadPlacementFailsAtOnceWithSlurmsMessage) {
  StartSlurmDaemon();
  Job unknown = TestTrainJob(Out("bad1"), 5);
  unknown.mutable_resources()->mutable_slurm()->set_partition("nosuch");
  auto a = client().CreateJob(unknown);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Job too_big = TwoNodeJob(Out("bad2"), 5, 0);
  too_big.mutable_resources()->set_nodes(3);
  auto b = client().CreateJob(too_big);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (const auto& [name, expect] : {std::pair{a->name(), std::string("partition")},
                                     std::pair{b->name(), std::string("PartitionConfig")}}) {
    auto job = WaitTerminal(client(), name, std::chrono::seconds(60));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->state(), fp8d::v1::FAILED);
    EXPECT_EQ(job->attempt(), 1) << "a rejected job must not be retried";
    EXPECT_EQ(job->error().failure_class(), fp8d::v1::INVALID_SPEC);
    EXPECT_NE(job->error().message().find(expect), std::string::npos) << job->error().message();
  }
}

TEST_F(SlurmTest, UnreachableSlurmFailsAfterMaxAttempts) {
  // slurm.conf naming a controller port nobody listens on.
  std::string conf;
  {
    std::ifstream in(cluster_dir_ + "/slurm.conf");
    conf.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = conf.find("SlurmctldPort=");
  ASSERT_NE(at, std::string::npos);
  conf.replace(at, conf.find('\n', at) - at, "SlurmctldPort=9");
  std::ofstream(tmp_.path() + "/dead.conf") << conf;
  slurm_env_["SLURM_CONF"] = tmp_.path() + "/dead.conf";
  StartSlurmDaemon();
  slurm_env_["SLURM_CONF"] = cluster_dir_ + "/slurm.conf";  // for TearDown's squeue
  Job spec = TestTrainJob(Out("dead"), 5);
  spec.mutable_retry()->set_max_attempts(2);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(180));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 2);
  EXPECT_NE(job->error().message().find("not reachable"), std::string::npos) << job->error().message();
}

TEST_F(SlurmTest, RestartedFp8dReadoptsTheSlurmJob) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  auto created = client().CreateJob(TwoNodeJob(Out("readopt"), 60, 10));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(PollUntil([&] {
    auto j = client().GetJob(created->name());
    return j.ok() && j->state() == fp8d::v1::RUNNING && j->progress().step() >= 5;
  }));
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  ASSERT_FALSE(LiveSlurmJobs().empty()) << "the Slurm job must outlive fp8d";
  ASSERT_TRUE(daemon_->Start().ok());
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(120));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->progress().step(), 60);
  const std::vector<std::string> ids = SlurmJobsOf(created->name());
  ASSERT_EQ(ids.size(), 1u) << "re-adopted, not submitted again";
  ExpectPlacementsShowTheSlurmJob(*job, ids[0]);
}

TEST_F(SlurmTest, AJobThatEndedWhileFp8dWasDownIsJudgedNotRerun) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  auto created = client().CreateJob(TwoNodeJob(Out("ended"), 30, 10));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING).ok());
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  ASSERT_TRUE(PollUntil([&] { return LiveSlurmJobs().empty(); })) << LiveSlurmJobs();
  ASSERT_TRUE(daemon_->Start().ok());
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->progress().step(), 30);
  EXPECT_EQ(SlurmJobsOf(created->name()).size(), 1u);
}

TEST_F(SlurmTest, AnOrphanedSlurmJobOfAnEarlierAttemptIsCancelled) {
  // Attempt 1 crashes at step 10; meanwhile a Slurm job carrying attempt 1's name appears, as
  // if fp8d had died between an sbatch and storing its id. Attempt 2's launch cancels it.
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}, {"FP8_TEST_MODE", "crash_at_step"},
                    {"FP8_TEST_CRASH_STEP", "10"}, {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"}});
  auto created = client().CreateJob(TestTrainJob(Out("orphan"), 15, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string id = created->name().substr(created->name().find('/') + 1);
  ProcessResult orphan = Slurm({"sbatch", "--parsable", "-N1", "-o", "/dev/null",
                                "--job-name=fp8d-" + id + "-1", "--wrap", "sleep 300"});
  ASSERT_EQ(orphan.exit_code, 0) << orphan.err;
  const std::string orphan_id = orphan.out.substr(0, orphan.out.find_first_of(";\n"));
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(120));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
  EXPECT_EQ(job->attempt(), 2);
  EXPECT_TRUE(PollUntil([&] {
    return Slurm({"squeue", "-h", "--states=all", "-j", orphan_id, "-o", "%T"}).out == "CANCELLED\n";
  }, std::chrono::seconds(10))) << Slurm({"squeue", "--states=all"}).out;
}

TEST_F(SlurmTest, LosingANodeIsRetriedFromTheCheckpoint) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  auto created = client().CreateJob(TwoNodeJob(Out("nodelost"), 400, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(PollUntil([&] {
    auto j = client().GetJob(created->name());
    return j.ok() && j->checkpoint().step() >= 10;
  }));
  // n2's slurmd dies: srun loses the node (the job ends FAILED with n2 not responding) or
  // slurmctld marks it down first (NODE_FAIL); either way the attempt is NODE_LOST.
  ProcessResult kill = RunProcess({"/bin/bash", ClusterScript(), "kill-node", cluster_dir_, "n2"});
  ASSERT_EQ(kill.exit_code, 0) << kill.err;
  ExpectRetriedAfterNodeLoss(created->name(), 400, std::chrono::seconds(90));
}

// fp8d is down while a node of its Slurm job fails and Slurm ends the job: on restart the
// attempt is judged from Slurm's record of the job (scontrol, kept MinJobAge) and the node's
// state, NODE_LOST, and retried from the checkpoint it wrote before the node went.
TEST_F(SlurmTest, ANodeLostWhileFp8dWasDownIsClassifiedAndRetried) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "100"}});
  auto created = client().CreateJob(TwoNodeJob(Out("lostdown"), 200, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(PollUntil([&] {
    auto j = client().GetJob(created->name());
    return j.ok() && j->checkpoint().step() >= 10;
  }));
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  ProcessResult kill = RunProcess({"/bin/bash", ClusterScript(), "kill-node", cluster_dir_, "n2"});
  ASSERT_EQ(kill.exit_code, 0) << kill.err;
  ASSERT_TRUE(PollUntil([&] { return LiveSlurmJobs().empty(); }, std::chrono::seconds(90))) << LiveSlurmJobs();
  ASSERT_TRUE(daemon_->Start().ok());
  const std::optional<Job> full = ExpectRetriedAfterNodeLoss(created->name(), 200, std::chrono::seconds(60));
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->attempts_size(), 2);
  EXPECT_EQ(SlurmJobsOf(created->name()).size(), 2u) << "one Slurm job per attempt, none re-run";
}

// The real fp8-worker: a 2-rank training job on two Slurm nodes (Gloo through the shared
// rendezvous directory) writes the same losses as on the local launcher with 2 ranks, and a
// calibration job's output is byte-identical to the local launcher's.
TEST_F(SlurmTest, RealWorkerOnSlurmMatchesTheLocalLauncher) {
  if (!fs::exists(RealWorkerPath())) GTEST_SKIP() << RealWorkerPath() << " not built";
  const std::string corpus = std::string(FP8D_SOURCE_DIR) + "/data/corpus.txt";
  if (!fs::exists(corpus)) GTEST_SKIP() << corpus << " missing";
  const std::string data = tmp_.path() + "/tokens";
  ProcessResult prep = RunProcess({RealWorkerPath(), "prepare-data", "--text", corpus, "--out", data});
  ASSERT_EQ(prep.exit_code, 0) << prep.err;
  constexpr int kSteps = 6;
  auto train = [&](const std::string& out) {
    Job job = TestTrainJob(out, kSteps, kSteps);
    job.mutable_train()->mutable_data()->set_train(data + "/train_*.bin");
    job.mutable_train()->mutable_training()->set_logging_steps(1);  // every step's loss
    job.mutable_resources()->set_ranks(2);
    return job;
  };
  auto calibrate = [&](const std::string& model, const std::string& out) {
    Job job;
    job.mutable_calibrate()->set_input(model);
    job.mutable_calibrate()->set_output_dir(out);
    job.mutable_calibrate()->set_backend("cpu");
    return job;
  };
  auto run = [](Daemon& d, const Job& spec) -> std::pair<std::string, Job> {
    auto created = d.client().CreateJob(spec);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return {};
    auto job = WaitTerminal(d.client(), created->name(), std::chrono::seconds(600));
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    if (!job.ok()) return {};
    EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message() << d.Log();
    return {created->name(), *job};
  };

  std::vector<std::pair<int64_t, std::string>> local_losses;
  std::string model;
  {
    DaemonOptions options;
    options.worker = RealWorkerPath();
    options.cpu_slots = 2;
    Daemon d(tmp_.path() + "/local-data", options);
    ASSERT_TRUE(d.Start().ok());
    auto [name, job] = run(d, train(Out("local")));
    ASSERT_FALSE(name.empty());
    local_losses = Losses(AttemptDir(d, name, 1) + "/rank-0.events");
    model = job.checkpoint().path() + "/model.safetensors";
    ASSERT_TRUE(fs::exists(model)) << model;
    ASSERT_FALSE(run(d, calibrate(model, Out("calib-local"))).first.empty());
  }
  StartSlurmDaemon({}, RealWorkerPath());
  Job on_slurm = train(Out("slurm"));
  on_slurm.mutable_resources()->set_ranks(0);
  on_slurm.mutable_resources()->set_nodes(2);
  on_slurm.mutable_resources()->set_ranks_per_node(1);
  auto [name, job] = run(*daemon_, on_slurm);
  ASSERT_FALSE(name.empty());
  ASSERT_EQ(local_losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(Losses(AttemptDir(*daemon_, name, 1) + "/rank-0.events"), local_losses);
  ASSERT_FALSE(run(*daemon_, calibrate(model, Out("calib-slurm"))).first.empty());

  // Every file either run wrote (weights, index, config.json, reports, copied files), byte for
  // byte but for the run's own fields in the reports (ComparableCalibrationFile).
  const std::map<std::string, std::string> local_out = ReadTree(Out("calib-local"));
  const std::map<std::string, std::string> slurm_out = ReadTree(Out("calib-slurm"));
  std::string local_names, slurm_names;
  for (const auto& [path, bytes] : local_out) local_names += path + " ";
  for (const auto& [path, bytes] : slurm_out) slurm_names += path + " ";
  EXPECT_EQ(slurm_names, local_names);
  for (const char* expected : {"model.safetensors", "model.safetensors.index.json", "config.json", "report.json",
                               "report.txt"}) {
    EXPECT_TRUE(local_out.count(expected)) << expected << " missing from " << local_names;
  }
  for (const auto& [path, bytes] : local_out) {
    auto other = slurm_out.find(path);
    if (other == slurm_out.end()) continue;
    EXPECT_FALSE(bytes.empty()) << path;
    EXPECT_TRUE(ComparableCalibrationFile(path, bytes) == ComparableCalibrationFile(path, other->second))
        << path << " differs between the launchers";
  }
}

// GPU ranks on Slurm without GPUs: the test cluster's nodes carry 2 `gpu` gres each, backed by
// device files (scripts/slurm-cluster.sh, SLURM_CLUSTER_GPUS), and fp8d runs with `gpus: true`.
class SlurmGpuTest : public SlurmTest {
 protected:
  SlurmGpuTest() {
    cluster_env_ = {{"SLURM_CLUSTER_GPUS", "2"}};  // and 2 CPUs per node
    slurm_yaml_extra_ = "  gpus: true\n";
  }

  // Runs a 2 nodes × 2 ranks job to SUCCEEDED; checks that its Slurm job asked gpu:2 per node
  // and returns, per node, each rank's CUDA_VISIBLE_DEVICES as its log shows it.
  std::map<std::string, std::vector<std::string>> DevicesOfATwoByTwoJob() {
    std::map<std::string, std::vector<std::string>> by_node;
    [&] {
      Job spec = TwoNodeJob(Out("gpu"), 5, 0);
      spec.mutable_resources()->set_ranks_per_node(2);
      auto created = client().CreateJob(spec);
      ASSERT_TRUE(created.ok()) << created.status().ToString();
      EXPECT_EQ(created->resources().ranks(), 4);
      auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(120));
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      ASSERT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->error().message();
      const std::vector<std::string> ids = SlurmJobsOf(created->name());
      ASSERT_EQ(ids.size(), 1u);
      EXPECT_EQ(Slurm({"squeue", "-h", "--states=all", "-j", ids[0], "-o", "%b"}).out, "gres:gpu:2\n");
      const std::string dir = AttemptDir(*daemon_, created->name(), 1);
      for (int r = 0; r < 4; ++r) {
        std::ifstream in(dir + "/rank-" + std::to_string(r) + ".log");
        const std::string log(std::istreambuf_iterator<char>(in), {});
        ASSERT_EQ(LoggedEnv(log, "FP8D_RANK"), std::to_string(r)) << log;
        by_node[LoggedEnv(log, "FP8D_SLURM_NODE")].push_back(LoggedEnv(log, "CUDA_VISIBLE_DEVICES"));
      }
    }();
    return by_node;
  }

  // The value of `env KEY=` in a rank's log, as the test worker prints it ("" if absent).
  static std::string LoggedEnv(const std::string& log, const std::string& key) {
    const std::string tag = "env " + key + "=";
    const size_t at = log.find(tag);
    if (at == std::string::npos) return "";
    const size_t from = at + tag.size();
    return log.substr(from, log.find('\n', from) - from);
  }
};

// Each rank gets one of its node's two gres devices from Slurm (fp8d's srun binds one GPU per
// task), as a local rank gets one GPU.
TEST_F(SlurmGpuTest, RanksAskForGresAndGetOneDeviceEach) {
  StartSlurmDaemon({{"FP8_TEST_STEP_MS", "20"}});
  const auto by_node = DevicesOfATwoByTwoJob();
  using Devices = std::map<std::string, std::vector<std::string>>;
  EXPECT_EQ(by_node, (Devices{{"n1", {"0", "1"}}, {"n2", {"0", "1"}}}));
}

// Nodes of one GPU and two CPUs: 2 ranks per node ask gpu:2, which no node has (their CPUs
// would do); Slurm refuses the job and fp8d fails it at once with Slurm's message.
class SlurmOneGpuTest : public SlurmTest {
 protected:
  SlurmOneGpuTest() {
    cluster_env_ = {{"SLURM_CLUSTER_GPUS", "1"}, {"SLURM_CLUSTER_CPUS", "2"}};
    slurm_yaml_extra_ = "  gpus: true\n";
  }
};

TEST_F(SlurmOneGpuTest, MoreGpusPerNodeThanTheNodesHaveFailsAtOnce) {
  StartSlurmDaemon();
  Job spec = TestTrainJob(Out("toomany"), 5);
  spec.mutable_resources()->set_ranks(0);
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_ranks_per_node(2);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 1) << "a rejected job must not be retried";
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::INVALID_SPEC);
  EXPECT_NE(job->error().message().find("Requested node configuration is not available"), std::string::npos)
      << job->error().message();
}

}  // namespace
}  // namespace fp8d::itest
