// SPDX-License-Identifier: Apache-2.0
// The pure dependency decisions (daemon/core/dependencies.h): the create check, the judgement
// of a waiting job, cycle finding, and the reverse index.
#include "daemon/core/dependencies.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fp8d::core {
namespace {

using Graph = std::map<std::string, std::vector<std::string>>;
using O = DependencyOutcome;

std::function<std::vector<std::string>(const std::string&)> Edges(const Graph& g) {
  return [g](const std::string& n) {
    auto it = g.find(n);
    return it == g.end() ? std::vector<std::string>{} : it->second;
  };
}

TEST(DependsOnCheck, Table) {
  const Graph existing = {{"jobs/1", {}}, {"jobs/2", {"jobs/1"}}, {"jobs/3", {"jobs/9"}}, {"jobs/9", {"jobs/2"}}};
  auto exists = [&](const std::string& n) { return existing.count(n) > 0; };
  std::vector<std::string> many;
  for (int i = 0; i < kMaxDependencies + 1; ++i) many.push_back("jobs/1");
  struct Case {
    const char* name;
    std::string self;
    std::vector<std::string> deps;
    std::string error;  // "" = accepted; else a substring of the INVALID_ARGUMENT message
  };
  const std::vector<Case> cases = {
      {"none", "", {}, ""},
      {"existing jobs", "", {"jobs/1", "jobs/2"}, ""},
      {"a chain through jobs that exist", "", {"jobs/3"}, ""},
      {"unknown names its index", "", {"jobs/1", "jobs/77"}, "job.depends_on[1]: jobs/77 does not exist"},
      {"duplicate names both indexes", "", {"jobs/1", "jobs/2", "jobs/1"},
       "job.depends_on[2]: jobs/1 is already job.depends_on[0]"},
      {"more than 64", "", many, "job.depends_on: at most 64"},
      {"itself", "jobs/5", {"jobs/1", "jobs/5"}, "job.depends_on[1]: a job cannot depend on itself"},
      // jobs/9 (existing) depends on jobs/2: a retried or restored jobs/2 naming jobs/3 closes
      // the loop jobs/2 -> jobs/3 -> jobs/9 -> jobs/2.
      {"cycle through existing jobs", "jobs/2", {"jobs/1", "jobs/3"},
       "job.depends_on[1]: jobs/3 depends on this job (cycle jobs/2 -> jobs/3 -> jobs/9 -> jobs/2)"},
      {"no cycle when the chain does not return", "jobs/4", {"jobs/3"}, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fp8::Status st = CheckDependsOn(c.self, c.deps, exists, Edges(existing));
    if (c.error.empty()) {
      EXPECT_TRUE(st.ok()) << st.ToString();
    } else {
      EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find(c.error), std::string::npos) << st.message();
    }
  }
}

TEST(JudgeDependencies, Table) {
  struct Case {
    const char* name;
    std::map<std::string, O> outcomes;  // absent = pending
    std::vector<std::string> deps;
    DependencyJudgement::Kind kind;
    std::string dependency;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no dependencies", {}, {}, DependencyJudgement::kReady, "", ""},
      {"all succeeded", {{"jobs/1", O::kSucceeded}, {"jobs/2", O::kSucceeded}}, {"jobs/1", "jobs/2"},
       DependencyJudgement::kReady, "", ""},
      {"first unfinished is named", {{"jobs/1", O::kSucceeded}}, {"jobs/1", "jobs/2", "jobs/3"},
       DependencyJudgement::kWaiting, "jobs/2", "waiting for jobs/2"},
      {"failed", {{"jobs/1", O::kFailed}}, {"jobs/1"}, DependencyJudgement::kFailed, "jobs/1",
       "dependency jobs/1 ended FAILED"},
      {"cancelled", {{"jobs/1", O::kCancelled}}, {"jobs/1"}, DependencyJudgement::kFailed, "jobs/1",
       "dependency jobs/1 ended CANCELLED"},
      {"deleted", {{"jobs/1", O::kGone}}, {"jobs/1"}, DependencyJudgement::kFailed, "jobs/1",
       "dependency jobs/1 no longer exists (deleted)"},
      {"a failure after a pending one still fails", {{"jobs/2", O::kFailed}}, {"jobs/1", "jobs/2"},
       DependencyJudgement::kFailed, "jobs/2", "dependency jobs/2 ended FAILED"},
      {"the first failure in order is named", {{"jobs/1", O::kCancelled}, {"jobs/2", O::kFailed}},
       {"jobs/2", "jobs/1"}, DependencyJudgement::kFailed, "jobs/2", "dependency jobs/2 ended FAILED"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    DependencyJudgement j = JudgeDependencies(c.deps, [&](const std::string& n) {
      auto it = c.outcomes.find(n);
      return it == c.outcomes.end() ? O::kPending : it->second;
    });
    EXPECT_EQ(j.kind, c.kind);
    EXPECT_EQ(j.dependency, c.dependency);
    EXPECT_EQ(j.message, c.message);
  }
}

TEST(OutcomeOfState, OnlyTerminalStatesFinish) {
  EXPECT_EQ(OutcomeOfState(fp8d::v1::SUCCEEDED), O::kSucceeded);
  EXPECT_EQ(OutcomeOfState(fp8d::v1::FAILED), O::kFailed);
  EXPECT_EQ(OutcomeOfState(fp8d::v1::CANCELLED), O::kCancelled);
  for (auto s : {fp8d::v1::QUEUED, fp8d::v1::STARTING, fp8d::v1::RUNNING, fp8d::v1::RETRY_WAIT,
                 fp8d::v1::CANCELLING}) {
    EXPECT_EQ(OutcomeOfState(s), O::kPending) << fp8d::v1::JobState_Name(s);
  }
}

TEST(FindDependencyCycle, Table) {
  struct Case {
    const char* name;
    Graph graph;
    std::string start;
    std::vector<std::string> cycle;
  };
  const std::vector<Case> cases = {
      {"no edges", {}, "a", {}},
      {"self loop", {{"a", {"a"}}}, "a", {"a", "a"}},
      {"two", {{"a", {"b"}}, {"b", {"a"}}}, "a", {"a", "b", "a"}},
      {"cycle not through start", {{"a", {"b"}}, {"b", {"c"}}, {"c", {"b"}}}, "a", {}},
      {"diamond without cycle", {{"a", {"b", "c"}}, {"b", {"d"}}, {"c", {"d"}}}, "a", {}},
      {"second branch closes it", {{"a", {"b", "c"}}, {"b", {"d"}}, {"c", {"a"}}}, "a", {"a", "c", "a"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(FindDependencyCycle(c.start, Edges(c.graph)), c.cycle);
  }
  // A long chain is walked without recursion.
  Graph chain;
  for (int i = 0; i < 100000; ++i) chain["j" + std::to_string(i)] = {"j" + std::to_string(i + 1)};
  chain["j100000"] = {"j0"};
  EXPECT_EQ(FindDependencyCycle("j0", Edges(chain)).size(), 100002u);
}

TEST(DependencyIndex, KeepsOutcomesOnlyWhileSomethingWaits) {
  DependencyIndex index;
  index.SetOutcome("jobs/1", O::kSucceeded);  // nothing waits: not recorded
  EXPECT_FALSE(index.RecordedOutcome("jobs/1").has_value());
  index.Add("jobs/3", {"jobs/1", "jobs/2"});
  index.Add("jobs/4", {"jobs/1"});
  EXPECT_EQ(index.DependentsOf("jobs/1"), (std::vector<std::string>{"jobs/3", "jobs/4"}));
  index.SetOutcome("jobs/1", O::kSucceeded);
  EXPECT_EQ(index.RecordedOutcome("jobs/1"), O::kSucceeded);
  index.Remove("jobs/3", {"jobs/1", "jobs/2"});
  EXPECT_FALSE(index.HasDependents("jobs/2"));
  EXPECT_EQ(index.RecordedOutcome("jobs/1"), O::kSucceeded) << "jobs/4 still waits";
  index.Remove("jobs/4", {"jobs/1"});
  EXPECT_FALSE(index.RecordedOutcome("jobs/1").has_value());
  EXPECT_EQ(index.size(), 0u);
}

}  // namespace
}  // namespace fp8d::core
