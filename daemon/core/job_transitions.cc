// The one way a job changes state (docs/design.md §2): check the transition against the table,
// apply it in memory (so later handlers see it), write job row + event in one transaction,
// and only when that write is done publish the new version to watchers and run the action
// that depends on it (launch, signal, acknowledge). Progress is the exception the design
// allows: delivered at once, written in batches. A write that fails is kept and tried again
// with backoff; until it commits nothing depending on it is published or done.
#include <algorithm>
#include <chrono>
#include <memory>

#include <boost/asio/steady_timer.hpp>
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
  cache_.SetState(e, to);
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

  cache_.AwaitDurable(e, now);
  spdlog::info("{}: {} -> {} (v{}): {}", e.job.name(), fp8d::v1::JobState_Name(from),
               fp8d::v1::JobState_Name(to), e.job.version(), message);
  e.unwritten.push_back(
      JobEntry::PendingWrite{e.job, std::move(event), std::move(extra), std::move(after), false});
  WriteTransitions(e.job.name());
}

void JobManagerImpl::WriteTransitions(const std::string& name) {
  JobEntry* e = Find(name);
  if (e == nullptr || e->writing || e->unwritten.empty()) return;
  e->writing = true;
  const JobEntry::PendingWrite& w = e->unwritten.front();
  struct Written {
    bool job_written = false;
    Status status;
  };
  const int64_t version = w.job.version();
  OnStore<Written>(
      [job = w.job, event = w.event, extra = w.extra,
       job_written = w.job_written](store::JobStore& s) {
        Written out{job_written, fp8::OkStatus()};
        if (!out.job_written) {
          out.status = s.UpdateJob(job, &event);
          out.job_written = out.status.ok();
        }
        if (out.status.ok() && extra) out.status = extra(s);
        return out;
      },
      [this, name, version](Written written) {
        JobEntry* e = Find(name);  // never evicted while it has unwritten transitions
        if (e == nullptr || e->unwritten.empty()) return;
        e->writing = false;
        e->unwritten.front().job_written = written.job_written;
        if (!written.status.ok()) {
          // Nothing is published or acted on: watchers and GetJob keep the last durable
          // version, and the write is tried again until it commits (a full disk may free up).
          ++e->write_failures;
          e->write_error = written.status.message();
          const int64_t delay_ms = std::min<int64_t>(int64_t{100} << std::min(e->write_failures - 1, 6),
                                                     5000);
          spdlog::error("{}: persisting version {} failed ({} time(s)): {}; retrying in {} ms",
                        name, version, e->write_failures, written.status.ToString(), delay_ms);
          auto timer = std::make_shared<boost::asio::steady_timer>(io_);
          timer->expires_after(std::chrono::milliseconds(delay_ms));
          std::weak_ptr<int> alive = alive_;
          timer->async_wait([this, alive, timer, name](const boost::system::error_code&) {
            if (!alive.expired()) WriteTransitions(name);
          });
          return;
        }
        if (e->write_failures > 0) {
          spdlog::info("{}: version {} persisted after {} failed tries", name, version,
                       e->write_failures);
        }
        e->write_failures = 0;
        e->write_error.clear();
        std::function<void(Status)> after = std::move(e->unwritten.front().after);
        e->unwritten.erase(e->unwritten.begin());
        cache_.Durable(*e, version);
        WriteTransitions(name);
        if (after) after(fp8::OkStatus());
        MaybeEvict(name);
      });
}

void JobManagerImpl::MaybeEvict(const std::string& name) {
  // Every write for it was queued before now, so the store answers for it from here on.
  if (std::unique_ptr<JobEntry> gone = cache_.EvictIfDone(name)) ReleaseOutputDir(gone->job);
}

}  // namespace fp8d::core
