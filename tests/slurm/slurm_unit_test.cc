// SPDX-License-Identifier: Apache-2.0
// The Slurm launcher's parsing of Slurm's answers and its mapping of Slurm's end states to
// failure causes, without a cluster.
#include <gtest/gtest.h>

#include <set>

#include "daemon/launcher/slurm_command.h"

namespace fp8d::launcher {
namespace {

TEST(SlurmParse, SqueueLines) {
  auto jobs = ParseSqueue("12|PENDING|Resources\n13|RUNNING|None\n14_1|PENDING|Priority\nbad\n");
  ASSERT_EQ(jobs.size(), 2u);  // array tasks and junk are skipped
  EXPECT_EQ(jobs[0].job_id, 12);
  EXPECT_EQ(jobs[0].state, "PENDING");
  EXPECT_EQ(jobs[0].reason, "Resources");
  EXPECT_EQ(jobs[1].job_id, 13);
  EXPECT_EQ(jobs[1].state, "RUNNING");
}

TEST(SlurmHandle, RoundTripsAndReadsRowsFromBeforeHandles) {
  EXPECT_EQ(SlurmHandle(77), "slurm:77");
  EXPECT_EQ(SlurmIdOfHandle(SlurmHandle(77)), 77);
  EXPECT_EQ(SlurmIdOfHandle(""), 0) << "nothing recorded";
  EXPECT_EQ(SlurmIdOfHandle("pid:77:start:0"), 77) << "the job id saved as a pid, before handles";
  for (const char* foreign : {"pid:77:start:123", "slurm:", "slurm:x", "slurm:7 ", "slurm:-3", "k8s:abc"}) {
    EXPECT_EQ(SlurmIdOfHandle(foreign), -1) << foreign;
  }
}

TEST(SlurmParse, TerminalStates) {
  for (const char* s : {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "PREEMPTED",
                        "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}) {
    EXPECT_TRUE(IsTerminalSlurmState(s)) << s;
  }
  for (const char* s : {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", ""}) {
    EXPECT_FALSE(IsTerminalSlurmState(s)) << s;
  }
}

TEST(SlurmParse, SbatchAndScontrol) {
  EXPECT_EQ(ParseSbatchJobId("42\n"), 42);
  EXPECT_EQ(ParseSbatchJobId("42;cluster\n"), 42);
  EXPECT_EQ(ParseSbatchJobId("Submitted batch job 7\n"), 7);
  EXPECT_EQ(ParseSbatchJobId(""), 0);
  auto f = ParseScontrolFields("JobId=5 JobState=FAILED Reason=NonZeroExitCode ExitCode=75:0\n");
  EXPECT_EQ(f["JobState"], "FAILED");
  EXPECT_EQ(f["ExitCode"], "75:0");
}

TEST(SlurmParse, TimeLimitRoundsUpToMinutes) {
  EXPECT_EQ(SlurmMinutes(0), 0);
  EXPECT_EQ(SlurmMinutes(1), 1);
  EXPECT_EQ(SlurmMinutes(60000), 1);
  EXPECT_EQ(SlurmMinutes(60001), 2);
}

TEST(SlurmParse, LostNodesAreDownOrNotResponding) {
  EXPECT_EQ(LostNodes("n1 allocated\nn2 allocated*\n"), "n2 (allocated*)");
  EXPECT_EQ(LostNodes("n1 down\nn2 idle\nn3 failing\n"), "n1 (down), n3 (failing)");
  EXPECT_EQ(LostNodes("n1 idle\nn2 mixed\n"), "");
}

TEST(SlurmParse, ReasonsThatNeverResolve) {
  EXPECT_TRUE(NeverStartsReason("PartitionConfig"));
  EXPECT_TRUE(NeverStartsReason("BadConstraints"));
  EXPECT_FALSE(NeverStartsReason("Resources"));
  EXPECT_FALSE(NeverStartsReason("Priority"));
  EXPECT_FALSE(NeverStartsReason("ReqNodeNotAvail"));  // a node may come back
  EXPECT_FALSE(NeverStartsReason(""));
}

using Cause = WorkerExit::Cause;

// Whether the Slurm launcher can end a rank with Cause `c` (every Cause today), through a switch
// with no default: a Cause added to launcher.h stops this file from compiling until it is sorted
// here, and then the coverage test below asks for its table row. Values that name no Cause: false.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
bool SlurmCanProduce(Cause c) {
  switch (c) {
    case Cause::kProcess:           // COMPLETED, FAILED, or a job Slurm no longer knows
    case Cause::kNodeLost:          // NODE_FAIL, BOOT_FAIL, or a node not responding
    case Cause::kPreempted:         // PREEMPTED
    case Cause::kTimeLimit:         // TIMEOUT, DEADLINE
    case Cause::kOutOfMemory:       // OUT_OF_MEMORY
    case Cause::kCancelledOutside:  // CANCELLED
    case Cause::kRejected:          // pending for a reason that never resolves
      return true;
  }
  return false;
}
#pragma GCC diagnostic pop

struct EndRow {
  const char* name;
  SlurmEnd end;  // job "j", attempt 3, rank 1, Slurm job 12 unless the row says otherwise
  Cause cause;
  int exit_code;
  int signal;
  bool adopted;
  const char* message;  // a part of cause_message ("" : must be empty)
};

SlurmEnd End(const std::string& state, std::map<std::string, std::string> fields = {},
             const std::string& reason = "None") {
  SlurmEnd e;
  e.job_id = "j";
  e.attempt = 3;
  e.rank = 1;
  e.slurm_id = 12;
  e.state = state;
  e.reason = reason;
  e.fields = std::move(fields);
  return e;
}

std::vector<EndRow> EndTable() {
  SlurmEnd purged = End("RUNNING");
  purged.known = false;
  SlurmEnd rejected = End("PENDING", {}, "PartitionConfig");
  rejected.rejected = true;
  const std::map<std::string, std::string> lost = {{"fp8d.lost_nodes", "n2 (down*)"}};
  return {
      {"PREEMPTED", End("PREEMPTED"), Cause::kPreempted, -1, 0, false, "Slurm job 12 ended PREEMPTED"},
      {"TIMEOUT", End("TIMEOUT", {{"Reason", "TimeLimit"}}), Cause::kTimeLimit, -1, 0, false,
       "Slurm job 12 ended TIMEOUT (TimeLimit)"},
      {"DEADLINE", End("DEADLINE"), Cause::kTimeLimit, -1, 0, false, "ended DEADLINE"},
      {"OUT_OF_MEMORY", End("OUT_OF_MEMORY"), Cause::kOutOfMemory, -1, 0, false, "ended OUT_OF_MEMORY"},
      {"BOOT_FAIL", End("BOOT_FAIL"), Cause::kNodeLost, -1, 0, false, "ended BOOT_FAIL"},
      {"NODE_FAIL", End("NODE_FAIL", {{"Reason", "None"}}, "NodeDown"), Cause::kNodeLost, -1, 0, false,
       "ended NODE_FAIL (NodeDown)"},
      {"CANCELLED", End("CANCELLED"), Cause::kCancelledOutside, -1, 0, false, "ended CANCELLED"},
      // A cancelled job's nodes may be down too: the cancel, not the node, ended it.
      {"CANCELLED on a lost node", End("CANCELLED", lost), Cause::kCancelledOutside, -1, 0, false,
       "ended CANCELLED"},
      {"COMPLETED", End("COMPLETED"), Cause::kProcess, 0, 0, false, "ended COMPLETED"},
      {"COMPLETED ignores ExitCode", End("COMPLETED", {{"ExitCode", "1:0"}}), Cause::kProcess, 0, 0, false,
       "ended COMPLETED"},
      {"FAILED with an exit code", End("FAILED", {{"ExitCode", "75:0"}, {"Reason", "NonZeroExitCode"}}),
       Cause::kProcess, 75, 0, false, "ended FAILED (NonZeroExitCode)"},
      {"FAILED by a signal", End("FAILED", {{"ExitCode", "0:9"}}), Cause::kProcess, -1, 9, false, "ended FAILED"},
      {"FAILED without scontrol", End("FAILED"), Cause::kProcess, -1, 0, true, "ended FAILED"},
      {"FAILED on a lost node", End("FAILED", {{"ExitCode", "1:0"}, {"fp8d.lost_nodes", "n2 (down*)"}}),
       Cause::kNodeLost, -1, 0, false, "ended FAILED; node(s) not responding: n2 (down*)"},
      {"TIMEOUT on a lost node", End("TIMEOUT", lost), Cause::kNodeLost, -1, 0, false,
       "node(s) not responding: n2 (down*)"},
      {"no lost node", End("FAILED", {{"ExitCode", "2:0"}, {"fp8d.lost_nodes", ""}}), Cause::kProcess, 2, 0, false,
       "ended FAILED"},
      {"purged", purged, Cause::kProcess, -1, 0, true, ""},
      {"rejected", rejected, Cause::kRejected, -1, 0, false,
       "Slurm job 12 can never start: Slurm keeps it pending for PartitionConfig"},
  };
}

TEST(SlurmJobExit, MapsEveryEndStateToItsCause) {
  for (const EndRow& row : EndTable()) {
    SCOPED_TRACE(row.name);
    const WorkerExit ex = SlurmJobExit(row.end);
    EXPECT_EQ(ex.job_id, "j");
    EXPECT_EQ(ex.attempt, 3);
    EXPECT_EQ(ex.rank, 1);
    EXPECT_EQ(static_cast<int>(ex.cause), static_cast<int>(row.cause));
    EXPECT_EQ(ex.exit_code, row.exit_code);
    EXPECT_EQ(ex.signal, row.signal);
    EXPECT_EQ(ex.adopted, row.adopted);
    EXPECT_FALSE(ex.never_started);
    if (*row.message == '\0') {
      EXPECT_EQ(ex.cause_message, "");
    } else {
      EXPECT_NE(ex.cause_message.find(row.message), std::string::npos) << ex.cause_message;
    }
  }
}

TEST(SlurmJobExit, EveryCauseTheLauncherProducesHasARow) {
  std::set<int> in_table;
  for (const EndRow& row : EndTable()) in_table.insert(static_cast<int>(row.cause));
  int producible = 0;
  for (int i = 0; i < 64; ++i) {  // the enum's values are 0, 1, ... (no initializers)
    if (!SlurmCanProduce(static_cast<Cause>(i))) continue;
    ++producible;
    EXPECT_TRUE(in_table.count(i)) << "no table row ends with WorkerExit::Cause value " << i;
  }
  EXPECT_GE(producible, 7);  // every Cause there is today
}

TEST(SlurmCommand, CollectsOutputAndExitCode) {
  auto r = RunCommand({"sh", "-c", "echo out; echo err >&2; echo $FOO; exit 3"}, {{"FOO", "bar"}}, 10000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\nbar\n");
  EXPECT_EQ(r->err, "err\n");
  auto slow = RunCommand({"sleep", "5"}, {}, 100);
  EXPECT_FALSE(slow.ok());
  auto missing = RunCommand({"/nonexistent/sbatch"}, {}, 1000);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace fp8d::launcher
