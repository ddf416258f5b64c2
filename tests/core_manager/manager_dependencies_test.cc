// SPDX-License-Identifier: Apache-2.0
// JobManager: depends_on. A dependent waits QUEUED with its reason, runs after its
// dependencies succeed, ends DEPENDENCY_FAILED after one fails, is cancelled or deleted (also
// when that happened while fp8d was down), and a create naming bad dependencies is refused
// naming the field, with nothing stored.
#include <optional>

#include "daemon/core/job_fields.h"
#include "tests/core_manager/manager_harness.h"

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

class DependenciesTest : public ManagerTest {
 protected:
  Job DependentJob(std::vector<std::string> deps) {
    Job job = TrainJob();
    for (const std::string& d : deps) job.add_depends_on(d);
    return job;
  }
  std::string CreateDependent(std::vector<std::string> deps) {
    auto created = Create(DependentJob(std::move(deps)));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->name() : "";
  }
  fp8::Status Delete(const std::string& name) {
    fp8d::v1::DeleteJobRequest request;
    request.set_name(name);
    std::optional<fp8::Status> result;
    manager_->DeleteJob(request, [&](fp8::StatusOr<google::protobuf::Empty> r) { result = r.status(); });
    if (!RunUntil([&] { return result.has_value(); })) return fp8::InternalError("delete timed out");
    return *result;
  }
  // Waits for `name` to end FAILED with DEPENDENCY_FAILED and `message`.
  void ExpectDependencyFailed(const std::string& name, const std::string& message) {
    ASSERT_TRUE(WaitState(name, fp8d::v1::FAILED));
    auto job = Get(name);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->error().failure_class(), fp8d::v1::DEPENDENCY_FAILED);
    EXPECT_EQ(job->error().code(), 9);
    EXPECT_EQ(job->error().message(), message);
    EXPECT_EQ(job->pending_reason(), "");
    EXPECT_EQ(job->attempt(), 0) << "it never ran";
  }
  // Succeeds `name` (running attempt 1, one rank) and waits until it has left the cache, so
  // later checks go through the store.
  void Succeed(const std::string& name) {
    FinishAttempt(name, 1, 1);
    ASSERT_TRUE(WaitState(name, fp8d::v1::SUCCEEDED));
    RunFor(20);
  }
};

TEST_F(DependenciesTest, WaitsWithItsReasonThenRunsAfterEveryDependencySucceeded) {
  launcher_->slots = {launcher::Slot{"node-a", -1}, launcher::Slot{"node-a", -1},
                      launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string a = CreateRunning(TrainJob());
  const std::string b = CreateRunning(TrainJob());
  const std::string c = CreateDependent({a, b});
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 2u) << "a free slot, but the dependent waits";
  auto waiting = Get(c);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->state(), fp8d::v1::QUEUED);
  EXPECT_EQ(waiting->pending_reason(), "waiting for " + a);
  EXPECT_EQ(waiting->depends_on_size(), 2);

  Succeed(a);
  ASSERT_TRUE(RunUntil([&] { return Get(c)->pending_reason() == "waiting for " + b; }));
  EXPECT_EQ(launcher_->LaunchCount(), 2u);
  Succeed(b);
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 3; }));
  EXPECT_EQ(launcher_->Launch(2).job_id, JobIdOf(c));
  EXPECT_EQ(Get(c)->pending_reason(), "");
}

TEST_F(DependenciesTest, DependentOfAFailedJobEndsDependencyFailed) {
  launcher_->slots = {launcher::Slot{"node-a", -1}, launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string a = CreateRunning(TrainJob());
  const std::string b = CreateDependent({a});
  const std::string c = CreateDependent({b});  // a chain fails link by link
  RunFor(20);
  ASSERT_EQ(StateOf(b), fp8d::v1::QUEUED);
  Exit(a, 1, 0, 64);  // INVALID_SPEC: permanent
  ASSERT_TRUE(WaitState(a, fp8d::v1::FAILED));
  ExpectDependencyFailed(b, "dependency " + a + " ended FAILED");
  ExpectDependencyFailed(c, "dependency " + b + " ended FAILED");
  RunFor(20);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
}

TEST_F(DependenciesTest, DependentOfACancelledJobFailsAndAWaitingDependentCanBeCancelled) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(TrainJob());
  auto queued = Create(TrainJob());  // waits for the one slot
  ASSERT_TRUE(queued.ok());
  const std::string b = CreateDependent({queued->name()});
  const std::string c = CreateDependent({running});
  ASSERT_EQ(Cancel(queued->name())->state(), fp8d::v1::CANCELLED);
  ExpectDependencyFailed(b, "dependency " + queued->name() + " ended CANCELLED");
  auto cancelled = Cancel(c);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state(), fp8d::v1::CANCELLED);
  Succeed(running);
  RunFor(30);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
}

TEST_F(DependenciesTest, FinishedDependenciesAreReadFromTheStore) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string ok = CreateRunning(TrainJob());
  Succeed(ok);
  const std::string bad = CreateRunning(TrainJob());
  Exit(bad, 1, 0, 64);
  ASSERT_TRUE(WaitState(bad, fp8d::v1::FAILED));
  RunFor(20);
  // A dependent of a job that already failed is created and fails at once.
  const std::string doomed = CreateDependent({ok, bad});
  ExpectDependencyFailed(doomed, "dependency " + bad + " ended FAILED");
  // One whose dependency already succeeded runs.
  const size_t launches = launcher_->LaunchCount();
  const std::string runs = CreateDependent({ok});
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == launches + 1; }));
  EXPECT_EQ(launcher_->Launch(launches).job_id, JobIdOf(runs));
}

TEST_F(DependenciesTest, BadDependenciesAreRefusedNamingTheFieldAndNothingIsStored) {
  StartManager();
  const std::string a = CreateRunning(TrainJob());
  const int64_t stored = store_->CountJobs();
  struct Case {
    std::vector<std::string> deps;
    std::string error;
  };
  std::vector<std::string> many(65, a);
  for (const Case& c : std::vector<Case>{
           {{a, "jobs/9999"}, "job.depends_on[1]: jobs/9999 does not exist"},
           {{a, a}, "job.depends_on[1]: " + a + " is already job.depends_on[0]"},
           {many, "job.depends_on: at most 64 dependencies, got 65"},
       }) {
    auto created = Create(DependentJob(c.deps));
    ASSERT_FALSE(created.ok());
    EXPECT_EQ(created.status().code(), fp8::StatusCode::kInvalidArgument);
    EXPECT_EQ(created.status().message(), c.error);
  }
  EXPECT_EQ(store_->CountJobs(), stored);
}

TEST_F(DependenciesTest, DeletingADependencyFailsTheJobsWaitingOnIt) {
  launcher_->slots = {launcher::Slot{"node-a", -1}, launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string done = CreateRunning(TrainJob());
  Succeed(done);
  const std::string running = CreateRunning(TrainJob());
  const std::string c = CreateDependent({done, running});
  RunFor(20);
  ASSERT_EQ(Get(c)->pending_reason(), "waiting for " + running);
  ASSERT_TRUE(Delete(done).ok());
  ExpectDependencyFailed(c, "dependency " + done + " no longer exists (deleted)");
}

TEST_F(DependenciesTest, RecoveryFailsDependentsOfJobsThatEndedBadlyWhileDown) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(TrainJob());
  auto failed = Create(TrainJob());  // QUEUED behind `running`
  auto deleted = Create(TrainJob());
  auto succeeded = Create(TrainJob());
  ASSERT_TRUE(failed.ok() && deleted.ok() && succeeded.ok());
  const std::string on_failed = CreateDependent({failed->name()});
  const std::string on_deleted = CreateDependent({deleted->name()});
  const std::string on_succeeded = CreateDependent({succeeded->name()});
  RunFor(20);
  // While fp8d is down (no Shutdown: a crash), the dependencies end: as a restored or
  // hand-edited store could have them.
  manager_.reset();
  RunFor(5);
  Job f = failed.value();
  f.set_state(fp8d::v1::FAILED);
  ASSERT_TRUE(store_->UpdateJob(f, nullptr).ok());
  Job s = succeeded.value();
  s.set_state(fp8d::v1::SUCCEEDED);
  ASSERT_TRUE(store_->UpdateJob(s, nullptr).ok());
  Job d = deleted.value();
  d.set_state(fp8d::v1::CANCELLED);
  ASSERT_TRUE(store_->UpdateJob(d, nullptr).ok());
  ASSERT_TRUE(store_->DeleteJob(deleted->name()).ok());
  StartManager();
  ExpectDependencyFailed(on_failed, "dependency " + failed->name() + " ended FAILED");
  ExpectDependencyFailed(on_deleted, "dependency " + deleted->name() + " no longer exists (deleted)");
  EXPECT_EQ(StateOf(on_succeeded), fp8d::v1::QUEUED);
  // Ready: what it waits for now is the slot (the scheduler's reason, if any), not a job.
  EXPECT_EQ(Get(on_succeeded)->pending_reason().find("waiting for jobs/"), std::string::npos)
      << Get(on_succeeded)->pending_reason();
  Emit(running, 1, 0, {{"type", "done"}, {"result", {{"final_loss", 1.25}}}});
  Exit(running, 1, 0, -1, 0, /*adopted=*/true);
  ASSERT_TRUE(RunUntil([&] {
    const size_t n = launcher_->LaunchCount();
    return n > 0 && launcher_->Launch(n - 1).job_id == JobIdOf(on_succeeded);
  }));
}

// CreateJob cannot make a cycle (only existing jobs can be named), but a restored store can
// hold one: every job on it would wait forever, so recovery fails them, and what waits on them.
TEST_F(DependenciesTest, RecoveryFailsJobsOnADependencyCycle) {
  launcher_->slots = {launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string running = CreateRunning(TrainJob());
  auto a = Create(TrainJob());
  auto b = Create(TrainJob());
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string c = CreateDependent({a->name()});
  const std::string on_running = CreateDependent({running});
  RunFor(20);
  manager_.reset();
  RunFor(5);
  Job ja = a.value();
  ja.add_depends_on(b->name());
  ASSERT_TRUE(store_->UpdateJob(ja, nullptr).ok());
  Job jb = b.value();
  jb.add_depends_on(a->name());
  ASSERT_TRUE(store_->UpdateJob(jb, nullptr).ok());
  StartManager();
  ExpectDependencyFailed(a->name(), "dependency cycle " + a->name() + " -> " + b->name() + " -> " + a->name());
  ExpectDependencyFailed(b->name(), "dependency cycle " + b->name() + " -> " + a->name() + " -> " + b->name());
  ExpectDependencyFailed(c, "dependency " + a->name() + " ended FAILED");
  EXPECT_EQ(Get(on_running)->pending_reason(), "waiting for " + running);
}

TEST_F(DependenciesTest, RecoveryKeepsAJobWaitingOnAnActiveDependency) {
  launcher_->slots = {launcher::Slot{"node-a", -1}, launcher::Slot{"node-a", -1}};
  StartManager();
  const std::string a = CreateRunning(TrainJob());
  const std::string b = CreateDependent({a});
  RunFor(20);
  RestartManager();
  RunFor(30);
  EXPECT_EQ(StateOf(b), fp8d::v1::QUEUED);
  EXPECT_EQ(Get(b)->pending_reason(), "waiting for " + a);
  EXPECT_EQ(launcher_->LaunchCount(), 1u);
  Emit(a, 1, 0, {{"type", "done"}, {"result", {{"final_loss", 1.25}}}});
  Exit(a, 1, 0, -1, 0, /*adopted=*/true);
  ASSERT_TRUE(WaitState(a, fp8d::v1::SUCCEEDED));
  ASSERT_TRUE(RunUntil([&] { return launcher_->LaunchCount() == 2; }));
  EXPECT_EQ(launcher_->Launch(1).job_id, JobIdOf(b));
}

}  // namespace
}  // namespace fp8d::core::testing
