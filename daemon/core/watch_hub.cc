// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/watch_hub.h"

#include <utility>

#include "daemon/core/job_lifecycle.h"

namespace fp8d::core {

int64_t WatchHub::Subscribe(const std::string& name, int64_t since_version, UpdateFn on_update,
                            EndFn on_end) {
  const int64_t id = next_id_++;
  subs_[id] = Subscriber{name, since_version, std::move(on_update), std::move(on_end)};
  by_name_.emplace(name, id);
  return id;
}

void WatchHub::Unsubscribe(int64_t id) {
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  auto range = by_name_.equal_range(it->second.name);
  for (auto n = range.first; n != range.second; ++n) {
    if (n->second == id) {
      by_name_.erase(n);
      break;
    }
  }
  subs_.erase(it);
}

void WatchHub::Deliver(const fp8d::v1::Job& job) {
  // Collect first: a callback may Unsubscribe (itself or others) while we iterate.
  std::vector<int64_t> ids;
  auto range = by_name_.equal_range(job.name());
  for (auto it = range.first; it != range.second; ++it) ids.push_back(it->second);
  for (int64_t id : ids) DeliverOne(id, job);
}

void WatchHub::DeliverTo(int64_t id, const fp8d::v1::Job& job) { DeliverOne(id, job); }

void WatchHub::DeliverOne(int64_t id, const fp8d::v1::Job& job) {
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  if (job.version() > it->second.seen_version) {
    it->second.seen_version = job.version();
    UpdateFn on_update = it->second.on_update;  // copy: the callback may unsubscribe
    on_update(job);
  }
  if (IsTerminal(job.state())) End(id, fp8::OkStatus());
}

void WatchHub::End(int64_t id, fp8::Status status) {
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  EndFn on_end = std::move(it->second.on_end);
  Unsubscribe(id);
  if (on_end) on_end(std::move(status));
}

void WatchHub::EndAll(fp8::Status status) {
  std::vector<int64_t> ids;
  for (const auto& [id, sub] : subs_) ids.push_back(id);
  for (int64_t id : ids) End(id, status);
}

}  // namespace fp8d::core
