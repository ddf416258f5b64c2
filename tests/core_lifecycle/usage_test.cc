// SPDX-License-Identifier: Apache-2.0
// SumUsage (daemon/core/usage.h): the window, running attempts, GPU vs CPU ranks, grouping.
#include "daemon/core/usage.h"

#include <gtest/gtest.h>

namespace fp8d::core {
namespace {

store::AttemptUsage A(std::string owner, std::string queue, int64_t start_s, int64_t end_s, int gpus, int cpus) {
  return store::AttemptUsage{std::move(owner), std::move(queue), start_s * 1000, end_s * 1000, gpus, cpus};
}

TEST(SumUsage, Table) {
  const std::vector<store::AttemptUsage> attempts = {
      A("alice", "team-a", 100, 200, 2, 0),   // 100 s × 2 GPUs
      A("alice", "team-a", 300, 0, 0, 1),     // running: up to now (1000 s)
      A("bob", "", 150, 250, 1, 3),           // queue `default`
      A("bob", "team-a", 0, 0, 4, 0),         // never started: nothing
  };
  struct Case {
    const char* name;
    int64_t since_s;
    std::string by;
    // key, gpu_seconds, cpu_slot_seconds, attempts
    std::vector<std::tuple<std::string, double, double, int64_t>> rows;
  };
  const std::vector<Case> cases = {
      {"all time by owner", 0, "owner", {{"alice", 200, 700, 2}, {"bob", 100, 300, 1}}},
      {"empty by is owner", 0, "", {{"alice", 200, 700, 2}, {"bob", 100, 300, 1}}},
      {"by queue", 0, "queue", {{"default", 100, 300, 1}, {"team-a", 200, 700, 2}}},
      // since 180 s: alice's first counts 20 s, bob's 70 s, the running one all of its 700 s.
      {"a window cuts attempts at its start", 180, "owner", {{"alice", 40, 700, 2}, {"bob", 70, 210, 1}}},
      {"attempts that ended before the window are left out", 260, "owner", {{"alice", 0, 700, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto rows = SumUsage(attempts, c.since_s * 1000, 1'000'000, c.by);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), c.rows.size());
    for (size_t i = 0; i < c.rows.size(); ++i) {
      EXPECT_EQ((*rows)[i].key(), std::get<0>(c.rows[i]));
      EXPECT_DOUBLE_EQ((*rows)[i].gpu_seconds(), std::get<1>(c.rows[i]));
      EXPECT_DOUBLE_EQ((*rows)[i].cpu_slot_seconds(), std::get<2>(c.rows[i]));
      EXPECT_EQ((*rows)[i].attempts(), std::get<3>(c.rows[i]));
    }
  }
  auto bad = SumUsage(attempts, 0, 1'000'000, "team");
  EXPECT_EQ(bad.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "by: must be owner or queue, got 'team'");
}

}  // namespace
}  // namespace fp8d::core
