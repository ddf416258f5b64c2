// SPDX-License-Identifier: Apache-2.0
// Process identity through /proc, environment merging and slot inventory.
#include "daemon/launcher/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "daemon/launcher/beneath_dir.h"
#include "daemon/launcher/local_handle.h"
#include "daemon/launcher/slots.h"
#include "tests/launcher/launcher_test_util.h"

namespace fp8d::launcher {
namespace {

TEST(ProcessTest, MatchesItselfOnlyWithItsOwnStartTime) {
  int64_t self = ::getpid();
  uint64_t start = ProcessStartTime(self);
  ASSERT_GT(start, 0u);
  EXPECT_TRUE(ProcessMatches(self, start));
  EXPECT_FALSE(ProcessMatches(self, start + 1));  // what a reused pid looks like
  EXPECT_FALSE(ProcessMatches(0, start));
  EXPECT_EQ(ProcessStartTime(-1), 0u);
}

TEST(LocalHandleTest, RoundTripsPidAndStartTimeAndRefusesOtherHandles) {
  EXPECT_EQ(LocalHandle(1234, 98765), "pid:1234:start:98765");
  auto id = ParseLocalHandle(LocalHandle(1234, 98765));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->pid, 1234);
  EXPECT_EQ(id->start_time, 98765u);
  EXPECT_EQ(LocalHandle(0, 5), "") << "no process, no handle";
  for (const char* other : {"", "slurm:12", "pid:0:start:5", "pid:12", "pid:12:start:5x", "pid:-4:start:5"}) {
    EXPECT_FALSE(ParseLocalHandle(other).has_value()) << other;
  }
}

TEST(ProcessTest, ZombieDoesNotMatch) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  uint64_t start = ProcessStartTime(child);
  ASSERT_GT(start, 0u);
  // Not reaped yet: it turns into a zombie, which is gone for the launcher's purposes.
  EXPECT_TRUE(testing::PollUntil([&] { return !ProcessMatches(child, start); }));
  EXPECT_TRUE(ReadProcStat(child).zombie);
  int st;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  EXPECT_FALSE(ReadProcStat(child).exists);
}

TEST(ProcessTest, MergeEnvironmentOverridesAndAdds) {
  const char* base[] = {"PATH=/bin", "FP8D_RANK=9", "HOME=/root", nullptr};
  auto env = MergeEnvironment(const_cast<char**>(base), {{"FP8D_RANK", "1"}, {"NEW", ""}});
  EXPECT_EQ(env, (std::vector<std::string>{"FP8D_RANK=1", "HOME=/root", "NEW=", "PATH=/bin"}));
}

TEST(ProcessTest, SpawnOfAMissingProgramFails) {
  SpawnRequest req;
  req.argv = {"/nonexistent/fp8-worker-xyz", "train"};
  UniqueFd devnull(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  ASSERT_GE(devnull.get(), 0);
  req.stdout_fd = devnull.get();
  req.stderr_fd = devnull.get();
  auto pid = SpawnInOwnSession(req);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("/nonexistent/fp8-worker-xyz"), std::string::npos);
}

TEST(SlotsTest, ParsesNvidiaSmiList) {
  std::string out =
      "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
      "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
      "  MIG 1g.10gb Device 0: (UUID: MIG-3)\n";
  EXPECT_EQ(ParseNvidiaSmiList(out), (std::vector<int>{0, 1}));
  EXPECT_TRUE(ParseNvidiaSmiList("No devices were found\n").empty());
}

TEST(SlotsTest, ConfiguredGpusWin) {
  LocalLauncherOptions o;
  o.node_name = "n1";
  o.gpus = {2, 5};
  auto slots = ComputeSlots(o);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].node, "n1");
  EXPECT_EQ(slots[0].gpu, 2);
  EXPECT_EQ(slots[1].gpu, 5);
}

TEST(SlotsTest, CpuSlotsWithoutGpus) {
  LocalLauncherOptions o;
  o.detect_gpus = false;
  o.cpu_slots = 3;
  auto slots = ComputeSlots(o);
  ASSERT_EQ(slots.size(), 3u);
  for (const auto& s : slots) {
    EXPECT_EQ(s.gpu, -1);
    EXPECT_EQ(s.node, LocalHostname());
  }
  o.cpu_slots = 0;  // default: one per core, at least one
  EXPECT_GE(ComputeSlots(o).size(), 1u);
}

// A worker running as another uid has an environ fp8d may not read (no CAP_SYS_PTRACE under the
// hardened unit): the pid file its child wrote before dropping to that uid names its rank.
TEST(ProcessTest, WorkerOfAnotherUidIsFoundByItsPidFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  const std::string dir = testing::MakeTempDir();
  SpawnRequest spawn;
  spawn.argv = {"/bin/sh", "-c", "sleep 30", "sh", "--spec", dir + "/spec.json"};
  spawn.env = {"PATH=/usr/bin:/bin"};
  fp8::StatusOr<BeneathDir> folder = BeneathDir::OpenTrusted(dir, false);
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  fp8::StatusOr<UniqueFd> events = folder->CreateFile("rank-2.events", O_WRONLY | O_APPEND);
  fp8::StatusOr<UniqueFd> log = folder->CreateFile("rank-2.log", O_WRONLY | O_APPEND);
  fp8::StatusOr<UniqueFd> pid_file = folder->CreateFile("rank-2.pid", O_WRONLY);
  ASSERT_TRUE(events.ok() && log.ok() && pid_file.ok());
  spawn.stdout_fd = events->get();
  spawn.stderr_fd = log->get();
  spawn.uid = 65534;  // nobody
  spawn.gid = 65534;
  spawn.pid_fd = pid_file->get();
  const std::string pid_path = dir + "/rank-2.pid";
  fp8::StatusOr<int64_t> pid = SpawnAsUser(spawn);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  std::string found_dir;
  EXPECT_EQ(FindRankByPidFile(*pid, &found_dir), 2);
  EXPECT_EQ(found_dir, dir);
  // A pid file naming another process does not make this one a rank.
  FILE* f = std::fopen(pid_path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
  std::fclose(f);
  EXPECT_EQ(FindRankByPidFile(*pid, &found_dir), -1);
  EXPECT_EQ(FindRankByPidFile(::getpid(), &found_dir), -1);  // no --spec in its command line
  ::kill(-static_cast<pid_t>(*pid), SIGKILL);
  int status;
  ::waitpid(static_cast<pid_t>(*pid), &status, 0);
}

}  // namespace
}  // namespace fp8d::launcher
