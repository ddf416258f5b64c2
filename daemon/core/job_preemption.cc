// SPDX-License-Identifier: Apache-2.0
// Preemption: the scheduler takes a running attempt's slots back for other work without losing
// more than the step in flight. The order is what makes it safe across a crash of fp8d:
//   1. the run is marked preempting (the scheduler may count its slots as soon free) and the
//      PREEMPTED intent is written to the attempt record (failure_class, the reason as
//      failure_message) before any signal, so a recovering fp8d knows the attempt was being
//      preempted and finishes the job instead of running it twice (job_recovery.cc);
//   2. every rank gets SIGTERM through the launcher: fp8-worker stops at the next step
//      boundary, writes that step's checkpoint, reports `preempted` and exits 76;
//   3. the tick sends SIGKILL after preemption_grace_ms to ranks still running (the next
//      attempt then resumes from the last periodic checkpoint);
//   4. the first rank's end is judged PREEMPTED (attempt_verdict.cc): the job goes back to
//      QUEUED with the reason as its pending_reason, not counted against max_attempts, and
//      the next attempt (once every rank exited) resumes from the newest checkpoint.
// A cancel meanwhile wins (CANCELLING, then CANCELLED); a run that finishes its work within the
// grace SUCCEEDS.
#include <spdlog/spdlog.h>

#include "daemon/core/failpoint.h"
#include "daemon/core/job_manager_impl.h"
#include "daemon/core/job_supervisor.h"

namespace fp8d::core {

void JobManagerImpl::PreemptAttempt(JobEntry& e, const std::string& reason) {
  supervisor_->Preempt(e, reason);
}

void JobSupervisor::Preempt(JobEntry& e, const std::string& reason) {
  const std::string name = e.job.name();
  const fp8d::v1::JobState state = e.job.state();
  if (e.run == nullptr || (state != fp8d::v1::STARTING && state != fp8d::v1::RUNNING)) {
    spdlog::debug("{}: not preempted: {} has no attempt running", name,
                  fp8d::v1::JobState_Name(state));
    return;
  }
  AttemptRun& run = *e.run;
  if (run.preempting || run.finished) return;  // asked already, or its outcome is decided
  run.preempting = true;
  run.preempt_reason = reason;
  const int number = run.number;
  fp8d::v1::Attempt& attempt = run.record.attempt;
  if (attempt.failure_class() == fp8d::v1::PREEMPTED) {
    // Recovered with its intent durable: the signal may go out again at once.
    if (run.preempt_reason.empty()) run.preempt_reason = attempt.failure_message();
    spdlog::info("{} attempt {}: preemption resumed after the restart ({})", name, number,
                 run.preempt_reason);
    run.preempt_durable = true;
    StopRun(e);
    return;
  }
  attempt.set_failure_class(fp8d::v1::PREEMPTED);
  attempt.set_failure_message(reason);
  spdlog::info("{} attempt {}: preempting ({}); SIGTERM once that is durable", name, number,
               reason);
  SaveAttempt(e, [this, name, number](fp8::Status st) {
    JobEntry* e = cache_.Find(name);
    if (e == nullptr || e->run == nullptr || e->run->number != number) return;
    AttemptRun& run = *e->run;
    if (!st.ok()) {
      // Without the intent in the store a restart could not tell this attempt was being
      // preempted: no signal. The scheduler may ask again.
      spdlog::error("{} attempt {}: not preempted, its intent could not be saved: {}", name,
                    number, st.ToString());
      if (!run.finished) {
        run.preempting = false;
        run.preempt_reason.clear();
        run.record.attempt.clear_failure_class();
        run.record.attempt.clear_failure_message();
        run.runtime_dirty = true;  // the tick writes the record without the intent
      }
      return;
    }
    Failpoint("after_preempt_intent");
    run.preempt_durable = true;
    // A cancel or a failure verdict meanwhile stops the workers its own way.
    if (run.finished) return;
    StopRun(*e);  // before launch: the launcher calls it once the workers exist
  });
}

}  // namespace fp8d::core
