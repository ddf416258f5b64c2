// The supervisor: worker events and exits (from the agent, posted to io), and a periodic tick
// that reads the injected Clock (so tests drive time by hand) to find hung ranks, attempts past
// their deadline, SIGKILLs due after the cancel grace, backoffs that have elapsed, and progress
// rows and event offsets due to be written.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/core/failpoint.h"
#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"

namespace fp8d::core {

namespace {

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string Truncated(const std::string& s, size_t n = 200) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

// Slurm's verdicts: a lost or preempted node is NODE_LOST, Slurm's time limit (the attempt
// deadline plus the grace) is DEADLINE_EXCEEDED, a job Slurm can never start is INVALID_SPEC
// (permanent); running out of memory is RESOURCE_EXHAUSTED, a cancel by someone else is a
// crash of the attempt. All are retryable, from the last checkpoint.
FailureClass ClassifyLauncherExit(agent::WorkerExit::Cause cause) {
  switch (cause) {
    case agent::WorkerExit::Cause::kNodeLost:
    case agent::WorkerExit::Cause::kPreempted:
      return fp8d::v1::NODE_LOST;
    case agent::WorkerExit::Cause::kTimeLimit:
      return fp8d::v1::DEADLINE_EXCEEDED;
    case agent::WorkerExit::Cause::kRejected:
      return fp8d::v1::INVALID_SPEC;  // the same request would wait forever again
    case agent::WorkerExit::Cause::kOutOfMemory:
      return fp8d::v1::RESOURCE_EXHAUSTED;  // retried once, as a worker's own out-of-memory
    case agent::WorkerExit::Cause::kCancelledOutside:
    case agent::WorkerExit::Cause::kProcess:
      return fp8d::v1::WORKER_CRASH;
  }
  return fp8d::v1::WORKER_CRASH;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Events

void JobManagerImpl::HandleEvent(const agent::WorkerEvent& ev) {
  if (shutting_down_) return;
  const std::string name = "jobs/" + ev.job_id;
  JobEntry* e = Find(name);
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
  if (ev.garbage || !ev.event.is_object()) {
    // A stray print on stdout must not kill a training run: log it and read on.
    spdlog::warn("{} attempt {} rank {}: ignoring a line that is not an event: {}", name,
                 ev.attempt, ev.rank, Truncated(ev.raw));
    return;
  }
  const int64_t now = NowMs();
  rank.last_seen_ms = now;
  const std::string type = StringField(ev.event, "type");
  const JobState state = e->job.state();

  if (type == "heartbeat" || type == "metric") return;

  if (type == "pending") {
    // From a launcher with its own queue (Slurm), while the attempt waits there: nothing runs
    // yet, so the heartbeat, start and deadline clocks start over, and the reason is shown.
    if (state != fp8d::v1::STARTING || run.finished) return;
    for (RankRun& r : run.ranks) r.last_seen_ms = now;
    run.start_ms = now;
    const std::string reason = StringField(ev.event, "reason");
    if (reason != e->job.pending_reason()) {
      e->job.set_pending_reason(reason);
      PublishChange(*e);
    }
    return;
  }

  if (type == "started") {
    if (!e->job.pending_reason().empty()) e->job.clear_pending_reason();
    if (state == fp8d::v1::STARTING && !rank.started_pin) rank.started_pin = before;
    rank.started = true;
    const bool all_started = std::all_of(run.ranks.begin(), run.ranks.end(),
                                         [](const RankRun& r) { return r.started; });
    if (all_started && state == fp8d::v1::STARTING && !run.finished) {
      run.last_progress_ms = now;  // the progress timeout counts from RUNNING
      const int number = run.number;
      Transition(*e, fp8d::v1::RUNNING, "every rank started", [this, name, number](Status st) {
        if (st.ok()) Failpoint("after_running_write");
        JobEntry* e = Find(name);
        if (!st.ok() || e == nullptr || e->run == nullptr || e->run->number != number) return;
        for (RankRun& r : e->run->ranks) r.started_pin.reset();  // RUNNING is durable now
        e->run->runtime_dirty = true;
      });
    }
    return;
  }

  if (type == "progress") {
    if (run.finished || IsTerminal(state)) return;
    run.last_progress_ms = now;
    if (ev.rank != 0) return;  // every rank reports; rank 0 speaks for the job
    ApplyProgressEvent(ev.event, e->job.mutable_progress());
    *e->job.mutable_progress()->mutable_update_time() = TimestampFromMs(now);
    PublishChange(*e);
    return;
  }

  if (type == "checkpoint") {
    // Accepted even while the attempt is being stopped: a checkpoint written on SIGTERM is
    // exactly what the next attempt should resume from.
    if (IsTerminal(state)) return;
    const std::string path = StringField(ev.event, "path");
    const int64_t step = IntField(ev.event, "step", -1);
    if (path.empty() || step < 0) {
      spdlog::warn("{} rank {}: checkpoint event without path or step: {}", name, ev.rank,
                   Truncated(ev.raw));
      return;
    }
    // Every rank of a gang reports the same checkpoint, and a re-adopted worker's events are
    // read again from the saved offset: only a newer step is news.
    if (!e->checkpoints.empty() && e->checkpoints.back().step() >= step) return;
    fp8d::v1::Checkpoint ckpt;
    ckpt.set_step(step);
    ckpt.set_path(path);
    ckpt.set_checksum(StringField(ev.event, "checksum"));
    ckpt.set_attempt(run.number);
    *ckpt.mutable_create_time() = TimestampFromMs(now);
    e->checkpoints.push_back(ckpt);
    *e->job.mutable_checkpoint() = ckpt;
    PublishChange(*e);
    OnStore<Status>([name, ckpt](store::JobStore& s) { return s.PutCheckpoint(name, ckpt); },
                    [name](Status st) {
                      if (!st.ok()) spdlog::error("{}: saving checkpoint: {}", name, st.ToString());
                    });
    return;
  }

  if (type == "done") {
    if (!rank.final_pin) rank.final_pin = before;
    auto it = ev.event.find("result");
    if (it != ev.event.end()) rank.result = *it;
    // A worker stopped by SIGTERM checkpoints and reports `done` with interrupted=true, then
    // exits 75: its work is not finished, so that `done` must not count (it matters for
    // re-adopted workers, whose exit status is unknowable and whose events are the verdict).
    const bool interrupted = it != ev.event.end() && it->is_object() &&
                             it->value("interrupted", false) == true;
    rank.done = !interrupted;
    return;  // success is decided when the rank exits 0 (design §2 (3))
  }

  if (type == "error") {
    if (!rank.final_pin) rank.final_pin = before;
    if (run.finished || state == fp8d::v1::CANCELLING || IsTerminal(state)) return;
    const FailureClass cls = FailureClassFromName(StringField(ev.event, "class"));
    std::string message = StringField(ev.event, "message");
    if (message.empty()) message = "worker reported " + fp8d::v1::FailureClass_Name(cls);
    FailAttempt(*e, cls, "rank " + std::to_string(ev.rank) + ": " + message);
    return;
  }

  spdlog::debug("{} rank {}: unknown event type '{}'", name, ev.rank, type);
}

// ---------------------------------------------------------------------------------------------
// Exits

void JobManagerImpl::HandleExit(const agent::WorkerExit& ex) {
  if (shutting_down_) return;
  const std::string name = "jobs/" + ex.job_id;
  JobEntry* e = Find(name);
  if (e == nullptr || e->run == nullptr || e->run->number != ex.attempt || ex.rank < 0 ||
      ex.rank >= static_cast<int>(e->run->ranks.size())) {
    return;
  }
  AttemptRun& run = *e->run;
  RankRun& rank = run.ranks[ex.rank];
  if (rank.exited) return;
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

  if (!run.finished && e->job.state() != fp8d::v1::CANCELLING && !IsTerminal(e->job.state())) {
    const std::string who = "rank " + std::to_string(ex.rank);
    if (ex.never_started) {
      // The controller stopped part-way through launching the attempt: the job did nothing
      // wrong. Its other ranks are stopped and the attempt is retried without counting.
      --e->counted_attempts;
      FailAttempt(*e, fp8d::v1::CONTROLLER_RESTART,
                  who + " was never started (the controller stopped while launching the "
                        "attempt); not counted as an attempt");
    } else if (ex.cause != agent::WorkerExit::Cause::kProcess) {
      // The launcher knows why the rank ended (Slurm's job state), whatever the ranks said.
      FailAttempt(*e, ClassifyLauncherExit(ex.cause), ex.cause_message);
    } else if (ex.adopted) {
      // Not our child: the exit status is unknowable, the events are the verdict.
      if (!rank.done) FailAttempt(*e, fp8d::v1::WORKER_CRASH, who + " exited without reporting done");
    } else if (ex.signal != 0) {
      FailAttempt(*e, ClassifyExit(ex.exit_code, ex.signal),
                  who + " was killed by signal " + std::to_string(ex.signal) + " (" +
                      strsignal(ex.signal) + ")");
    } else if (ex.exit_code != 0) {
      FailAttempt(*e, ClassifyExit(ex.exit_code, 0),
                  who + " exited with code " + std::to_string(ex.exit_code));
    } else if (!rank.done) {
      FailAttempt(*e, fp8d::v1::WORKER_CRASH, who + " exited 0 without reporting done");
    }
    if (!run.finished) EvaluateRun(*e);
  }
  if (run.AllExited()) OnRunExited(*e);  // last use of `run`/`e`: it may start a new attempt
}

void JobManagerImpl::EvaluateRun(JobEntry& e) {
  AttemptRun& run = *e.run;
  const bool all_ok = std::all_of(run.ranks.begin(), run.ranks.end(), [](const RankRun& r) {
    return r.exited && r.done && (r.adopted_exit || (r.exit_code == 0 && r.signal == 0));
  });
  if (all_ok) SucceedAttempt(e);
}

void JobManagerImpl::SucceedAttempt(JobEntry& e) {
  AttemptRun& run = *e.run;
  run.finished = true;
  *e.job.mutable_result() = StructFromJson(run.ranks.front().result);
  e.job.clear_error();
  if (e.job.state() == fp8d::v1::STARTING) {
    // Every rank finished before we saw all `started` lines (a very short job): the table
    // has no STARTING → SUCCEEDED edge, so pass through RUNNING.
    Transition(e, fp8d::v1::RUNNING, "every rank started");
  }
  Transition(e, fp8d::v1::SUCCEEDED,
             "attempt " + std::to_string(run.number) + ": every rank finished");
}

// ---------------------------------------------------------------------------------------------
// Failure, termination, end of a run

void JobManagerImpl::FailAttempt(JobEntry& e, FailureClass failure, const std::string& message) {
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
  fp8d::v1::JobError* err = e.job.mutable_error();
  err->set_code(RpcCodeFor(failure));
  err->set_message(message);
  err->set_failure_class(failure);

  std::string text = "attempt " + std::to_string(run.number) + " failed (" +
                     fp8d::v1::FailureClass_Name(failure) + "): " + message;
  if (next == fp8d::v1::RETRY_WAIT) {
    const int64_t delay = BackoffMs(e.job.retry(), e.counted_attempts, Uniform01());
    e.retry_at_ms = NowMs() + delay;
    text += "; retrying in " + Seconds(delay);
  } else if (!repeat.empty()) {
    text += repeat;
  } else if (IsRetryable(failure)) {
    text += "; no attempts left (max_attempts " +
            std::to_string(ResolveRetryPolicy(e.job.retry()).max_attempts) + ")";
  }
  const std::string name = e.job.name();
  const int number = run.number;
  store::AttemptRecord record = run.record;
  Transition(
      e, next, text,
      [this, name, number](Status) {
        JobEntry* e = Find(name);
        if (e != nullptr && e->run != nullptr && e->run->number == number) TerminateWorkers(*e);
      },
      [name, record](store::JobStore& s) { return s.PutAttempt(name, record); });
}

void JobManagerImpl::TerminateWorkers(JobEntry& e) {
  AttemptRun& run = *e.run;
  if (!run.launched || run.AllExited()) return;
  agent_->Signal(JobIdOf(e.job.name()), run.number, SIGTERM);
  if (run.kill_at_ms == 0) run.kill_at_ms = NowMs() + options_.cancel_grace_ms;
  spdlog::info("{} attempt {}: SIGTERM sent; SIGKILL in {} if still running", e.job.name(),
               run.number, Seconds(options_.cancel_grace_ms));
}

void JobManagerImpl::OnRunExited(JobEntry& e) {
  AttemptRun& run = *e.run;
  if (run.exit_handled) return;
  run.exit_handled = true;
  *run.record.attempt.mutable_end_time() = TimestampFromMs(NowMs());
  SaveAttempt(e);
  const std::string name = e.job.name();
  if (e.job.state() == fp8d::v1::CANCELLING) {
    fp8d::v1::JobError* err = e.job.mutable_error();
    err->set_code(1);  // google.rpc CANCELLED
    err->set_message("cancelled by request");
    err->set_failure_class(fp8d::v1::FAILURE_CLASS_UNSPECIFIED);
    Transition(e, fp8d::v1::CANCELLED, "every rank exited after the cancel");
  }
  Schedule();  // its slots are free; may replace e.run
  MaybeEvict(name);
}

void JobManagerImpl::SaveAttempt(JobEntry& e, std::function<void(Status)> saved) {
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
  const std::string name = e.job.name();
  const int number = run.number;
  OnStore<Status>([name, record = run.record](store::JobStore& s) { return s.PutAttempt(name, record); },
                  [this, name, number, saved = std::move(saved)](Status st) {
                    if (!st.ok()) {
                      spdlog::error("{}: saving attempt: {}", name, st.ToString());
                      // Written again by the next tick that finds it dirty.
                      JobEntry* e = Find(name);
                      if (e != nullptr && e->run != nullptr && e->run->number == number) {
                        e->run->runtime_dirty = true;
                      }
                    }
                    if (saved) saved(st);
                  });
}

// ---------------------------------------------------------------------------------------------
// The tick

void JobManagerImpl::ArmTick() {
  if (shutting_down_) return;
  std::weak_ptr<int> alive = alive_;
  tick_timer_.expires_after(std::chrono::milliseconds(options_.tick_ms));
  tick_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired()) return;
    Tick();
  });
}

void JobManagerImpl::Tick() {
  if (shutting_down_) return;
  const int64_t now = NowMs();
  // Only jobs with an attempt have timers (RETRY_WAIT included): a deep queue of QUEUED jobs
  // must not cost every tick. Copied because handling a job may evict it.
  const std::vector<std::string> names(with_run_.begin(), with_run_.end());
  for (const std::string& name : names) {
    JobEntry* e = Find(name);
    if (e == nullptr) continue;
    CheckAttempt(*e, now);
    if (e->run != nullptr) {
      AttemptRun& run = *e->run;
      if (run.kill_at_ms != 0 && !run.sigkill_sent && now >= run.kill_at_ms && run.launched &&
          run.AnyLive()) {
        spdlog::warn("{} attempt {}: still running {} after SIGTERM; SIGKILL", name, run.number,
                     Seconds(options_.cancel_grace_ms));
        agent_->Signal(JobIdOf(name), run.number, SIGKILL);
        run.sigkill_sent = true;
      }
      if (run.launched && run.runtime_dirty && now - run.runtime_saved_ms >= options_.runtime_flush_ms)
        SaveAttempt(*e);
    }
    if (e->job.state() == fp8d::v1::RETRY_WAIT && now >= e->retry_at_ms) {
      Transition(*e, fp8d::v1::QUEUED, "backoff elapsed", [this](Status) { Schedule(); });
    }
  }
  FlushDirtyRows(now, /*all=*/false);
  SweepFinishedJobs(now);
  ArmTick();
}

void JobManagerImpl::CheckAttempt(JobEntry& e, int64_t now) {
  if (e.run == nullptr) return;
  AttemptRun& run = *e.run;
  const JobState state = e.job.state();
  if (run.finished || !run.launched) return;
  if (state != fp8d::v1::STARTING && state != fp8d::v1::RUNNING) return;
  const auto& t = e.job.timeouts();

  const int64_t deadline = MsFromDuration(t.attempt_deadline());
  if (deadline > 0 && now - run.start_ms > deadline) {
    FailAttempt(e, fp8d::v1::DEADLINE_EXCEEDED,
                "attempt ran past its deadline of " + Seconds(deadline));
    return;
  }
  const int64_t heartbeat = MsFromDuration(t.heartbeat_timeout());
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const RankRun& rank = run.ranks[r];
    if (heartbeat > 0 && !rank.exited && now - rank.last_seen_ms > heartbeat) {
      FailAttempt(e, fp8d::v1::HUNG,
                  "rank " + std::to_string(r) + " sent no heartbeat for " +
                      Seconds(now - rank.last_seen_ms) + " (heartbeat_timeout " +
                      Seconds(heartbeat) + ")");
      return;
    }
  }
  const int64_t progress = MsFromDuration(t.progress_timeout());
  // A rank that heartbeats but never gets to `started` (stuck in rendezvous or loading)
  // would otherwise hold its gang's slots forever: the progress timeout covers STARTING too.
  if (state == fp8d::v1::STARTING && progress > 0 && now - run.start_ms > progress) {
    FailAttempt(e, fp8d::v1::HUNG,
                "not every rank reported started within " + Seconds(progress) +
                    " (progress_timeout)");
    return;
  }
  if (state == fp8d::v1::RUNNING && progress > 0 && now - run.last_progress_ms > progress) {
    FailAttempt(e, fp8d::v1::HUNG,
                "no progress for " + Seconds(now - run.last_progress_ms) + " (progress_timeout " +
                    Seconds(progress) + "); a stuck collective looks like this");
  }
}

void JobManagerImpl::FlushDirtyRows(int64_t now, bool all) {
  std::vector<Job> rows;
  for (auto it = dirty_rows_.begin(); it != dirty_rows_.end();) {
    JobEntry* e = Find(*it);
    if (e == nullptr || !e->row_dirty) {  // evicted, or a transition's write carried it
      it = dirty_rows_.erase(it);
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
    it = dirty_rows_.erase(it);
  }
  if (rows.empty()) return;
  std::vector<std::string> names;
  for (const Job& j : rows) names.push_back(j.name());
  OnStore<Status>([rows = std::move(rows)](store::JobStore& s) { return s.UpdateJobs(rows); },
                  [this, names = std::move(names)](Status st) {
                    if (st.ok()) return;
                    spdlog::error("saving progress: {}", st.ToString());
                    // Dirty again: a later tick writes them once the store takes writes.
                    for (const std::string& name : names) {
                      if (JobEntry* e = Find(name); e != nullptr) {
                        e->row_dirty = true;
                        dirty_rows_.insert(name);
                      }
                    }
                  });
}

}  // namespace fp8d::core
