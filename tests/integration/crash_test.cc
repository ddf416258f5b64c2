// SPDX-License-Identifier: Apache-2.0
// Crash consistency end to end (issue 14): one daemon per data dir and per port; fp8d killed
// at each step of the launch path (failpoints) and restarted; workers that finish or crash
// while the controller is down.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <atomic>
#include <mutex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

using fp8d::v1::Job;

class CrashTest : public DaemonTest {
 protected:
  std::vector<std::string> SecondDaemonArgs(const std::string& listen, const std::string& data_dir) {
    return {Fp8dPath(), "--listen", listen, "--data-dir", data_dir, "--worker", TestWorkerPath(),
            "--gpus", "none", "--cpu-slots", "2"};
  }
  // The first daemon still serves: a job runs to the end.
  void ExpectServing() {
    auto created = client().CreateJob(TestTrainJob(Out("after"), 3));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    auto job = WaitTerminal(client(), created->name());
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED);
  }
};

TEST_F(CrashTest, SecondDaemonOnTheSameDataDirExitsNamingTheHolder) {
  StartDaemon();
  ProcessResult second = RunProcess(SecondDaemonArgs("127.0.0.1:0", daemon_->data_dir()), {},
                                    std::chrono::seconds(60));
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("another fp8d (pid " + std::to_string(daemon_->pid()) + ")"),
            std::string::npos)
      << second.err;
  ExpectServing();
}

TEST_F(CrashTest, SecondDaemonOnTheSamePortExits) {
  StartDaemon();
  ProcessResult second = RunProcess(SecondDaemonArgs(daemon_->address(), tmp_.path() + "/other"),
                                    {}, std::chrono::seconds(60));
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("could not bind"), std::string::npos) << second.err;
  ExpectServing();
}

int FailpointRounds() {
  const char* v = std::getenv("FP8D_FAILPOINT_ROUNDS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 20;
}

class FailpointTest : public CrashTest, public ::testing::WithParamInterface<const char*> {};

// fp8d dies at the failpoint on the first launch of each round; a daemon without it recovers.
// Every job must end SUCCEEDED, each rank must have run each step exactly once (no attempt
// beside another, none re-running finished steps), and only one attempt may have run.
TEST_P(FailpointTest, KilledAtEachLaunchStepEveryJobFinishesOnceWithOneAttemptAlive) {
  const std::string failpoint = GetParam();
  const int rounds = FailpointRounds();
  const std::string data_dir = tmp_.path() + "/data";
  constexpr int kSteps = 8, kRanks = 2;
  std::map<std::string, std::string> env = {{"FP8_TEST_STEP_LOG", "1"},
                                            {"FP8_TEST_STEP_MS", "25"}};
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string out = Out(failpoint + "-" + std::to_string(round));
    std::string name;
    {
      DaemonOptions dying;
      dying.env = env;
      dying.env["FP8D_FAILPOINT"] = failpoint;
      dying.cpu_slots = kRanks;
      daemon_ = std::make_unique<Daemon>(data_dir, dying);
      ASSERT_TRUE(daemon_->Start().ok());
      Job spec = TestTrainJob(out, kSteps, 4);
      spec.mutable_resources()->set_ranks(kRanks);
      auto created = client().CreateJob(spec);
      ASSERT_TRUE(created.ok()) << created.status().ToString();
      name = created->name();
      const int code = daemon_->Wait(std::chrono::seconds(60));
      ASSERT_EQ(code, 99) << "fp8d did not die at " << failpoint << ":\n" << daemon_->Log();
    }
    DaemonOptions healthy;
    healthy.env = env;
    healthy.cpu_slots = kRanks;
    daemon_ = std::make_unique<Daemon>(data_dir, healthy);
    ASSERT_TRUE(daemon_->Start().ok());
    auto job = WaitTerminal(client(), name);
    ASSERT_TRUE(job.ok()) << job.status().ToString() << "\n" << daemon_->Log();
    ASSERT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->DebugString() << daemon_->Log();

    const auto steps = ReadSteps(out + "/steps.log");
    std::set<int> attempts_that_ran;
    std::map<int, std::vector<long>> by_rank;
    for (const StepLine& l : steps) {
      attempts_that_ran.insert(l.attempt);
      by_rank[l.rank].push_back(l.step);
    }
    EXPECT_EQ(attempts_that_ran.size(), 1u) << "more than one attempt ran steps";
    ASSERT_EQ(by_rank.size(), static_cast<size_t>(kRanks));
    for (const auto& [rank, list] : by_rank) {
      std::vector<long> expected;
      for (long s = 1; s <= kSteps; ++s) expected.push_back(s);
      EXPECT_EQ(list, expected) << "rank " << rank << " re-ran or skipped steps";
    }
    if (failpoint == "after_intent") {
      // No worker existed: the intent is requeued without counting an attempt.
      EXPECT_LE(job->attempt(), 2);
    } else {
      EXPECT_EQ(job->attempt(), 1) << "the live workers were not adopted";
    }
    daemon_.reset();  // SIGTERM; the job is terminal, nothing to cancel
  }
}

INSTANTIATE_TEST_SUITE_P(LaunchPath, FailpointTest,
                         ::testing::Values("after_intent", "after_spawn", "after_pid_save",
                                           "after_running_write"),
                         [](const auto& info) { return std::string(info.param); });

// The controller is down for 10 s; the worker finishes meanwhile (its events file ends with
// `done`). Recovery reads the rest of the file: SUCCEEDED on attempt 1, nothing re-run.
TEST_F(CrashTest, WorkerFinishingDuringAnOutageSucceedsOnAttemptOne) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_STEP_MS", "100"}, {"FP8_TEST_STEP_LOG", "1"}};
  StartDaemon(options);
  const std::string out = Out("outage-done");
  auto created = client().CreateJob(TestTrainJob(out, 20, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING).ok());
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  std::this_thread::sleep_for(std::chrono::seconds(10));  // 20 steps x 100 ms end meanwhile
  ASSERT_TRUE(daemon_->Start().ok());
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->DebugString();
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->attempts_size(), 1);
  EXPECT_EQ(job->progress().step(), 20);
  EXPECT_EQ(ReadSteps(out + "/steps.log").size(), 20u) << "steps were re-run";
}

// Rewrites every stored rank runtime of the data dir's DB into what an fp8d before launcher
// handles wrote ("rank pid start_time events_offset" lines). Returns the rows rewritten.
int WriteRuntimeAsBeforeHandles(const std::string& db_path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK) return -1;
  std::vector<std::pair<std::string, std::string>> rows;  // rowid key (job_id|number), runtime
  sqlite3_stmt* read = nullptr;
  sqlite3_prepare_v2(db, "SELECT job_id || '|' || number, runtime FROM attempts", -1, &read, nullptr);
  while (sqlite3_step(read) == SQLITE_ROW) {
    rows.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(read, 0)),
                      reinterpret_cast<const char*>(sqlite3_column_text(read, 1)));
  }
  sqlite3_finalize(read);
  int rewritten = 0;
  for (const auto& [key, runtime] : rows) {
    auto ranks = nlohmann::json::parse(runtime, nullptr, false);
    if (!ranks.is_array()) continue;
    std::string legacy;
    for (const auto& r : ranks) {
      long long pid = 0;
      unsigned long long start = 0;
      if (std::sscanf(r["handle"].get<std::string>().c_str(), "pid:%lld:start:%llu", &pid, &start) != 2) {
        pid = 0;
        start = 0;
      }
      legacy += std::to_string(r["rank"].get<int>()) + " " + std::to_string(pid) + " " +
                std::to_string(start) + " " + std::to_string(r["events_offset"].get<int64_t>()) + "\n";
    }
    sqlite3_stmt* write = nullptr;
    sqlite3_prepare_v2(db, "UPDATE attempts SET runtime = ?1 WHERE job_id || '|' || number = ?2", -1, &write, nullptr);
    sqlite3_bind_text(write, 1, legacy.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(write, 2, key.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(write) == SQLITE_DONE) ++rewritten;
    sqlite3_finalize(write);
  }
  sqlite3_close(db);
  return rewritten;
}

// fp8d is upgraded while a job runs: the new fp8d reads the old fp8d's rank rows (pids, start
// times and offsets, before launcher handles) and adopts the live workers; the job finishes on
// attempt 1 with nothing re-run. (Recovery also finds live workers by their environment, so
// what this pins down end to end is that such rows are read at all; their conversion to local
// handles is checked by the store's conformance test.)
TEST_F(CrashTest, AnUpgradedDaemonAdoptsWorkersFromRowsWrittenBeforeHandles) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_STEP_MS", "100"}, {"FP8_TEST_STEP_LOG", "1"}};
  StartDaemon(options);
  const std::string out = Out("upgrade");
  Job spec = TestTrainJob(out, 40, 10);
  spec.mutable_resources()->set_ranks(2);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(PollUntil([&] {
    auto j = client().GetJob(created->name());
    return j.ok() && j->state() == fp8d::v1::RUNNING && j->progress().step() >= 3;
  }));
  auto before = client().GetJob(created->name(), fp8d::v1::JOB_VIEW_FULL);
  ASSERT_TRUE(before.ok());
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  ASSERT_GE(WriteRuntimeAsBeforeHandles(daemon_->data_dir() + "/fp8d.db"), 1);
  ASSERT_TRUE(daemon_->Start().ok());
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->DebugString();
  EXPECT_EQ(job->attempt(), 1) << "the old fp8d's workers were not adopted";
  EXPECT_EQ(job->progress().step(), 40);
  const auto steps = ReadSteps(out + "/steps.log");
  EXPECT_EQ(steps.size(), 80u) << "steps were re-run";
  for (const StepLine& l : steps) {
    EXPECT_EQ(l.pid, before->attempts(0).ranks(l.rank).pid()) << "rank " << l.rank << " was restarted";
  }
}

// The worker crashes while the controller is down, after its step-5 checkpoint: the next
// attempt resumes from that checkpoint (reported only in the events file the controller
// missed), not from scratch.
TEST_F(CrashTest, WorkerCrashingDuringAnOutageResumesFromItsCheckpoint) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_STEP_MS", "100"}, {"FP8_TEST_MODE", "crash_at_step"},
                 {"FP8_TEST_CRASH_STEP", "8"}, {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"},
                 {"FP8_TEST_STEP_LOG", "1"}};
  StartDaemon(options);
  const std::string out = Out("outage-crash");
  auto created = client().CreateJob(TestTrainJob(out, 12, 5));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(WaitState(client(), created->name(), fp8d::v1::RUNNING).ok());
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  std::this_thread::sleep_for(std::chrono::seconds(10));  // crashes ~0.8 s after its start
  ASSERT_TRUE(daemon_->Start().ok());
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::SUCCEEDED) << job->DebugString();
  ASSERT_EQ(job->attempts_size(), 2) << job->DebugString();
  EXPECT_EQ(job->attempts(0).failure_class(), fp8d::v1::WORKER_CRASH);
  EXPECT_NE(job->attempts(1).resumed_from().find("step-5"), std::string::npos)
      << "resumed from: '" << job->attempts(1).resumed_from() << "'";
  // Attempt 2 ran steps 6..12 only.
  long first_of_2 = -1;
  for (const StepLine& l : ReadSteps(out + "/steps.log")) {
    if (l.attempt == 2 && first_of_2 < 0) first_of_2 = l.step;
  }
  EXPECT_EQ(first_of_2, 6);
}

// Out of memory at the same step in two attempts is permanent: the third attempt that
// max_attempts would allow is not made.
TEST_F(CrashTest, OutOfMemoryTwiceAtTheSameStepIsNotRetriedAgain) {
  DaemonOptions options;
  options.env = {{"FP8_TEST_MODE", "oom"}, {"FP8_TEST_CRASH_STEP", "8"},
                 {"FP8_TEST_STEP_MS", "20"}};
  StartDaemon(options);
  Job spec = TestTrainJob(Out("oom"), 12, 5);
  spec.mutable_retry()->set_max_attempts(3);
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 2) << job->DebugString();
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::RESOURCE_EXHAUSTED);
  ASSERT_EQ(job->attempts_size(), 2);
  EXPECT_EQ(job->attempts(0).failure_step(), 7);
  EXPECT_EQ(job->attempts(1).failure_step(), 7);
}

// An output dir the worker cannot create is a bad spec, found at start: FAILED on attempt 1
// with INVALID_SPEC, instead of three attempts that each fail at their first checkpoint.
TEST_F(CrashTest, UnwritableOutputDirIsInvalidSpecAtStart) {
  if (!std::filesystem::exists(RealWorkerPath())) GTEST_SKIP() << RealWorkerPath() << " not built";
  const std::string corpus = std::string(FP8D_SOURCE_DIR) + "/data/corpus.txt";
  const std::string data = tmp_.path() + "/tokens";
  ProcessResult prep = RunProcess({RealWorkerPath(), "prepare-data", "--text", corpus, "--out", data});
  ASSERT_EQ(prep.exit_code, 0) << prep.err;
  std::filesystem::create_directories(tmp_.path() + "/out");
  { std::ofstream(tmp_.path() + "/out/a-file") << "not a directory"; }

  DaemonOptions options;
  options.worker = RealWorkerPath();
  options.cpu_slots = 1;
  StartDaemon(options);
  Job spec = TestTrainJob(tmp_.path() + "/out/a-file/run", 20, 10);
  spec.mutable_train()->mutable_data()->set_train(data + "/train_*.bin");
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto job = WaitTerminal(client(), created->name(), std::chrono::seconds(300));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state(), fp8d::v1::FAILED);
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->error().failure_class(), fp8d::v1::INVALID_SPEC);
  // Reported by the worker (rank 0), not refused by the controller.
  EXPECT_NE(job->error().message().find("rank 0: output_dir: cannot create"), std::string::npos)
      << job->error().message();
}

// Records every version a WatchJob stream delivers, on a thread of its own.
class Watcher {
 public:
  Watcher(Daemon& daemon, std::string name)
      : daemon_(daemon), thread_([this, name] {
          (void)daemon_.client().WatchJob(name, 0, [this](const Job& job) {
            std::lock_guard<std::mutex> lock(mu_);
            seen_.emplace_back(job.version(), job.state());
            return true;
          });
          ended_ = true;
        }) {}
  ~Watcher() {
    // A test that stopped early: end the stream the way a daemon shutdown does (its workers
    // finish on their own within seconds).
    if (!ended_) daemon_.Signal(SIGTERM);
    Join();
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::vector<std::pair<int64_t, fp8d::v1::JobState>> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  bool Saw(fp8d::v1::JobState state) {
    for (const auto& [v, s] : Seen()) {
      if (s == state) return true;
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<int64_t, fp8d::v1::JobState>> seen_;
  Daemon& daemon_;
  std::atomic<bool> ended_{false};
  std::thread thread_;
};

// Every state a watcher saw is the state the job's durable history has at that version.
void ExpectHistoryAgrees(const Job& final_job, const std::vector<std::pair<int64_t, fp8d::v1::JobState>>& seen) {
  for (const auto& [version, state] : seen) {
    fp8d::v1::JobState durable = fp8d::v1::JOB_STATE_UNSPECIFIED;
    for (const auto& e : final_job.events()) {
      if (e.version() <= version) durable = e.to_state();
    }
    EXPECT_EQ(durable, state) << final_job.name() << " v" << version << ": a watcher saw "
                              << fp8d::v1::JobState_Name(state) << ", the store says "
                              << fp8d::v1::JobState_Name(durable);
  }
}

// Fills the file system at `dir` until a write fails with ENOSPC; returns the filler's path.
std::string FillUp(const std::string& dir) {
  const std::string path = dir + "/filler";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  std::string chunk(64 * 1024, 'x');
  while (fd >= 0) {
    if (::write(fd, chunk.data(), chunk.size()) < static_cast<ssize_t>(chunk.size())) {
      if (chunk.size() == 1) break;
      chunk.resize(chunk.size() / 2);
    }
  }
  if (fd >= 0) ::close(fd);
  return path;
}

// A data dir on an 8 MB tmpfs, so only the database runs out of space: jobs/ and the log are
// symlinked to `root`, which has room. Unmounted when destroyed.
struct SmallStore {
  std::string mnt;
  std::string data_dir;
  ~SmallStore() { ::umount2(mnt.c_str(), MNT_DETACH); }

  static std::unique_ptr<SmallStore> Mount(const std::string& root, std::string* why_not) {
    if (::geteuid() != 0) {
      *why_not = "mounting a tmpfs needs root";
      return nullptr;
    }
    const std::string mnt = root + "/small";
    std::filesystem::create_directories(mnt);
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=8m") != 0) {
      *why_not = std::string("cannot mount a tmpfs here: ") + std::strerror(errno);
      return nullptr;
    }
    auto store = std::make_unique<SmallStore>();
    store->mnt = mnt;
    store->data_dir = mnt + "/data";
    std::filesystem::create_directories(store->data_dir);
    std::filesystem::create_directories(root + "/jobs");
    std::filesystem::create_symlink(root + "/jobs", store->data_dir + "/jobs");
    { std::ofstream touch(root + "/fp8d.log"); }
    std::filesystem::create_symlink(root + "/fp8d.log", store->data_dir + "/fp8d.log");
    return store;
  }
};

// ENOSPC on the store (the data dir on a small tmpfs; jobs/ and the log elsewhere, so only the
// database runs out of space). While the disk is full: job A finishes (RUNNING → SUCCEEDED),
// job B's ranks report `started` (STARTING → RUNNING) and then finish, and A's slot goes to
// job C (QUEUED → STARTING, the launch intent). None of these writes commits. Watchers must
// not see those states, GetJob keeps the durable ones, C's workers must not start, and once
// space returns everything converges.
TEST_F(CrashTest, StoreOutOfSpaceAtTransitionsPublishesOnlyWhatIsDurable) {
  std::string why_not;
  std::unique_ptr<SmallStore> store = SmallStore::Mount(tmp_.path(), &why_not);
  if (store == nullptr) GTEST_SKIP() << why_not;
  const std::string& data_dir = store->data_dir;

  DaemonOptions options;
  options.cpu_slots = 2;
  // Every worker sleeps 1.5 s before `started`: time to fill the disk after B's launch.
  options.env = {{"FP8_TEST_STEP_MS", "50"}, {"FP8_TEST_STEP_LOG", "1"},
                 {"FP8_TEST_START_DELAY_MS", "1500"}};
  daemon_ = std::make_unique<Daemon>(data_dir, options);
  ASSERT_TRUE(daemon_->Start().ok());

  auto a = client().CreateJob(TestTrainJob(Out("a"), 30));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(WaitState(client(), a->name(), fp8d::v1::RUNNING).ok());
  auto b = client().CreateJob(TestTrainJob(Out("b"), 5));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto c = client().CreateJob(TestTrainJob(Out("c"), 5));  // queued: both slots are taken
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string b_events =
      tmp_.path() + "/jobs/" + b->name().substr(5) + "/attempt-1/rank-0.events";
  ASSERT_TRUE(PollUntil([&] { return std::filesystem::exists(b_events); }));
  Watcher watch_a(*daemon_, a->name());
  Watcher watch_b(*daemon_, b->name());
  Watcher watch_c(*daemon_, c->name());
  const std::string filler = FillUp(store->mnt);
  ASSERT_TRUE(PollUntil([&] { return watch_b.Saw(fp8d::v1::STARTING); }));
  // No write can commit, and nothing new was published: B's `started` is still to come.
  EXPECT_FALSE(watch_b.Saw(fp8d::v1::RUNNING)) << "B's RUNNING was durable before the disk filled";

  // The workers' events go to jobs/, on another disk: A and B run to their end.
  ASSERT_TRUE(PollUntil([&] { return ReadSteps(Out("a") + "/steps.log").size() == 30; }));
  ASSERT_TRUE(PollUntil([&] { return ReadSteps(Out("b") + "/steps.log").size() == 5; }));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto get_a = client().GetJob(a->name());
  auto get_b = client().GetJob(b->name());
  auto get_c = client().GetJob(c->name());
  ASSERT_TRUE(get_a.ok() && get_b.ok() && get_c.ok());
  EXPECT_EQ(get_a->state(), fp8d::v1::RUNNING);
  EXPECT_EQ(get_b->state(), fp8d::v1::STARTING);
  EXPECT_EQ(get_c->state(), fp8d::v1::QUEUED);
  EXPECT_FALSE(watch_a.Saw(fp8d::v1::SUCCEEDED));
  EXPECT_FALSE(watch_b.Saw(fp8d::v1::RUNNING));
  EXPECT_FALSE(watch_c.Saw(fp8d::v1::STARTING));
  EXPECT_FALSE(std::filesystem::exists(Out("c") + "/steps.log")) << "C launched on an intent not durable";
  auto cancel = client().CancelJob(a->name());
  EXPECT_EQ(cancel.status().code(), fp8::StatusCode::kUnavailable) << cancel.status().ToString();
  EXPECT_NE(daemon_->Log().find("persisting version"), std::string::npos)
      << "the store never failed a write: the test did not exercise ENOSPC";

  std::filesystem::remove(filler);  // space returns
  for (const auto& job : {a, b, c}) {
    auto final_job = WaitTerminal(client(), job->name());
    ASSERT_TRUE(final_job.ok()) << final_job.status().ToString();
    EXPECT_EQ(final_job->state(), fp8d::v1::SUCCEEDED) << job->name();
    EXPECT_EQ(final_job->attempt(), 1) << job->name();
  }
  for (auto* w : {&watch_a, &watch_b, &watch_c}) w->Join();
  ExpectHistoryAgrees(*WaitTerminal(client(), a->name()), watch_a.Seen());
  ExpectHistoryAgrees(*WaitTerminal(client(), b->name()), watch_b.Seen());
  ExpectHistoryAgrees(*WaitTerminal(client(), c->name()), watch_c.Seen());
  EXPECT_TRUE(watch_a.Saw(fp8d::v1::SUCCEEDED));
  EXPECT_TRUE(watch_b.Saw(fp8d::v1::RUNNING));
  EXPECT_TRUE(watch_c.Saw(fp8d::v1::SUCCEEDED));
  daemon_.reset();  // before the tmpfs goes
}

// ENOSPC on the store at each failure transition, one case per transition (the data dir on a
// small tmpfs, as above). The disk fills just before the transition; while it is full the
// transition's write fails and is retried: GetJob keeps the last durable state, no watcher sees
// the new one, CancelJob answers UNAVAILABLE, and nothing that depends on it happens (no next
// attempt, no signal). Once space returns the job converges to its terminal state, with failed
// writes not counted as attempts.
struct FullStoreCase {
  const char* name;
  std::map<std::string, std::string> env;  // the test worker's fault mode
  fp8d::v1::JobState durable;              // what GetJob says while the disk is full
  fp8d::v1::JobState held_back;            // the transition whose write fails
  fp8d::v1::JobState terminal;
  int attempts;
};

const FullStoreCase kFullStoreCases[] = {
    // A retryable worker crash (SIGKILL at step 30 of attempt 1): RUNNING → RETRY_WAIT.
    {"running_to_retry_wait",
     {{"FP8_TEST_MODE", "crash_at_step"}, {"FP8_TEST_CRASH_STEP", "30"},
      {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"}},
     fp8d::v1::RUNNING, fp8d::v1::RETRY_WAIT, fp8d::v1::SUCCEEDED, 2},
    // The same crash at step 3; the disk fills during the 3 s backoff: RETRY_WAIT → QUEUED.
    {"retry_wait_to_queued",
     {{"FP8_TEST_MODE", "crash_at_step"}, {"FP8_TEST_CRASH_STEP", "3"},
      {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"}},
     fp8d::v1::RETRY_WAIT, fp8d::v1::QUEUED, fp8d::v1::SUCCEEDED, 2},
    // A permanent failure (exit 64: INVALID_SPEC at step 30): RUNNING → FAILED.
    {"running_to_failed",
     {{"FP8_TEST_MODE", "exit_code"}, {"FP8_TEST_EXIT_CODE", "64"}, {"FP8_TEST_CRASH_STEP", "30"}},
     fp8d::v1::RUNNING, fp8d::v1::FAILED, fp8d::v1::FAILED, 1},
    // CancelJob with the disk already full: RUNNING → CANCELLING.
    {"cancel_requested", {}, fp8d::v1::RUNNING, fp8d::v1::CANCELLING, fp8d::v1::CANCELLED, 1},
    // The disk fills once CANCELLING is durable; the worker ignores SIGTERM and is SIGKILLed
    // after the 1.5 s grace: CANCELLING → CANCELLED.
    {"cancelling_to_cancelled", {{"FP8_TEST_MODE", "ignore_sigterm"}}, fp8d::v1::CANCELLING,
     fp8d::v1::CANCELLED, fp8d::v1::CANCELLED, 1},
};

class FullStoreTest : public CrashTest, public ::testing::WithParamInterface<FullStoreCase> {};

void PrintTo(const FullStoreCase& c, std::ostream* os) { *os << c.name; }

// The other states a watcher saw after its first sighting of `state` (progress updates repeat
// a state; they are not counted).
std::vector<fp8d::v1::JobState> SeenAfter(const std::vector<std::pair<int64_t, fp8d::v1::JobState>>& seen,
                                          fp8d::v1::JobState state) {
  std::vector<fp8d::v1::JobState> out;
  bool after = false;
  for (const auto& [v, s] : seen) {
    if (after && s != state) out.push_back(s);
    after = after || s == state;
  }
  return out;
}

TEST_P(FullStoreTest, TheFailedTransitionIsNeitherPublishedNorCountedAndConvergesOnceSpaceReturns) {
  const FullStoreCase& c = GetParam();
  std::string why_not;
  std::unique_ptr<SmallStore> store = SmallStore::Mount(tmp_.path(), &why_not);
  if (store == nullptr) GTEST_SKIP() << why_not;
  const std::string& data_dir = store->data_dir;

  DaemonOptions options;
  options.cpu_slots = 1;
  options.env = c.env;
  options.env["FP8_TEST_STEP_MS"] = "50";
  options.env["FP8_TEST_STEP_LOG"] = "1";
  daemon_ = std::make_unique<Daemon>(data_dir, options);
  ASSERT_TRUE(daemon_->Start().ok());

  const std::string name = std::string(c.name);
  // A cancelled job must still be stepping when the cancel lands (10 s); the others need 40
  // steps (2 s), past the fault at step 30.
  const bool cancelled = c.terminal == fp8d::v1::CANCELLED;
  Job spec = TestTrainJob(Out(name), cancelled ? 200 : 40);
  if (c.durable == fp8d::v1::RETRY_WAIT) {
    spec.mutable_retry()->mutable_initial_backoff()->set_seconds(3);
    spec.mutable_retry()->mutable_initial_backoff()->set_nanos(0);
    spec.mutable_retry()->mutable_max_backoff()->set_seconds(3);
  }
  auto created = client().CreateJob(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Watcher watch(*daemon_, created->name());
  const std::string steps = Out(name) + "/steps.log";
  auto attempt_ran = [&](int attempt, long step) {
    for (const StepLine& l : ReadSteps(steps)) {
      if (l.attempt == attempt && l.step >= step) return true;
    }
    return false;
  };

  std::future<fp8::StatusOr<Job>> first_cancel;
  struct Filler {  // space returns on any early exit too, so the daemon can stop cleanly
    std::string path;
    ~Filler() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove(path, ignored);
    }
  } filler_file;
  std::string& filler = filler_file.path;
  if (c.held_back == fp8d::v1::QUEUED) {
    ASSERT_TRUE(PollUntil([&] { return watch.Saw(fp8d::v1::RETRY_WAIT); }));
    filler = FillUp(store->mnt);
  } else if (c.held_back == fp8d::v1::CANCELLING) {
    ASSERT_TRUE(PollUntil([&] { return watch.Saw(fp8d::v1::RUNNING) && attempt_ran(1, 2); }));
    filler = FillUp(store->mnt);
    // Answered only once CANCELLING is durable, i.e. after space returns.
    first_cancel = std::async(std::launch::async, [&] { return client().CancelJob(created->name()); });
  } else if (c.held_back == fp8d::v1::CANCELLED) {
    ASSERT_TRUE(PollUntil([&] { return watch.Saw(fp8d::v1::RUNNING) && attempt_ran(1, 2); }));
    auto cancel = client().CancelJob(created->name());
    ASSERT_TRUE(cancel.ok()) << cancel.status().ToString();
    filler = FillUp(store->mnt);
    ASSERT_EQ(cancel->state(), fp8d::v1::CANCELLING);
  } else {
    ASSERT_TRUE(PollUntil([&] { return watch.Saw(fp8d::v1::RUNNING); }));
    filler = FillUp(store->mnt);
  }

  // Wait until the transition is made in memory and its write has failed; a little longer,
  // while the write is retried.
  const std::string transition = fp8d::v1::JobState_Name(c.durable) + " -> " +
                                 fp8d::v1::JobState_Name(c.held_back);
  ASSERT_TRUE(PollUntil([&] {
    const std::string log = daemon_->Log();
    const size_t at = log.find(transition);
    return at != std::string::npos && log.find("persisting version", at) != std::string::npos;
  })) << transition << " was never refused by the store: the test did not exercise ENOSPC";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<std::pair<int64_t, fp8d::v1::JobState>> got;  // GetJob's answers while full
  auto get = client().GetJob(created->name());
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  got.emplace_back(get->version(), get->state());
  EXPECT_EQ(get->state(), c.durable) << fp8d::v1::JobState_Name(get->state());
  EXPECT_EQ(get->attempt(), 1);
  EXPECT_EQ(SeenAfter(watch.Seen(), c.durable), std::vector<fp8d::v1::JobState>{})
      << "a watcher saw a state after " << fp8d::v1::JobState_Name(c.durable)
      << " whose write had failed";
  EXPECT_FALSE(watch.Saw(c.held_back) && c.held_back != fp8d::v1::QUEUED);
  auto cancel = client().CancelJob(created->name());
  EXPECT_EQ(cancel.status().code(), fp8::StatusCode::kUnavailable) << cancel.status().ToString();
  EXPECT_NE(cancel.status().message().find("cannot be written to the store"), std::string::npos)
      << cancel.status().ToString();
  EXPECT_FALSE(attempt_ran(2, 1)) << "attempt 2 started on a transition that was not durable";
  if (c.held_back == fp8d::v1::CANCELLING) {
    // No signal before CANCELLING is durable: the worker still steps.
    const size_t before = ReadSteps(steps).size();
    EXPECT_TRUE(PollUntil([&] { return ReadSteps(steps).size() > before; }));
  }
  get = client().GetJob(created->name());
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  got.emplace_back(get->version(), get->state());

  std::filesystem::remove(filler);  // space returns
  filler.clear();
  auto final_job = WaitTerminal(client(), created->name());
  ASSERT_TRUE(final_job.ok()) << final_job.status().ToString();
  EXPECT_EQ(final_job->state(), c.terminal) << fp8d::v1::JobState_Name(final_job->state());
  EXPECT_EQ(final_job->attempt(), c.attempts);
  if (c.terminal == fp8d::v1::FAILED) {
    EXPECT_EQ(final_job->error().failure_class(), fp8d::v1::INVALID_SPEC);
  }
  if (first_cancel.valid()) {
    auto answered = first_cancel.get();
    ASSERT_TRUE(answered.ok()) << answered.status().ToString();
    EXPECT_TRUE(answered->state() == fp8d::v1::CANCELLING || answered->state() == fp8d::v1::CANCELLED)
        << fp8d::v1::JobState_Name(answered->state());
  }
  watch.Join();
  // Every transition was stored once, in order, and is what watchers and GetJob said.
  int held_back_events = 0;
  for (const auto& e : final_job->events()) {
    held_back_events += e.from_state() == c.durable && e.to_state() == c.held_back;
  }
  EXPECT_EQ(held_back_events, 1);
  ExpectHistoryAgrees(*final_job, watch.Seen());
  ExpectHistoryAgrees(*final_job, got);
  EXPECT_TRUE(watch.Saw(c.held_back));
  EXPECT_TRUE(watch.Saw(c.terminal));
  for (size_t i = 1; i < watch.Seen().size(); ++i) {
    EXPECT_LT(watch.Seen()[i - 1].first, watch.Seen()[i].first) << "versions out of order";
  }
  daemon_.reset();  // before the tmpfs goes
}

INSTANTIATE_TEST_SUITE_P(StoreOutOfSpace, FullStoreTest, ::testing::ValuesIn(kFullStoreCases),
                         [](const ::testing::TestParamInfo<FullStoreCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace fp8d::itest
