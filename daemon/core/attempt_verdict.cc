// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/attempt_verdict.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

namespace {

using fp8d::v1::FailureClass;
using fp8d::v1::JobState;
using fp8d::v1::WorkerEvent;

Verdict Fail(FailureClass failure, std::string message) {
  Verdict v;
  v.outcome = Verdict::Outcome::kFail;
  v.failure = failure;
  v.message = std::move(message);
  return v;
}

Verdict Ignored(std::string why) {
  Verdict v;
  v.message = std::move(why);
  return v;
}

bool Supervised(JobState state) { return state == fp8d::v1::STARTING || state == fp8d::v1::RUNNING; }

// Slurm's verdicts: a lost or preempted node is NODE_LOST, Slurm's time limit (the attempt
// deadline plus the grace) is DEADLINE_EXCEEDED, a job Slurm can never start is INVALID_SPEC
// (permanent); running out of memory is RESOURCE_EXHAUSTED, a cancel by someone else is a
// crash of the attempt. All but INVALID_SPEC are retried from the last checkpoint.
FailureClass ClassifyLauncherExit(launcher::WorkerExit::Cause cause) {
  switch (cause) {
    case launcher::WorkerExit::Cause::kNodeLost:
    case launcher::WorkerExit::Cause::kPreempted:
      return fp8d::v1::NODE_LOST;
    case launcher::WorkerExit::Cause::kTimeLimit:
      return fp8d::v1::DEADLINE_EXCEEDED;
    case launcher::WorkerExit::Cause::kRejected:
      return fp8d::v1::INVALID_SPEC;  // the same request would wait forever again
    case launcher::WorkerExit::Cause::kOutOfMemory:
      return fp8d::v1::RESOURCE_EXHAUSTED;  // retried once, as a worker's own out-of-memory
    case launcher::WorkerExit::Cause::kCancelledOutside:
    case launcher::WorkerExit::Cause::kProcess:
      return fp8d::v1::WORKER_CRASH;
  }
  return fp8d::v1::WORKER_CRASH;
}

// An exit that finished the rank's work: `done` (not interrupted) and exit 0, or a re-adopted
// process (status unknowable) that reported `done`.
bool FinishedWell(const RankView& rank, const launcher::WorkerExit& ex) {
  if (!rank.done || ex.cause != launcher::WorkerExit::Cause::kProcess) return false;
  return ex.adopted || (ex.signal == 0 && ex.exit_code == 0);
}

std::string HowItEnded(const launcher::WorkerExit& ex) {
  if (ex.cause != launcher::WorkerExit::Cause::kProcess) return "ended: " + ex.cause_message;
  if (ex.adopted) return "exited";
  if (ex.signal != 0) return "was killed by signal " + std::to_string(ex.signal);
  return "exited with code " + std::to_string(ex.exit_code);
}

// ClassifyExit, except that exit 76 means PREEMPTED only when the daemon asked for it: a worker
// that stops that way on its own crashed as far as the job is concerned.
FailureClass ExitClass(const AttemptView& a, int exit_code, int signal) {
  const FailureClass cls = ClassifyExit(exit_code, signal);
  return cls == fp8d::v1::PREEMPTED && !a.preempting ? fp8d::v1::WORKER_CRASH : cls;
}

Verdict OnEvent(const AttemptView& a, const launcher::WorkerEvent& ev) {
  const WorkerEvent& event = ev.event;
  const bool terminal = IsTerminal(a.state);
  Verdict v;
  switch (event.payload_case()) {
    case WorkerEvent::kHeartbeat:
    case WorkerEvent::kMetric:
      return v;  // the rank is alive; that is all they say to the supervisor

    case WorkerEvent::kPreempted:
      // The rank stopped at a step boundary after its checkpoint (whose own event carries
      // it): its exit says what follows.
      return v;

    case WorkerEvent::kPending:
      // From a launcher with its own queue (Slurm): nothing runs yet, so the clocks start over.
      if (a.state != fp8d::v1::STARTING || a.finished) return v;
      v.restart_clocks = true;
      if (event.pending().reason() != a.pending_reason) v.pending_reason = event.pending().reason();
      return v;

    case WorkerEvent::kStarted: {
      v.rank_started = true;
      v.clear_pending_reason = !a.pending_reason.empty();
      bool all = true;
      for (size_t r = 0; r < a.ranks.size(); ++r) {
        all = all && (a.ranks[r].started || static_cast<int>(r) == ev.rank);
      }
      v.to_running = all && a.state == fp8d::v1::STARTING && !a.finished;
      return v;
    }

    case WorkerEvent::kProgress:
      if (a.finished || terminal) return v;
      v.progress = true;
      v.publish_progress = ev.rank == 0;  // every rank reports; rank 0 speaks for the job
      return v;

    case WorkerEvent::kCheckpoint: {
      // Accepted even while the attempt is being stopped: a checkpoint written on SIGTERM is
      // exactly what the next attempt should resume from.
      if (terminal) return v;
      const WorkerEvent::Checkpoint& c = event.checkpoint();
      if (c.path().empty() || c.step() < 0) return Ignored("checkpoint event without path or step");
      // Every rank of a gang reports the same checkpoint, and a re-adopted worker's events are
      // read again from the saved offset: only a newer step is news.
      if (a.newest_checkpoint_step >= c.step()) return v;
      v.checkpoint = c;
      return v;
    }

    case WorkerEvent::kDone: {
      // A worker stopped by SIGTERM checkpoints and reports `done` with interrupted=true, then
      // exits 76: its work is not finished, so that `done` must not count (it matters for
      // re-adopted workers, whose exit status is unknowable and whose events are the verdict).
      const auto& fields = event.done().result().fields();
      const auto it = fields.find("interrupted");
      const bool interrupted = it != fields.end() && it->second.bool_value();
      v.final_line = true;
      v.rank_done = !interrupted;
      return v;  // success is decided when the rank exits 0 (docs/design.md §2 (3))
    }

    case WorkerEvent::kError: {
      // A rank being preempted may fail on its way out (a collective cut short): the
      // attempt ends PREEMPTED all the same.
      if (a.finished || a.preempting || a.state == fp8d::v1::CANCELLING || terminal) {
        v.final_line = true;
        return v;
      }
      const FailureClass cls = FailureClassOf(event.error().class_());
      std::string message = event.error().message();
      if (message.empty()) message = "worker reported " + fp8d::v1::FailureClass_Name(cls);
      v = Fail(cls, "rank " + std::to_string(ev.rank) + ": " + message);
      v.final_line = true;
      return v;
    }

    case WorkerEvent::PAYLOAD_NOT_SET:
      return Ignored("a line that is not an event");
  }
  return Ignored("an event of an unknown kind");
}

Verdict OnExit(const AttemptView& a, const launcher::WorkerExit& ex) {
  if (ex.rank < 0 || ex.rank >= static_cast<int>(a.ranks.size()) || a.ranks[ex.rank].exited) {
    return Ignored("an exit already handled");
  }
  if (a.finished || a.state == fp8d::v1::CANCELLING || IsTerminal(a.state)) return {};
  const std::string who = "rank " + std::to_string(ex.rank);
  const RankView& rank = a.ranks[ex.rank];
  if (a.preempting && !FinishedWell(rank, ex)) {
    // The daemon asked for it: however the rank ended (exit 76 after its checkpoint, SIGKILL
    // after the grace, a launcher's verdict), the job did nothing wrong.
    Verdict v = Fail(fp8d::v1::PREEMPTED,
                     a.preempt_reason + " (" + who + " " + HowItEnded(ex) +
                         "); requeued, not counted as an attempt");
    v.uncounted = true;
    return v;
  }
  if (ex.never_started) {
    // The controller stopped part-way through launching the attempt: the job did nothing
    // wrong. Its other ranks are stopped and the attempt is retried without counting.
    Verdict v = Fail(fp8d::v1::CONTROLLER_RESTART,
                     who + " was never started (the controller stopped while launching the "
                           "attempt); not counted as an attempt");
    v.uncounted = true;
    return v;
  }
  if (ex.cause != launcher::WorkerExit::Cause::kProcess) {
    // The launcher knows why the rank ended (Slurm's job state), whatever the ranks said.
    return Fail(ClassifyLauncherExit(ex.cause), ex.cause_message);
  }
  if (ex.adopted) {
    // Not our child: the exit status is unknowable, the events are the verdict.
    if (!rank.done) return Fail(fp8d::v1::WORKER_CRASH, who + " exited without reporting done");
  } else if (ex.signal != 0) {
    return Fail(ExitClass(a, ex.exit_code, ex.signal),
                who + " was killed by signal " + std::to_string(ex.signal) + " (" +
                    strsignal(ex.signal) + ")");
  } else if (ex.exit_code != 0) {
    return Fail(ExitClass(a, ex.exit_code, 0), who + " exited with code " + std::to_string(ex.exit_code));
  } else if (!rank.done) {
    return Fail(fp8d::v1::WORKER_CRASH, who + " exited 0 without reporting done");
  }
  // This rank finished well; the attempt has when every other rank has too.
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const RankView& o = a.ranks[r];
    if (static_cast<int>(r) == ex.rank) continue;
    if (!o.exited || !o.done || (!o.adopted_exit && (o.exit_code != 0 || o.signal != 0))) return {};
  }
  Verdict v;
  v.outcome = Verdict::Outcome::kSucceed;
  return v;
}

Verdict OnTick(const AttemptView& a, int64_t now, const Timeouts& t) {
  Verdict v;
  // Ranks being stopped get SIGKILL once the grace is over, whatever the job's state now.
  const bool any_live = std::any_of(a.ranks.begin(), a.ranks.end(), [](const RankView& r) { return !r.exited; });
  v.sigkill = a.launched && a.kill_at_ms != 0 && !a.sigkill_sent && now >= a.kill_at_ms && any_live;
  if (v.sigkill) {
    const int64_t grace = a.preempting ? t.preemption_grace_ms : t.cancel_grace_ms;
    v.message = "still running " + SecondsText(grace) + " after SIGTERM; SIGKILL";
  }
  v.requeue = a.state == fp8d::v1::RETRY_WAIT && now >= a.retry_at_ms;
  // A preempted attempt is bounded by its grace: a rank writing its checkpoint is not hung.
  if (a.finished || a.preempting || !a.launched || !Supervised(a.state)) return v;

  if (t.attempt_deadline_ms > 0 && now - a.start_ms > t.attempt_deadline_ms) {
    return Fail(fp8d::v1::DEADLINE_EXCEEDED,
                "attempt ran past its deadline of " + SecondsText(t.attempt_deadline_ms));
  }
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const RankView& rank = a.ranks[r];
    if (t.heartbeat_ms > 0 && !rank.exited && now - rank.last_seen_ms > t.heartbeat_ms) {
      return Fail(fp8d::v1::HUNG, "rank " + std::to_string(r) + " sent no heartbeat for " +
                                      SecondsText(now - rank.last_seen_ms) + " (heartbeat_timeout " +
                                      SecondsText(t.heartbeat_ms) + ")");
    }
  }
  // A rank that heartbeats but never gets to `started` (stuck in rendezvous or loading)
  // would otherwise hold its gang's slots forever: the progress timeout covers STARTING too.
  if (a.state == fp8d::v1::STARTING && t.progress_ms > 0 && now - a.start_ms > t.progress_ms) {
    return Fail(fp8d::v1::HUNG, "not every rank reported started within " +
                                    SecondsText(t.progress_ms) + " (progress_timeout)");
  }
  if (a.state == fp8d::v1::RUNNING && t.progress_ms > 0 && now - a.last_progress_ms > t.progress_ms) {
    return Fail(fp8d::v1::HUNG, "no progress for " + SecondsText(now - a.last_progress_ms) +
                                    " (progress_timeout " + SecondsText(t.progress_ms) +
                                    "); a stuck collective looks like this");
  }
  return v;
}

}  // namespace

Timeouts Timeouts::Of(const fp8d::v1::Timeouts& job, int64_t cancel_grace_ms,
                      int64_t preemption_grace_ms) {
  Timeouts t;
  t.attempt_deadline_ms = MsFromDuration(job.attempt_deadline());
  t.heartbeat_ms = MsFromDuration(job.heartbeat_timeout());
  t.progress_ms = MsFromDuration(job.progress_timeout());
  t.cancel_grace_ms = cancel_grace_ms;
  t.preemption_grace_ms = preemption_grace_ms;
  return t;
}

Verdict DecideAttempt(const AttemptView& attempt, const SupervisorInput& input, int64_t now_ms,
                      const Timeouts& timeouts) {
  if (const auto* ev = std::get_if<const launcher::WorkerEvent*>(&input)) return OnEvent(attempt, **ev);
  if (const auto* ex = std::get_if<const launcher::WorkerExit*>(&input)) return OnExit(attempt, **ex);
  return OnTick(attempt, now_ms, timeouts);
}

FailureClass FailureClassOf(WorkerEvent::ErrorClass error_class) {
  switch (error_class) {
    case WorkerEvent::INVALID_SPEC: return fp8d::v1::INVALID_SPEC;
    case WorkerEvent::DATA_ERROR: return fp8d::v1::DATA_ERROR;
    case WorkerEvent::NUMERIC: return fp8d::v1::NUMERIC;
    case WorkerEvent::RESOURCE_EXHAUSTED: return fp8d::v1::RESOURCE_EXHAUSTED;
    case WorkerEvent::INTERNAL_ERROR:
    case WorkerEvent::ERROR_CLASS_UNSPECIFIED:
    default:  // a value from a newer worker this daemon does not know
      return fp8d::v1::INTERNAL_ERROR;
  }
}

std::string SecondsText(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace fp8d::core
