// SPDX-License-Identifier: Apache-2.0
// Table-driven scenarios for the scheduler: a cluster written as "node:gpu" slots (a leading
// '*' marks a busy one, gpu -1 a CPU slot), a queue, and the plan expected back.
#include "daemon/core/scheduler.h"

#include <cctype>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

namespace fp8d::core {
namespace {

struct Scenario {
  const char* title;
  std::vector<std::string> slots;  // "n1:0", "*n1:1" (busy), "n2:-1" (CPU)
  std::vector<QueuedJob> queue;
  // Expected: each assignment as "job=n1:0,n1:1"; unschedulable job names; blocked_by.
  std::vector<std::string> assignments;
  std::vector<std::string> unschedulable;
  std::string blocked_by;
};

ScheduleInput Input(const Scenario& s) {
  ScheduleInput in;
  for (const std::string& text : s.slots) {
    ClusterSlot slot;
    std::string t = text;
    if (!t.empty() && t[0] == '*') {
      slot.free = false;
      t = t.substr(1);
    }
    const size_t colon = t.find(':');
    slot.slot.node = t.substr(0, colon);
    slot.slot.gpu = std::stoi(t.substr(colon + 1));
    in.slots.push_back(slot);
  }
  in.queue = s.queue;
  return in;
}

std::string Render(const Assignment& a) {
  std::ostringstream out;
  out << a.name << "=";
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    out << (r ? "," : "") << a.ranks[r].node << ":" << a.ranks[r].gpu;
  }
  return out.str();
}

QueuedJob J(const char* name, int32_t ranks, int32_t priority = 0, int64_t seq = 0) {
  return QueuedJob{name, priority, seq, ranks};
}

const Scenario kScenarios[] = {
    {"empty queue", {"n1:0", "n1:1"}, {}, {}, {}, ""},
    {"FIFO among equal priorities",
     {"n1:0", "n1:1"},
     {J("b", 1, 0, 2), J("a", 1, 0, 1), J("c", 1, 0, 3)},
     {"a=n1:0", "b=n1:1"},
     {},
     "c"},
    {"higher priority first, regardless of age",
     {"n1:0"},
     {J("old", 1, 0, 1), J("urgent", 1, 5, 9)},
     {"urgent=n1:0"},
     {},
     "old"},
    {"gang: all ranks or none; no backfill past the blocked job",
     {"n1:0", "n1:1", "n1:2", "*n1:3"},
     {J("big", 4, 0, 1), J("small", 1, 0, 2)},
     {},
     {},
     "big"},
    {"a job that can never fit does not block the queue",
     {"n1:0", "n1:1"},
     {J("huge", 3, 9, 1), J("ok", 2, 0, 2)},
     {"ok=n1:0,n1:1"},
     {"huge"},
     ""},
    {"never-fit jobs are reported even behind a blocked job",
     {"*n1:0", "n1:1"},
     {J("wait", 2, 0, 1), J("huge", 5, 0, 2), J("small", 1, 0, 3)},
     {},
     {"huge"},
     "wait"},
    {"zero ranks is unschedulable, not a crash",
     {"n1:0"},
     {J("zero", 0, 0, 1), J("one", 1, 0, 2)},
     {"one=n1:0"},
     {"zero"},
     ""},
    {"pack on one node: the tightest node that fits",
     {"n1:0", "n1:1", "n1:2", "n1:3", "n2:0", "n2:1", "*n2:2", "*n2:3"},
     {J("pair", 2, 0, 1), J("quad", 4, 0, 2)},
     {"pair=n2:0,n2:1", "quad=n1:0,n1:1,n1:2,n1:3"},
     {},
     ""},
    {"spread over the fewest nodes when no node fits, ranks contiguous per node",
     {"n1:0", "*n1:1", "n2:0", "n2:1", "n2:2", "n3:0", "n3:1"},
     {J("five", 5, 0, 1)},
     {"five=n2:0,n2:1,n2:2,n3:0,n3:1"},
     {},
     ""},
    {"GPU indices in order even when listed out of order",
     {"n1:3", "n1:1", "n1:0", "n1:2"},
     {J("three", 3, 0, 1)},
     {"three=n1:0,n1:1,n1:2"},
     {},
     ""},
    {"CPU slots on a machine without GPUs",
     {"host:-1", "host:-1", "host:-1"},
     {J("a", 2, 0, 1), J("b", 1, 0, 2), J("c", 1, 0, 3)},
     {"a=host:-1,host:-1", "b=host:-1"},
     {},
     "c"},
    {"a GPU-sized job waits for busy GPUs instead of running on CPU slots",
     {"*g:0", "*g:1", "c:-1", "c:-1"},
     {J("train", 2, 0, 1)},
     {},
     {},
     "train"},
    {"a job bigger than the GPUs but within the CPU slots runs on CPUs",
     {"g:0", "c:-1", "c:-1", "c:-1"},
     {J("wide", 3, 0, 1), J("one", 1, 0, 2)},
     {"wide=c:-1,c:-1,c:-1", "one=g:0"},
     {},
     ""},
    {"capacity counts busy slots: fits the cluster, waits for slots",
     {"*n1:0", "*n1:1", "n1:2"},
     {J("three", 3, 0, 1)},
     {},
     {},
     "three"},
    {"no slots at all: everything is unschedulable",
     {},
     {J("a", 1, 0, 1)},
     {},
     {"a"},
     ""},
};

class SchedulerScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(SchedulerScenario, Plans) {
  const Scenario& s = GetParam();
  Plan plan = PlanSchedule(Input(s));
  std::vector<std::string> got;
  for (const Assignment& a : plan.assignments) got.push_back(Render(a));
  EXPECT_EQ(got, s.assignments);
  std::vector<std::string> unsched;
  for (const Unschedulable& u : plan.unschedulable) {
    unsched.push_back(u.name);
    EXPECT_NE(u.reason.find("resources.ranks"), std::string::npos) << u.reason;
  }
  EXPECT_EQ(unsched, s.unschedulable);
  EXPECT_EQ(plan.blocked_by, s.blocked_by);
}

INSTANTIATE_TEST_SUITE_P(Table, SchedulerScenario, ::testing::ValuesIn(kScenarios),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           std::string name;
                           for (const char* p = info.param.title; *p; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(Scheduler, UnschedulableReasonNamesTheNumbers) {
  ScheduleInput in = Input({"", {"n1:0", "n1:1", "c:-1"}, {J("x", 9, 0, 1)}, {}, {}, ""});
  Plan plan = PlanSchedule(in);
  ASSERT_EQ(plan.unschedulable.size(), 1u);
  EXPECT_EQ(plan.unschedulable[0].reason,
            "resources.ranks is 9 but the cluster has 2 GPU slots and 1 CPU slots");
}

TEST(Scheduler, NeverAssignsASlotTwice) {
  ScheduleInput in;
  for (int n = 0; n < 4; ++n) {
    for (int g = 0; g < 8; ++g) in.slots.push_back({{"n" + std::to_string(n), g}, (n + g) % 3 != 0});
  }
  for (int i = 0; i < 40; ++i) in.queue.push_back(J("j", 1 + i % 5, i % 3, i));
  Plan plan = PlanSchedule(in);
  std::set<std::pair<std::string, int>> used;
  for (const Assignment& a : plan.assignments) {
    for (const SlotRef& s : a.ranks) {
      EXPECT_TRUE(used.insert({s.node, s.gpu}).second) << s.node << ":" << s.gpu;
    }
  }
  EXPECT_FALSE(plan.assignments.empty());
}

}  // namespace
}  // namespace fp8d::core
