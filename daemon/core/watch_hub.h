// SPDX-License-Identifier: Apache-2.0
// Watch fan-out (WatchJob, docs/design.md §3): subscribers per job, each told every version of the
// job greater than the last one it saw, in order, and ended once the job is terminal.
// Single-threaded on the manager's io_context. The manager decides WHEN a version is ready
// (state changes only once durable; progress at once) and calls Deliver in version order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::core {

class WatchHub {
 public:
  using UpdateFn = std::function<void(const fp8d::v1::Job&)>;
  using EndFn = std::function<void(fp8::Status)>;

  // Registers a subscriber that has seen versions up to `since_version`. Returns its id.
  int64_t Subscribe(const std::string& name, int64_t since_version, UpdateFn on_update,
                    EndFn on_end);
  // Forgets the subscriber without calling on_end (the client went away). Unknown ids and
  // calls from inside a callback are fine.
  void Unsubscribe(int64_t id);

  // Sends `job` to every subscriber of job.name() that has not seen its version; when the job
  // is terminal, then ends those subscribers with OK.
  void Deliver(const fp8d::v1::Job& job);
  // Same, for one subscriber only (its catch-up snapshot).
  void DeliverTo(int64_t id, const fp8d::v1::Job& job);
  // Ends one subscriber with `status` (e.g. NOT_FOUND).
  void End(int64_t id, fp8::Status status);
  // Ends every subscriber (shutdown).
  void EndAll(fp8::Status status);

  bool Has(int64_t id) const { return subs_.count(id) > 0; }
  size_t size() const { return subs_.size(); }

 private:
  struct Subscriber {
    std::string name;
    int64_t seen_version = 0;
    UpdateFn on_update;
    EndFn on_end;
  };
  void DeliverOne(int64_t id, const fp8d::v1::Job& job);

  int64_t next_id_ = 1;
  std::map<int64_t, Subscriber> subs_;
  std::multimap<std::string, int64_t> by_name_;
};

}  // namespace fp8d::core
