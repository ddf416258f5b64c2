// SPDX-License-Identifier: Apache-2.0
// The current (or last) attempt of a job, as the manager's supervision tracks it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>

#include "daemon/launcher/launcher.h"
#include "daemon/store/job_store.h"

namespace fp8d::core {

// One rank of the current attempt, as the supervisor sees it.
struct RankRun {
  launcher::Slot slot;
  std::string handle;                   // the launcher's, saved for re-adoption (opaque here)
  int64_t offset = 0;                   // events consumed so far
  // The offset saved for re-adoption must not pass a line whose effect is not durable yet: a
  // `started` while the job is STARTING, a `done` or `error` before the verdict. After a
  // restart those lines are read again.
  std::optional<int64_t> started_pin;
  std::optional<int64_t> final_pin;
  int64_t last_seen_ms = 0;             // any event (heartbeat) from this rank
  bool started = false;
  bool done = false;
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  bool adopted_exit = false;
  google::protobuf::Struct result;  // its `done` event's result
};

// The job's current (or last) attempt while it holds slots.
struct AttemptRun {
  int number = 0;
  store::AttemptRecord record;   // what is persisted (placements, runtime, outcome)
  std::vector<RankRun> ranks;
  bool launched = false;         // Launch or Adopt returned: supervision applies
  bool finished = false;         // outcome decided (failed, succeeded, cancelling): no checks
  int64_t start_ms = 0;          // attempt deadline counts from here
  int64_t last_progress_ms = 0;  // progress timeout counts from here (RUNNING)
  int64_t kill_at_ms = 0;        // SIGKILL the groups at this time; 0 = not terminating
  bool sigkill_sent = false;
  // PreemptAttempt asked this run to stop (job_preemption.cc): SIGTERM goes out once the
  // PREEMPTED intent is durable, and the attempt ends PREEMPTED. The scheduler may count its
  // slots as soon free; they are free once every rank exited (AllExited).
  bool preempting = false;
  std::string preempt_reason;    // the job's pending_reason once it is QUEUED again
  bool preempt_durable = false;  // the intent is in the store: SIGTERM may go out
  bool exit_handled = false;     // OnRunExited ran (it must run once)
  bool runtime_dirty = false;    // offsets changed since the last PutAttempt
  int64_t runtime_saved_ms = 0;

  bool AllExited() const {
    return std::all_of(ranks.begin(), ranks.end(), [](const RankRun& r) { return r.exited; });
  }
  bool AnyLive() const { return !AllExited(); }
};

}  // namespace fp8d::core
