// Process identity through /proc, environment merging and slot inventory.
#include "daemon/agent/process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "daemon/agent/slots.h"
#include "tests/agent/agent_test_util.h"

namespace fp8d::agent {
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

TEST(ProcessTest, ZombieDoesNotMatch) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  uint64_t start = ProcessStartTime(child);
  ASSERT_GT(start, 0u);
  // Not reaped yet: it turns into a zombie, which is gone for the agent's purposes.
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
  req.stdout_path = "/dev/null";
  req.stderr_path = "/dev/null";
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
  LocalAgentOptions o;
  o.node_name = "n1";
  o.gpus = {2, 5};
  auto slots = ComputeSlots(o);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].node, "n1");
  EXPECT_EQ(slots[0].gpu, 2);
  EXPECT_EQ(slots[1].gpu, 5);
}

TEST(SlotsTest, CpuSlotsWithoutGpus) {
  LocalAgentOptions o;
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

}  // namespace
}  // namespace fp8d::agent
