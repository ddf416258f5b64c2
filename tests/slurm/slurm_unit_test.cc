// The Slurm launcher's parsing of Slurm's answers, without a cluster.
#include <gtest/gtest.h>

#include "daemon/agent/slurm_command.h"

namespace fp8d::agent {
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
}  // namespace fp8d::agent
