// SPDX-License-Identifier: Apache-2.0
// The job's owner owns its job folder (jobs/<id>, 0700) and can put anything there; fp8d runs as
// root. For each name fp8d uses in that folder, the owner (a real second user, acting through
// setpriv) plants a symbolic link to a root-owned victim at the moment fp8d would use the name,
// and the victim must come out with its owner, mode and content unchanged, and its content must
// not reach the owner (GetJobLogs) or fp8d's log.
//
// Most attacks target the second attempt: attempt 1 hangs (FP8_TEST_MODE=hang_after_start only
// for attempt 1), the owner prepares attempt-2 with its links, then kills its own worker, and
// fp8d retries into the prepared folder.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"

extern char** environ;

namespace fp8d::itest {
namespace {

namespace fs = std::filesystem;
using fp8d::v1::Job;

constexpr char kSecret[] = "root-only-secret-7f3a9c";

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A root-owned file (0600, known content) or folder (0700 holding one such file) that the
// owner may name in a link but must never get fp8d to change, hand over or read out.
struct Victim {
  std::string path;
  std::string content;
  bool dir = false;
};

class JobFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: only root runs jobs as their owner";
    user_ = std::make_unique<TestUser>("fp8d-jobfolder");
    ASSERT_TRUE(user_->ok()) << user_->error();
    // The owner passes through to its job folder and writes its output under out/; the victims
    // are in a folder only root may enter.
    fs::permissions(tmp_.path(), fs::perms(0755));
    fs::create_directories(Out());
    ASSERT_EQ(::chown(Out().c_str(), user_->uid(), user_->gid()), 0);
    fs::create_directories(Victims());
    fs::permissions(Victims(), fs::perms(0700));
    DaemonOptions options;
    options.run_jobs_as_owner = true;
    options.extra_args = {"--default-user", user_->name()};
    options.env = {{"FP8_TEST_MODE", "hang_after_start"}, {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"}};
    daemon_ = std::make_unique<Daemon>(tmp_.path() + "/data", options);
    const fp8::Status st = daemon_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  void TearDown() override {
    StopRacer();
    daemon_.reset();  // cancels the jobs and kills their workers before the user goes
  }

  std::string Out() const { return tmp_.path() + "/out"; }
  std::string Victims() const { return tmp_.path() + "/victims"; }
  fp8d::client::JobClient& client() { return daemon_->client(); }
  std::string JobDir(const std::string& name) const {
    return daemon_->data_dir() + "/jobs/" + name.substr(std::string("jobs/").size());
  }
  std::string AttemptDir(const std::string& name, int n) const {
    return JobDir(name) + "/attempt-" + std::to_string(n);
  }

  Victim MakeFile(const std::string& name, int lines = 1) {
    Victim v{Victims() + "/" + name, "", false};
    for (int i = 0; i < lines; ++i) v.content += std::string(kSecret) + " line " + std::to_string(i) + "\n";
    std::ofstream(v.path, std::ios::binary) << v.content;
    ::chmod(v.path.c_str(), 0600);
    return v;
  }

  Victim MakeDir(const std::string& name) {
    Victim v{Victims() + "/" + name, std::string(kSecret) + "\n", true};
    fs::create_directories(v.path);
    ::chmod(v.path.c_str(), 0700);
    std::ofstream(v.path + "/keep", std::ios::binary) << v.content;
    ::chmod((v.path + "/keep").c_str(), 0600);
    return v;
  }

  static void ExpectIntact(const Victim& v) {
    struct stat st {};
    ASSERT_EQ(::lstat(v.path.c_str(), &st), 0) << v.path << " is gone";
    EXPECT_EQ(st.st_uid, 0u) << v.path << " was handed to uid " << st.st_uid;
    EXPECT_EQ(st.st_gid, 0u) << v.path;
    EXPECT_EQ(st.st_mode & 07777, v.dir ? 0700u : 0600u) << v.path << " mode changed";
    const std::string file = v.dir ? v.path + "/keep" : v.path;
    EXPECT_EQ(Slurp(file), v.content) << file << " was written";
    if (v.dir) {
      std::set<std::string> names;
      for (const auto& e : fs::directory_iterator(v.path)) names.insert(e.path().filename().string());
      EXPECT_EQ(names, std::set<std::string>{"keep"}) << v.path << " got new entries";
      struct stat keep {};
      ASSERT_EQ(::lstat(file.c_str(), &keep), 0);
      EXPECT_EQ(keep.st_uid, 0u);
      EXPECT_EQ(keep.st_mode & 07777, 0600u);
    }
  }

  // Runs `script` with /bin/sh as the job's owner.
  void AsOwner(const std::string& script) {
    const ProcessResult r = RunProcess({"/usr/bin/setpriv", "--reuid=" + std::to_string(user_->uid()),
                                        "--regid=" + std::to_string(user_->gid()), "--clear-groups",
                                        "/bin/sh", "-ec", script});
    ASSERT_EQ(r.exit_code, 0) << script << ": " << r.err;
  }

  // A job whose first attempt runs (and hangs) as the owner.
  std::string StartJob(const std::string& tag) {
    auto created = client().CreateJob(TestTrainJob(Out() + "/" + tag, 5));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return "";
    auto running = WaitState(client(), created->name(), fp8d::v1::RUNNING);
    EXPECT_TRUE(running.ok()) << running.status().ToString();
    return created->name();
  }

  // The owner kills its own hanging first attempt: a worker crash, retried as attempt 2.
  void KillFirstAttempt(const std::string& name) {
    const std::string pid = Slurp(AttemptDir(name, 1) + "/rank-0.pid");
    ASSERT_FALSE(pid.empty());
    AsOwner("kill -KILL " + pid);
  }

  // Plants with `script` (run as the owner in the job folder) while attempt 1 runs, then lets
  // fp8d retry into attempt 2. Returns the job once it is terminal.
  Job PlantThenRetry(const std::string& tag, const std::string& script) {
    const std::string name = StartJob(tag);
    if (name.empty()) return Job();
    AsOwner("cd " + JobDir(name) + " && " + script);
    KillFirstAttempt(name);
    auto job = WaitTerminal(client(), name);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : Job();
  }

  // A planted link is the owner's doing: the job fails at attempt 2 with a message naming it,
  // and is not retried.
  static void ExpectRefused(const Job& job, const std::string& entry) {
    EXPECT_EQ(job.state(), fp8d::v1::FAILED) << job.ShortDebugString();
    EXPECT_EQ(job.attempt(), 2);
    EXPECT_EQ(job.error().failure_class(), fp8d::v1::INVALID_SPEC);
    EXPECT_NE(job.error().message().find(entry), std::string::npos) << job.error().message();
    EXPECT_NE(job.error().message().find("symbolic link"), std::string::npos) << job.error().message();
  }

  void StartRacer(const std::string& dir, const std::string& name, const std::string& target) {
    std::vector<std::string> args = {JOB_FOLDER_RACER, std::to_string(user_->uid()),
                                     std::to_string(user_->gid()), dir, name, target};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(::posix_spawn(&racer_, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  }

  void StopRacer() {
    if (racer_ <= 0) return;
    ::kill(racer_, SIGKILL);
    int status;
    ::waitpid(racer_, &status, 0);
    racer_ = -1;
  }

  TempDir tmp_;
  std::unique_ptr<TestUser> user_;
  std::unique_ptr<Daemon> daemon_;
  pid_t racer_ = -1;
};

TEST_F(JobFolderTest, PlantedRankLogIsNeitherTruncatedNorHandedOverNorWritten) {
  const Victim v = MakeFile("log");
  const Job job = PlantThenRetry("log", "mkdir attempt-2 && ln -s " + v.path + " attempt-2/rank-0.log");
  ExpectIntact(v);
  ExpectRefused(job, "attempt-2/rank-0.log");
}

TEST_F(JobFolderTest, PlantedEventsFileIsNeitherTruncatedNorHandedOverNorWritten) {
  const Victim v = MakeFile("events");
  const Job job = PlantThenRetry("events", "mkdir attempt-2 && ln -s " + v.path + " attempt-2/rank-0.events");
  ExpectIntact(v);
  ExpectRefused(job, "attempt-2/rank-0.events");
}

// The pid file used to be written by the child while still root.
TEST_F(JobFolderTest, PlantedPidFileIsNotWritten) {
  const Victim v = MakeFile("pid");
  const Job job = PlantThenRetry("pid", "mkdir attempt-2 && ln -s " + v.path + " attempt-2/rank-0.pid");
  ExpectIntact(v);
  ExpectRefused(job, "attempt-2/rank-0.pid");
}

TEST_F(JobFolderTest, PlantedSpecTempFileIsNotWritten) {
  const Victim v = MakeFile("spec-tmp");
  const Job job = PlantThenRetry("spectmp", "mkdir attempt-2 && ln -s " + v.path + " attempt-2/spec.json.tmp");
  ExpectIntact(v);
  ExpectRefused(job, "attempt-2/spec.json.tmp");
}

TEST_F(JobFolderTest, PlantedAttemptFolderLinkIsNotFollowed) {
  const Victim v = MakeDir("attempt");
  const Job job = PlantThenRetry("attempt", "ln -s " + v.path + " attempt-2");
  ExpectIntact(v);
  ExpectRefused(job, "attempt-2");
}

TEST_F(JobFolderTest, PlantedRendezvousLinkIsNotFollowed) {
  const Victim v = MakeDir("rendezvous");
  const Job job = PlantThenRetry("rendezvous", "mkdir attempt-2 && ln -s " + v.path + " attempt-2/rendezvous");
  ExpectIntact(v);
  ExpectRefused(job, "attempt-2/rendezvous");
}

// spec.json itself is renamed into place, so the owner can only swap it for a link after the
// rename and before fp8d hands it over: a racer keeps doing so all through attempt 2's launch.
TEST_F(JobFolderTest, SpecJsonSwappedForALinkDuringLaunchIsNotHandedOver) {
  const Victim v = MakeFile("spec");
  const std::string name = StartJob("spec");
  ASSERT_FALSE(name.empty());
  StartRacer(AttemptDir(name, 2), "spec.json", v.path);
  ASSERT_TRUE(PollUntil([&] { return fs::exists(AttemptDir(name, 2) + "/.racer-link") ||
                                     fs::is_symlink(AttemptDir(name, 2) + "/spec.json"); }));
  KillFirstAttempt(name);
  // Attempt 2 has been launched once fp8d has written its events file (or given up on it).
  ASSERT_TRUE(PollUntil([&] {
    auto job = client().GetJob(name, fp8d::v1::JOB_VIEW_FULL);
    return job.ok() && job->attempt() >= 2 && job->state() != fp8d::v1::STARTING &&
           job->state() != fp8d::v1::RETRY_WAIT && job->state() != fp8d::v1::QUEUED;
  }));
  StopRacer();
  ExpectIntact(v);
}

TEST_F(JobFolderTest, GetJobLogsDoesNotStreamALinkedFile) {
  const Victim v = MakeFile("logs-stream");
  const std::string name = StartJob("stream");
  ASSERT_FALSE(name.empty());
  const std::string dir = AttemptDir(name, 1);
  AsOwner("ln -s " + v.path + " " + dir + "/.l && mv -fT " + dir + "/.l " + dir + "/rank-0.log");
  fp8d::v1::GetJobLogsRequest request;
  request.set_name(name);
  request.set_rank(0);
  request.set_attempt(1);
  std::string got;
  const fp8::Status st = client().GetJobLogs(request, [&](const std::string& data) { got += data; });
  EXPECT_EQ(got.find(kSecret), std::string::npos) << "GetJobLogs returned the victim";
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank-0.log"), std::string::npos) << st.ToString();
  ExpectIntact(v);
  // fp8d is still there to answer.
  EXPECT_TRUE(client().GetJob(name).ok());
}

// A FIFO where the log belongs: opening it for reading would wait for a writer that never
// comes, holding a thread of fp8d (and the call) forever.
TEST_F(JobFolderTest, GetJobLogsOfAFifoAnswersAtOnce) {
  const std::string name = StartJob("fifo");
  ASSERT_FALSE(name.empty());
  const std::string dir = AttemptDir(name, 1);
  AsOwner("mkfifo " + dir + "/.f && mv -fT " + dir + "/.f " + dir + "/rank-0.log");
  fp8d::v1::GetJobLogsRequest request;
  request.set_name(name);
  request.set_rank(0);
  request.set_attempt(1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  auto reader = client().stub()->GetJobLogs(&context, request);
  fp8d::v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
  }
  const grpc::Status st = reader->Finish();
  // A writer, so that a thread stuck opening the FIFO (as fp8d once did) gets free to stop.
  const int fd = ::open((dir + "/rank-0.log").c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
  EXPECT_NE(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << "GetJobLogs hung on the FIFO";
  EXPECT_NE(st.error_message().find("rank-0.log"), std::string::npos) << st.error_message();
}

// After a restart fp8d opens each rank's events file again (by name) to read on from the saved
// offset; lines that are not events go to its log.
TEST_F(JobFolderTest, EventsFileSwappedDuringAnOutageIsNotReadOnRecovery) {
  const Victim v = MakeFile("events-recovery", 2000);  // longer than any saved offset
  const std::string name = StartJob("recovery");
  ASSERT_FALSE(name.empty());
  daemon_->Signal(SIGTERM);
  ASSERT_EQ(daemon_->Wait(), 0);
  const std::string dir = AttemptDir(name, 1);
  AsOwner("ln -s " + v.path + " " + dir + "/.e && mv -fT " + dir + "/.e " + dir + "/rank-0.events");
  const fp8::Status st = daemon_->Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Either the secret is read (and logged as garbage) or the attempt is not re-adopted and the
  // job runs a second attempt, which succeeds.
  EXPECT_TRUE(PollUntil([&] {
    if (daemon_->Log().find(kSecret) != std::string::npos) return true;
    auto job = client().GetJob(name);
    return job.ok() && job->state() == fp8d::v1::SUCCEEDED;
  }));
  EXPECT_EQ(daemon_->Log().find(kSecret), std::string::npos) << "fp8d read the victim as events";
  ExpectIntact(v);
}

// DeleteJob removes the attempt folders: the links in them go, never what they name.
TEST_F(JobFolderTest, DeleteJobRemovesLinksNotWhatTheyName) {
  const Victim file = MakeFile("delete");
  const Victim dir = MakeDir("delete-dir");
  const std::string name = StartJob("delete");
  ASSERT_FALSE(name.empty());
  KillFirstAttempt(name);
  auto job = WaitTerminal(client(), name);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->state(), fp8d::v1::SUCCEEDED);
  const std::string a1 = AttemptDir(name, 1);
  AsOwner("cd " + a1 + " && ln -s " + dir.path + " linked && ln -s " + file.path + " .l && mv -fT .l rank-0.log" +
          " && mkdir sub && ln -s " + dir.path + " sub/deeper && ln -s " + dir.path + "/keep keep");
  ASSERT_TRUE(client().DeleteJob(name).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(a1)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(AttemptDir(name, 2))));
  ExpectIntact(file);
  ExpectIntact(dir);
}

}  // namespace
}  // namespace fp8d::itest
