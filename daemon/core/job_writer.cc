// SPDX-License-Identifier: Apache-2.0
// StoreJobWriter (job_writer.h): check, persist, then publish and act.
#include "daemon/core/job_writer.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

using fp8::Status;
using fp8d::v1::JobState;

StoreJobWriter::StoreJobWriter(boost::asio::io_context& io, JobCache& cache, StoreThread& store,
                               const Clock* clock, std::function<void(const fp8d::v1::Job&)> evicted)
    : io_(io), cache_(cache), store_(store), clock_(clock), evicted_(std::move(evicted)) {}

void StoreJobWriter::Transition(JobEntry& e, JobState to, const std::string& message,
                                std::function<void(Status)> after, StoreWork extra) {
  const JobState from = e.job.state();
  if (Status st = CheckTransition(from, to); !st.ok()) {
    spdlog::error("{}: refused: {}", e.job.name(), st.ToString());
    if (after) after(st);
    return;
  }
  const int64_t now = clock_->NowMs();
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
  WriteNext(e.job.name());
}

void StoreJobWriter::Write(StoreWork work, std::function<void(Status)> then) {
  store_.Run<Status>(std::move(work), std::move(then));
}

void StoreJobWriter::WriteNext(const std::string& name) {
  JobEntry* e = cache_.Find(name);
  if (e == nullptr || e->writing || e->unwritten.empty()) return;
  e->writing = true;
  const JobEntry::PendingWrite& w = e->unwritten.front();
  struct Written {
    bool job_written = false;
    Status status;
  };
  const int64_t version = w.job.version();
  store_.Run<Written>(
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
        JobEntry* e = cache_.Find(name);  // never evicted while it has unwritten transitions
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
            if (!alive.expired()) WriteNext(name);
          });
          return;
        }
        if (e->write_failures > 0) {
          spdlog::info("{}: version {} persisted after {} failed tries", name, version,
                       e->write_failures);
        }
        e->write_failures = 0;
        e->write_error.clear();
        if (committed_) committed_(e->unwritten.front().job, e->unwritten.front().event);
        std::function<void(Status)> after = std::move(e->unwritten.front().after);
        e->unwritten.erase(e->unwritten.begin());
        cache_.Durable(*e, version);
        WriteNext(name);
        if (after) after(fp8::OkStatus());
        MaybeEvict(name);
      });
}

void StoreJobWriter::MaybeEvict(const std::string& name) {
  // Every write for it was queued before now, so the store answers for it from here on.
  if (std::unique_ptr<JobEntry> gone = cache_.EvictIfDone(name)) evicted_(gone->job);
}

}  // namespace fp8d::core
