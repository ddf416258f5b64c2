// The one way a job changes state (design §2): check the transition against the table,
// apply it in memory (so later handlers see it), write job row + event in one transaction,
// and only when that write is done publish the new version to watchers and run the action
// that depends on it (launch, signal, acknowledge). Progress is the exception the design
// allows: delivered at once, written in batches.
#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"
#include "daemon/core/job_manager_impl.h"

namespace fp8d::core {

void JobManagerImpl::Transition(JobEntry& e, JobState to, const std::string& message,
                                std::function<void(Status)> after,
                                std::function<Status(store::JobStore&)> extra) {
  const JobState from = e.job.state();
  if (Status st = CheckTransition(from, to); !st.ok()) {
    spdlog::error("{}: refused: {}", e.job.name(), st.ToString());
    if (after) after(st);
    return;
  }
  const int64_t now = NowMs();
  e.job.set_state(to);
  if (from == fp8d::v1::QUEUED) queued_.erase(e.job.name());
  if (to == fp8d::v1::QUEUED) {
    queued_.insert(e.job.name());
    newly_queued_.push_back(e.job.name());
  }
  e.job.set_version(e.job.version() + 1);
  *e.job.mutable_update_time() = TimestampFromMs(now);
  if (to == fp8d::v1::STARTING && !e.job.has_start_time())
    *e.job.mutable_start_time() = TimestampFromMs(now);
  if (IsTerminal(to)) *e.job.mutable_end_time() = TimestampFromMs(now);

  fp8d::v1::JobEvent event;
  event.set_version(e.job.version());
  *event.mutable_time() = TimestampFromMs(now);
  event.set_from_state(from);
  event.set_to_state(to);
  event.set_message(message);

  e.outbox.push_back(JobEntry::Outgoing{e.job, false});
  ++e.pending_writes;
  e.row_dirty = false;  // this write carries the latest progress too
  e.row_saved_ms = now;
  spdlog::info("{}: {} -> {} (v{}): {}", e.job.name(), fp8d::v1::JobState_Name(from),
               fp8d::v1::JobState_Name(to), e.job.version(), message);

  const std::string name = e.job.name();
  const int64_t version = e.job.version();
  OnStore<Status>(
      [job = e.job, event, extra = std::move(extra)](store::JobStore& s) {
        Status st = s.UpdateJob(job, &event);
        if (st.ok() && extra) st = extra(s);
        return st;
      },
      [this, name, version, after = std::move(after)](Status st) {
        if (!st.ok()) {
          // The state machine has moved on in memory; all we can do is say so loudly. The
          // next write of this job (a later transition or progress batch) rewrites the row.
          spdlog::error("{}: persisting version {} failed: {}", name, version, st.ToString());
        }
        if (JobEntry* e = Find(name); e != nullptr) {
          --e->pending_writes;
          for (auto& out : e->outbox) {
            if (out.snapshot.version() == version) out.ready = true;
          }
          FlushOutbox(*e);
        }
        if (after) after(st);
        MaybeEvict(name);
      });
}

void JobManagerImpl::PublishChange(JobEntry& e) {
  e.job.set_version(e.job.version() + 1);
  *e.job.mutable_update_time() = TimestampFromMs(NowMs());
  e.row_dirty = true;
  dirty_rows_.insert(e.job.name());
  e.outbox.push_back(JobEntry::Outgoing{e.job, true});
  FlushOutbox(e);
}

void JobManagerImpl::FlushOutbox(JobEntry& e) {
  // In version order: a progress update never overtakes a state change still being written.
  while (!e.outbox.empty() && e.outbox.front().ready) {
    e.delivered = std::move(e.outbox.front().snapshot);
    e.outbox.erase(e.outbox.begin());
    watchers_.Deliver(e.delivered);
  }
}

void JobManagerImpl::MaybeEvict(const std::string& name) {
  JobEntry* e = Find(name);
  if (e == nullptr || !IsTerminal(e->job.state())) return;
  if (e->pending_writes > 0 || !e->outbox.empty()) return;
  if (e->run != nullptr && !e->run->AllExited()) return;  // still holds its slots
  // Every write for it was queued before now, so the store answers for it from here on.
  ReleaseOutputDir(e->job);
  with_run_.erase(name);
  queued_.erase(name);
  dirty_rows_.erase(name);
  jobs_.erase(name);
}

}  // namespace fp8d::core
