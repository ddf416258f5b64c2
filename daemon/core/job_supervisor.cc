// SPDX-License-Identifier: Apache-2.0
// JobSupervisor (job_supervisor.h): worker events and exits, verdicts applied, the tick.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/core/attempt_verdict.h"
#include "daemon/core/failpoint.h"
#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_supervisor.h"

namespace fp8d::core {

using fp8::Status;
using fp8d::v1::FailureClass;
using fp8d::v1::Job;
using fp8d::v1::JobState;

namespace {

std::string Truncated(const std::string& s, size_t n = 200) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

AttemptView ViewOf(const JobEntry& e) {
  AttemptView a;
  a.state = e.job.state();
  a.retry_at_ms = e.retry_at_ms;
  a.newest_checkpoint_step = e.checkpoints.empty() ? -1 : e.checkpoints.back().step();
  a.pending_reason = e.job.pending_reason();
  if (e.run == nullptr) return a;
  const AttemptRun& run = *e.run;
  a.launched = run.launched;
  a.finished = run.finished;
  a.start_ms = run.start_ms;
  a.last_progress_ms = run.last_progress_ms;
  a.kill_at_ms = run.kill_at_ms;
  a.sigkill_sent = run.sigkill_sent;
  a.preempting = run.preempting;
  a.preempt_reason = run.preempt_reason;
  a.ranks.reserve(run.ranks.size());
  for (const RankRun& r : run.ranks) {
    a.ranks.push_back({.last_seen_ms = r.last_seen_ms, .started = r.started, .done = r.done,
                       .exited = r.exited, .exit_code = r.exit_code, .signal = r.signal,
                       .adopted_exit = r.adopted_exit});
  }
  return a;
}

}  // namespace

JobSupervisor::JobSupervisor(boost::asio::io_context& io, Options options, JobCache& cache,
                             launcher::Launcher& launcher, const Clock* clock, JobWriter& writer,
                             Owner& owner)
    : options_(options),
      cache_(cache),
      launcher_(launcher),
      clock_(clock),
      writer_(writer),
      owner_(owner),
      tick_timer_(io) {}

void JobSupervisor::Stop() {
  stopped_ = true;
  tick_timer_.cancel();
}

Verdict JobSupervisor::Decide(const JobEntry& e, const SupervisorInput& input, int64_t now) const {
  return DecideAttempt(ViewOf(e), input, now,
                       Timeouts::Of(e.job.timeouts(), options_.cancel_grace_ms,
                                    options_.preemption_grace_ms));
}

// ---------------------------------------------------------------------------------------------
// Events

void JobSupervisor::HandleEvent(const launcher::WorkerEvent& ev) {
  if (stopped_) return;
  const std::string name = "jobs/" + ev.job_id;
  JobEntry* e = cache_.Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != ev.attempt || ev.rank < 0 ||
      ev.rank >= static_cast<int>(e->run->ranks.size())) {
    spdlog::debug("{}: event for attempt {} rank {} that is not current; ignored", name,
                  ev.attempt, ev.rank);
    return;
  }
  AttemptRun& run = *e->run;
  RankRun& rank = run.ranks[ev.rank];
  const int64_t before = rank.offset;
  rank.offset = std::max(rank.offset, ev.offset_after);
  run.runtime_dirty = true;
  if (ev.garbage) {
    // A stray print on stdout must not kill a training run: log it and read on.
    spdlog::warn("{} attempt {} rank {}: ignoring a line that is not an event: {}", name,
                 ev.attempt, ev.rank, Truncated(ev.raw));
    return;
  }
  const int64_t now = NowMs();
  rank.last_seen_ms = now;
  const Verdict v = Decide(*e, &ev, now);
  if (v.outcome == Verdict::Outcome::kKeepRunning && !v.message.empty()) {
    spdlog::warn("{} attempt {} rank {}: ignoring {}: {}", name, ev.attempt, ev.rank, v.message,
                 Truncated(ev.raw));
  }
  // Lines whose effect is not durable yet hold the saved offset back (RankRun's pins).
  if (v.final_line && !rank.final_pin) rank.final_pin = before;
  if (v.rank_started) {
    if (e->job.state() == fp8d::v1::STARTING && !rank.started_pin) rank.started_pin = before;
    rank.started = true;
  }
  if (v.rank_done) {
    rank.done = *v.rank_done;
    rank.result = ev.event.done().result();
  }
  // Every change below is published (PublishChange) or made durable (Transition) afterwards.
  e->BeforeChange();
  if (v.clear_pending_reason) e->job.clear_pending_reason();
  if (v.restart_clocks) {
    for (RankRun& r : run.ranks) r.last_seen_ms = now;
    run.start_ms = now;
  }
  if (v.pending_reason) {
    e->job.set_pending_reason(*v.pending_reason);
    cache_.PublishChange(*e, NowMs());
  }
  if (v.progress) run.last_progress_ms = now;
  if (v.publish_progress) {
    ApplyProgressEvent(ev.event.progress(), e->job.mutable_progress());
    *e->job.mutable_progress()->mutable_update_time() = TimestampFromMs(now);
    cache_.PublishChange(*e, NowMs());
  }
  if (v.checkpoint) {
    fp8d::v1::Checkpoint ckpt;
    ckpt.set_step(v.checkpoint->step());
    ckpt.set_path(v.checkpoint->path());
    ckpt.set_checksum(v.checkpoint->checksum());
    ckpt.set_attempt(run.number);
    *ckpt.mutable_create_time() = TimestampFromMs(now);
    e->checkpoints.push_back(ckpt);
    *e->job.mutable_checkpoint() = ckpt;
    cache_.PublishChange(*e, NowMs());
    writer_.Write([name, ckpt](store::JobStore& s) { return s.PutCheckpoint(name, ckpt); },
                       [name](Status st) {
                         if (!st.ok()) {
                           spdlog::error("{}: saving checkpoint: {}", name, st.ToString());
                         }
                       });
  }
  if (v.to_running) {
    run.last_progress_ms = now;  // the progress timeout counts from RUNNING
    const int number = run.number;
    writer_.Transition(
        *e, fp8d::v1::RUNNING, "every rank started",
        [this, name, number](Status st) {
          if (st.ok()) Failpoint("after_running_write");
          JobEntry* e = cache_.Find(name);
          if (!st.ok() || e == nullptr || e->run == nullptr || e->run->number != number) return;
          for (RankRun& r : e->run->ranks) r.started_pin.reset();  // RUNNING is durable now
          e->run->runtime_dirty = true;
        },
        nullptr);
  }
  if (v.outcome == Verdict::Outcome::kFail) FailAttempt(*e, v.failure, v.message);
}

// ---------------------------------------------------------------------------------------------
// Exits

void JobSupervisor::HandleExit(const launcher::WorkerExit& ex) {
  if (stopped_) return;
  const std::string name = "jobs/" + ex.job_id;
  JobEntry* e = cache_.Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != ex.attempt || ex.rank < 0 ||
      ex.rank >= static_cast<int>(e->run->ranks.size())) {
    return;
  }
  AttemptRun& run = *e->run;
  RankRun& rank = run.ranks[ex.rank];
  if (rank.exited) return;
  const Verdict v = Decide(*e, &ex, NowMs());
  rank.exited = true;
  rank.exit_code = ex.exit_code;
  rank.signal = ex.signal;
  rank.adopted_exit = ex.adopted;
  int status = ex.signal != 0 ? 128 + ex.signal : ex.exit_code;
  if (ex.adopted && rank.done) status = 0;
  run.record.attempt.mutable_ranks(ex.rank)->set_exit_status(status);
  spdlog::info("{} attempt {} rank {}: exited ({})", name, ex.attempt, ex.rank,
               ex.adopted ? "re-adopted, status unknown"
               : ex.signal != 0 ? std::string("signal ") + strsignal(ex.signal)
                                : "code " + std::to_string(ex.exit_code));
  if (v.outcome == Verdict::Outcome::kFail) {
    if (v.uncounted) --e->counted_attempts;
    FailAttempt(*e, v.failure, v.message);
  } else if (v.outcome == Verdict::Outcome::kSucceed) {
    SucceedAttempt(*e);
  }
  if (run.AllExited()) OnRunExited(*e);  // last use of `run`/`e`: it may start a new attempt
}

void JobSupervisor::SucceedAttempt(JobEntry& e) {
  AttemptRun& run = *e.run;
  run.finished = true;
  if (run.preempting) {
    // Every rank finished its work within the grace: the preemption came too late to matter.
    run.record.attempt.clear_failure_class();
    run.record.attempt.clear_failure_message();
  }
  e.BeforeChange();
  *e.job.mutable_result() = run.ranks.front().result;
  e.job.clear_error();
  if (e.job.state() == fp8d::v1::STARTING) {
    // Every rank finished before we saw all `started` lines (a very short job): the table
    // has no STARTING → SUCCEEDED edge, so pass through RUNNING.
    writer_.Transition(e, fp8d::v1::RUNNING, "every rank started", nullptr, nullptr);
  }
  writer_.Transition(e, fp8d::v1::SUCCEEDED,
                    "attempt " + std::to_string(run.number) + ": every rank finished", nullptr,
                    nullptr);
}

// ---------------------------------------------------------------------------------------------
// Cancel

namespace {
void MarkCancelled(JobEntry& e) {
  e.BeforeChange();
  fp8d::v1::JobError* err = e.job.mutable_error();
  err->set_code(1);  // google.rpc CANCELLED
  err->set_message("cancelled by request");
  err->set_failure_class(fp8d::v1::FAILURE_CLASS_UNSPECIFIED);
}
}  // namespace

void JobSupervisor::Cancel(JobEntry& e, std::function<void(Status)> done) {
  const std::string name = e.job.name();
  if (e.write_failures > 0) {
    // Its last state change is not durable yet (the store refuses writes): answering from the
    // state in memory could contradict what GetJob says.
    done(fp8::UnavailableError(name + ": its state cannot be written to the store right now (" +
                               e.write_error + "); retry shortly"));
    return;
  }
  switch (e.job.state()) {
    case fp8d::v1::QUEUED:
    case fp8d::v1::RETRY_WAIT:
      // Nothing runs for this job (a previous attempt's workers, if still dying, were already
      // signalled): cancel at once.
      MarkCancelled(e);
      writer_.Transition(e, fp8d::v1::CANCELLED, "cancelled by request", std::move(done));
      return;
    case fp8d::v1::STARTING:
    case fp8d::v1::RUNNING:
      if (e.run != nullptr) {
        e.run->finished = true;  // no failure verdicts while cancelling
        if (e.run->preempting) {
          // The cancel wins over a preemption under way: the attempt was cancelled, not
          // preempted (its record is saved once every rank exited).
          e.run->record.attempt.clear_failure_class();
          e.run->record.attempt.clear_failure_message();
        }
      }
      writer_.Transition(e, fp8d::v1::CANCELLING, "cancel requested: stopping every rank",
                         [this, name, done = std::move(done)](Status st) {
                           JobEntry* e = cache_.Find(name);
                           if (st.ok() && e != nullptr && e->run != nullptr) StopRun(*e);
                           done(st);
                         });
      return;
    case fp8d::v1::CANCELLING:
    case fp8d::v1::CANCELLED:
      // Answers once everything written so far is durable (FIFO store thread).
      writer_.Write([](store::JobStore&) { return fp8::OkStatus(); }, std::move(done));
      return;
    case fp8d::v1::SUCCEEDED:
    case fp8d::v1::FAILED:
    case fp8d::v1::JOB_STATE_UNSPECIFIED:
    case fp8d::v1::JobState_INT_MIN_SENTINEL_DO_NOT_USE_:
    case fp8d::v1::JobState_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  done(NotCancellable(e.job));
}

fp8::Status JobSupervisor::NotCancellable(const Job& job) {
  return fp8::FailedPreconditionError(job.name() + " is " + fp8d::v1::JobState_Name(job.state()) +
                                      "; only a job that has not finished can be cancelled");
}

void JobSupervisor::StopRun(JobEntry& e) {
  // Before launch the workers do not exist yet: the launcher calls again once they do.
  if (e.run == nullptr || !e.run->launched) return;
  if (e.run->AnyLive()) {
    TerminateWorkers(e);
  } else {
    OnRunExited(e);
  }
}

// ---------------------------------------------------------------------------------------------
// Failure, termination, end of a run

void JobSupervisor::FailAttempt(JobEntry& e, FailureClass failure, const std::string& message) {
  AttemptRun& run = *e.run;
  if (run.finished) return;
  run.finished = true;
  const JobState state = e.job.state();
  if (state != fp8d::v1::STARTING && state != fp8d::v1::RUNNING) return;

  const int64_t step = e.job.progress().step();
  run.record.attempt.set_failure_class(failure);
  run.record.attempt.set_failure_message(message);
  run.record.attempt.set_failure_step(step);
  if (failure == fp8d::v1::NUMERIC) e.skip_newest_checkpoint = true;

  JobState next = StateAfterFailure(e.job.retry(), failure, e.counted_attempts);
  std::string repeat;
  if (failure == fp8d::v1::RESOURCE_EXHAUSTED) {
    // Out of memory once may be the machine's passing state; twice at the same step is the
    // shape itself: more attempts would fail the same way.
    if (!e.oom_steps.insert(step).second) {
      next = fp8d::v1::FAILED;
      repeat = "; out of memory at step " + std::to_string(step) +
               " in an earlier attempt too, so it is not retried";
    }
  }
  e.BeforeChange();
  fp8d::v1::JobError* err = e.job.mutable_error();
  err->set_code(RpcCodeFor(failure));
  err->set_message(message);
  err->set_failure_class(failure);

  std::string text = "attempt " + std::to_string(run.number) + " failed (" +
                     fp8d::v1::FailureClass_Name(failure) + "): " + message;
  if (failure == fp8d::v1::PREEMPTED) {
    // Not a failure of the job: it waits in the queue again, saying why; no error to show.
    e.job.clear_error();
    e.job.set_pending_reason(run.preempt_reason);
    text = "attempt " + std::to_string(run.number) + " preempted: " + message;
  } else if (next == fp8d::v1::RETRY_WAIT) {
    const int64_t delay = BackoffMs(e.job.retry(), e.counted_attempts, options_.uniform01());
    e.retry_at_ms = NowMs() + delay;
    text += "; retrying in " + SecondsText(delay);
  } else if (!repeat.empty()) {
    text += repeat;
  } else if (IsRetryable(failure)) {
    text += "; no attempts left (max_attempts " +
            std::to_string(ResolveRetryPolicy(e.job.retry()).max_attempts) + ")";
  }
  const std::string name = e.job.name();
  const int number = run.number;
  store::AttemptRecord record = run.record;
  writer_.Transition(
      e, next, text,
      [this, name, number](Status) {
        JobEntry* e = cache_.Find(name);
        if (e != nullptr && e->run != nullptr && e->run->number == number) TerminateWorkers(*e);
      },
      [name, record](store::JobStore& s) { return s.PutAttempt(name, record); });
}

void JobSupervisor::TerminateWorkers(JobEntry& e) {
  AttemptRun& run = *e.run;
  if (!run.launched || run.AllExited()) return;
  // A preemption's SIGTERM went out already (with its own grace): once is enough.
  if (run.preempting && run.kill_at_ms != 0) return;
  launcher_.Signal(JobIdOf(e.job.name()), run.number, SIGTERM);
  const int64_t grace = run.preempting ? options_.preemption_grace_ms : options_.cancel_grace_ms;
  if (run.kill_at_ms == 0) run.kill_at_ms = NowMs() + grace;
  spdlog::info("{} attempt {}: SIGTERM sent; SIGKILL in {} if still running", e.job.name(),
               run.number, SecondsText(grace));
}

void JobSupervisor::OnRunExited(JobEntry& e) {
  AttemptRun& run = *e.run;
  if (run.exit_handled) return;
  run.exit_handled = true;
  *run.record.attempt.mutable_end_time() = TimestampFromMs(NowMs());
  SaveAttempt(e);
  const std::string name = e.job.name();
  if (e.job.state() == fp8d::v1::CANCELLING) {
    MarkCancelled(e);
    writer_.Transition(e, fp8d::v1::CANCELLED, "every rank exited after the cancel", nullptr,
                      nullptr);
  }
  owner_.ScheduleRound();  // its slots are free; may replace e.run
  writer_.MaybeEvict(name);
}

const store::AttemptRecord& JobSupervisor::RecordRuntime(JobEntry& e) {
  AttemptRun& run = *e.run;
  run.record.runtime.clear();
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const RankRun& rank = run.ranks[r];
    store::RankRuntime rt;
    rt.rank = static_cast<int32_t>(r);
    rt.handle = rank.handle;
    rt.events_offset = rank.offset;
    if (rank.started_pin) rt.events_offset = std::min(rt.events_offset, *rank.started_pin);
    if (rank.final_pin) rt.events_offset = std::min(rt.events_offset, *rank.final_pin);
    run.record.runtime.push_back(rt);
  }
  run.runtime_dirty = false;
  run.runtime_saved_ms = NowMs();
  return run.record;
}

void JobSupervisor::SaveAttempt(JobEntry& e, std::function<void(Status)> saved) {
  const std::string name = e.job.name();
  const int number = e.run->number;
  writer_.Write(
      [name, record = RecordRuntime(e)](store::JobStore& s) { return s.PutAttempt(name, record); },
      [this, name, number, saved = std::move(saved)](Status st) {
        if (!st.ok()) {
          spdlog::error("{}: saving attempt: {}", name, st.ToString());
          // Written again by the next tick that finds it dirty.
          JobEntry* e = cache_.Find(name);
          if (e != nullptr && e->run != nullptr && e->run->number == number) {
            e->run->runtime_dirty = true;
          }
        }
        if (saved) saved(st);
      });
}

void JobSupervisor::SaveAttempts(const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, store::AttemptRecord>> records;
  std::vector<std::pair<std::string, int>> attempts;
  for (const std::string& name : names) {
    JobEntry* e = cache_.Find(name);
    if (e == nullptr || e->run == nullptr) continue;
    records.emplace_back(name, RecordRuntime(*e));
    attempts.emplace_back(name, e->run->number);
  }
  if (records.empty()) return;
  writer_.Write(
      [records = std::move(records)](store::JobStore& s) { return s.PutAttempts(records); },
      [this, attempts = std::move(attempts)](Status st) {
        if (st.ok()) return;
        spdlog::error("saving the event offsets of {} attempts: {}", attempts.size(), st.ToString());
        // Written again by the next tick that finds them dirty.
        for (const auto& [name, number] : attempts) {
          JobEntry* e = cache_.Find(name);
          if (e != nullptr && e->run != nullptr && e->run->number == number) e->run->runtime_dirty = true;
        }
      });
}

// ---------------------------------------------------------------------------------------------
// The tick

void JobSupervisor::ArmTick() {
  if (stopped_) return;
  std::weak_ptr<int> alive = alive_;
  tick_timer_.expires_after(std::chrono::milliseconds(options_.tick_ms));
  tick_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired()) return;
    Tick();
  });
}

void JobSupervisor::Tick() {
  if (stopped_) return;
  const int64_t now = NowMs();
  // Only jobs with an attempt have timers (RETRY_WAIT included): a deep queue of QUEUED jobs
  // must not cost every tick. Copied because handling a job may evict it.
  const std::vector<std::string> names(cache_.with_run().begin(), cache_.with_run().end());
  std::vector<std::string> offsets_due;  // saved together after the loop: one commit
  for (const std::string& name : names) {
    JobEntry* e = cache_.Find(name);
    if (e == nullptr) continue;
    const Verdict v = Decide(*e, TickInput{}, now);
    if (v.outcome == Verdict::Outcome::kFail) FailAttempt(*e, v.failure, v.message);
    if (e->run != nullptr) {
      AttemptRun& run = *e->run;
      if (v.sigkill) {
        spdlog::warn("{} attempt {}: {}", name, run.number, v.message);
        launcher_.Signal(JobIdOf(name), run.number, SIGKILL);
        run.sigkill_sent = true;
      }
      if (run.launched && run.runtime_dirty && now - run.runtime_saved_ms >= options_.runtime_flush_ms)
        offsets_due.push_back(name);
    }
    if (v.requeue) {
      writer_.Transition(
          *e, fp8d::v1::QUEUED, "backoff elapsed", [this](Status) { owner_.ScheduleRound(); }, nullptr);
    }
  }
  SaveAttempts(offsets_due);
  FlushDirtyRows(now, /*all=*/false);
  owner_.OnTick(now);
  ArmTick();
}

void JobSupervisor::FlushDirtyRows(int64_t now, bool all) {
  std::vector<Job> rows;
  for (auto it = cache_.dirty_rows().begin(); it != cache_.dirty_rows().end();) {
    JobEntry* e = cache_.Find(*it);
    if (e == nullptr || !e->row_dirty) {  // evicted, or a transition's write carried it
      it = cache_.dirty_rows().erase(it);
      continue;
    }
    // A job with a transition still being written gets its row from that write first: a
    // progress row written ahead of it would be overwritten by an older version later.
    if (!e->unwritten.empty() || (!all && now - e->row_saved_ms < options_.progress_flush_ms)) {
      ++it;
      continue;
    }
    rows.push_back(e->job);
    e->row_dirty = false;
    e->row_saved_ms = now;
    it = cache_.dirty_rows().erase(it);
  }
  if (rows.empty()) return;
  std::vector<std::string> names;
  for (const Job& j : rows) names.push_back(j.name());
  writer_.Write([rows = std::move(rows)](store::JobStore& s) { return s.UpdateJobs(rows); },
                     [this, names = std::move(names)](Status st) {
                       if (st.ok()) return;
                       spdlog::error("saving progress: {}", st.ToString());
                       // Dirty again: a later tick writes them once the store takes writes.
                       for (const std::string& name : names) {
                         if (JobEntry* e = cache_.Find(name); e != nullptr) {
                           e->row_dirty = true;
                           cache_.dirty_rows().insert(name);
                         }
                       }
                     });
}

}  // namespace fp8d::core
