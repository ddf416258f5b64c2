// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/job_cache.h"

#include <utility>

#include "common/status.h"
#include "daemon/core/job_fields.h"
#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

using fp8d::v1::Job;

JobCache::JobCache(std::function<void(const Job&)> publish) : publish_(std::move(publish)) {}

JobEntry* JobCache::Find(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const JobEntry* JobCache::Find(const std::string& name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void JobCache::ForEach(const std::function<void(JobEntry&)>& fn) {
  for (auto& [name, e] : jobs_) fn(*e);
}

void JobCache::Add(Job job, int64_t now_ms) {
  auto [it, inserted] = jobs_.try_emplace(job.name());
  if (!inserted) return;
  auto entry = std::make_unique<JobEntry>();
  entry->create_seq = next_create_seq_++;
  entry->row_saved_ms = now_ms;
  if (job.state() == fp8d::v1::QUEUED) {
    queued_.insert(queued_.end(), it->first);  // names arrive in creation order: append
    newly_queued_.push_back(it->first);
    Enqueue(job);
  }
  entry->job = std::move(job);
  it->second = std::move(entry);
}

void JobCache::SetState(JobEntry& e, fp8d::v1::JobState to) {
  e.BeforeChange();
  const fp8d::v1::JobState from = e.job.state();
  e.job.set_state(to);
  if (from == fp8d::v1::QUEUED && queued_.erase(e.job.name()) > 0) Dequeue(e.job);
  if (to == fp8d::v1::QUEUED && queued_.insert(e.job.name()).second) {
    newly_queued_.push_back(e.job.name());
    Enqueue(e.job);
  }
}

void JobCache::AwaitDurable(JobEntry& e, int64_t now_ms) {
  // Without the copy, GetJob would already answer the change that is waiting for its write.
  FP8_CHECK(e.delivered_copy != nullptr);
  e.outbox.push_back(JobEntry::Outgoing{e.job, false});
  ++e.pending_writes;
  e.row_dirty = false;  // this write carries the latest progress too
  e.row_saved_ms = now_ms;
}

void JobCache::Durable(JobEntry& e, int64_t version) {
  --e.pending_writes;
  for (auto& out : e.outbox) {
    if (out.snapshot.version() == version) out.ready = true;
  }
  FlushOutbox(e);
}

void JobCache::PublishChange(JobEntry& e, int64_t now_ms) {
  e.BeforeChange();
  e.job.set_version(e.job.version() + 1);
  *e.job.mutable_update_time() = TimestampFromMs(now_ms);
  e.row_dirty = true;
  dirty_rows_.insert(e.job.name());
  e.outbox.push_back(JobEntry::Outgoing{e.job, true});
  FlushOutbox(e);
}

void JobCache::FlushOutbox(JobEntry& e) {
  // In version order: a progress update never overtakes a state change still being written.
  while (!e.outbox.empty() && e.outbox.front().ready) {
    *e.delivered_copy = std::move(e.outbox.front().snapshot);
    e.outbox.erase(e.outbox.begin());
    publish_(*e.delivered_copy);
  }
}

std::unique_ptr<JobEntry> JobCache::EvictIfDone(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return nullptr;
  const JobEntry& e = *it->second;
  if (!IsTerminal(e.job.state()) || e.pending_writes > 0 || !e.outbox.empty()) return nullptr;
  if (e.run != nullptr && !e.run->AllExited()) return nullptr;  // still holds its slots
  with_run_.erase(name);
  if (queued_.erase(name) > 0) Dequeue(e.job);
  dirty_rows_.erase(name);
  std::unique_ptr<JobEntry> gone = std::move(it->second);
  jobs_.erase(it);
  return gone;
}

const Job& JobCache::Newest(const Job& stored) const {
  const JobEntry* e = Find(stored.name());
  return (e != nullptr && e->delivered().version() > stored.version()) ? e->delivered() : stored;
}

int64_t JobCache::CountRunning() const {
  // with_run_ holds only the jobs that have (had) an attempt, so this costs what runs, not
  // what waits in the queue.
  int64_t running = 0;
  for (const std::string& name : with_run_) {
    const JobEntry* e = Find(name);
    if (e == nullptr) continue;
    const fp8d::v1::JobState state = e->job.state();
    running += state == fp8d::v1::STARTING || state == fp8d::v1::RUNNING ||
               state == fp8d::v1::CANCELLING;
  }
  return running;
}

// A queued job's queue, priority and ranks do not change while it waits.
void JobCache::Enqueue(const Job& job) {
  QueuedShapes& shapes = queued_shapes_[job.queue()];
  shapes.priorities.insert(job.priority());
  shapes.ranks.insert(job.resources().ranks());
}

void JobCache::Dequeue(const Job& job) {
  auto it = queued_shapes_.find(job.queue());
  FP8_CHECK(it != queued_shapes_.end());
  auto priority = it->second.priorities.find(job.priority());
  auto ranks = it->second.ranks.find(job.resources().ranks());
  FP8_CHECK(priority != it->second.priorities.end() && ranks != it->second.ranks.end());
  it->second.priorities.erase(priority);
  it->second.ranks.erase(ranks);
  if (it->second.priorities.empty()) queued_shapes_.erase(it);
}

std::vector<QueuedSummary> JobCache::QueuedSummaries() const {
  std::vector<QueuedSummary> out;
  out.reserve(queued_shapes_.size());
  for (const auto& [queue, shapes] : queued_shapes_) {
    out.push_back({queue, *shapes.priorities.rbegin(), *shapes.ranks.begin()});
  }
  return out;
}

std::vector<std::string> JobCache::TakeNewlyQueued() {
  std::vector<std::string> fresh;
  fresh.swap(newly_queued_);
  return fresh;
}

}  // namespace fp8d::core
