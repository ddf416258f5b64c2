// SPDX-License-Identifier: Apache-2.0
// DecideAttempt, one row per case: every failure class the supervisor can produce, every
// timeout, success, and inputs that must change nothing. Events are given as the lines a worker
// writes, so the rows also read the wire format (worker_event.proto as JSON).
#include <cctype>
#include <functional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/launcher/event_reader.h"
#include "daemon/core/attempt_verdict.h"

namespace fp8d::core {
namespace {

using fp8d::v1::FailureClass;
using Outcome = Verdict::Outcome;

constexpr int64_t kNow = 1'000'000;

// A two-rank attempt that every rank has started, seen just now.
AttemptView Running() {
  AttemptView a;
  a.state = fp8d::v1::RUNNING;
  a.launched = true;
  a.start_ms = kNow - 5'000;
  a.last_progress_ms = kNow - 1'000;
  a.ranks.assign(2, RankView{.last_seen_ms = kNow - 100, .started = true});
  return a;
}

AttemptView Starting() {
  AttemptView a = Running();
  a.state = fp8d::v1::STARTING;
  for (RankView& r : a.ranks) r.started = false;
  return a;
}

// Both ranks finished their work; rank 1 has exited 0.
AttemptView Finishing() {
  AttemptView a = Running();
  for (RankView& r : a.ranks) r.done = true;
  a.ranks[1].exited = true;
  a.ranks[1].exit_code = 0;
  return a;
}

// The scheduler asked the running attempt to stop (PreemptAttempt); SIGTERM went out.
AttemptView Preempting() {
  AttemptView a = Running();
  a.preempting = true;
  a.preempt_reason = "preempted by jobs/x";
  a.kill_at_ms = kNow + 20'000;
  return a;
}

AttemptView With(AttemptView a, const std::function<void(AttemptView&)>& change) {
  change(a);
  return a;
}

Timeouts Defaults() {
  return {.attempt_deadline_ms = 0, .heartbeat_ms = 30'000, .progress_ms = 300'000, .cancel_grace_ms = 10'000};
}

Timeouts Preemption() {
  Timeouts t = Defaults();
  t.preemption_grace_ms = 30'000;
  return t;
}

Timeouts Deadline(int64_t ms) {
  Timeouts t = Defaults();
  t.attempt_deadline_ms = ms;
  return t;
}

struct Event {
  int rank;
  std::string line;  // as the worker writes it
};
struct Exit {
  int rank;
  int exit_code = 0;
  int signal = 0;
  bool adopted = false;
  bool never_started = false;
  launcher::WorkerExit::Cause cause = launcher::WorkerExit::Cause::kProcess;
};
struct Tick {};

struct Row {
  std::string name;
  AttemptView attempt;
  std::variant<Event, Exit, Tick> input;
  int64_t now = kNow;
  Timeouts timeouts = Defaults();
  Outcome outcome = Outcome::kKeepRunning;
  FailureClass failure = fp8d::v1::FAILURE_CLASS_UNSPECIFIED;
  std::string message;  // a part of Verdict::message ("" = empty unless the attempt fails)
  std::function<void(const Verdict&)> check = nullptr;  // the effects, when there are any
  std::string timeout = "";  // the timeout this row covers (Timeouts field or knob name)
};

// Asserts that a verdict asks for nothing beyond its outcome (the "changes nothing" rows).
void NoEffects(const Verdict& v) {
  EXPECT_FALSE(v.rank_started);
  EXPECT_FALSE(v.to_running);
  EXPECT_FALSE(v.final_line);
  EXPECT_FALSE(v.rank_done.has_value());
  EXPECT_FALSE(v.restart_clocks);
  EXPECT_FALSE(v.pending_reason.has_value());
  EXPECT_FALSE(v.clear_pending_reason);
  EXPECT_FALSE(v.progress);
  EXPECT_FALSE(v.publish_progress);
  EXPECT_FALSE(v.checkpoint.has_value());
  EXPECT_FALSE(v.sigkill);
  EXPECT_FALSE(v.requeue);
  EXPECT_FALSE(v.uncounted);
}

std::string Error(const std::string& cls, const std::string& message = "boom") {
  return R"({"time":1.5,"error":{"class":")" + cls + R"(","message":")" + message + R"("}})";
}

const std::vector<Row>& Rows() {
  using C = launcher::WorkerExit::Cause;
  static const std::vector<Row> rows = {
      // ---- events that change nothing but the rank's liveness --------------------------------
      {.name = "heartbeat", .attempt = Running(), .input = Event{1, R"({"time":1.5,"heartbeat":{}})"},
       .check = NoEffects},
      {.name = "metric", .attempt = Running(),
       .input = Event{0, R"({"time":1.5,"metric":{"name":"eval_loss","value":3.2,"step":"10"}})"},
       .check = NoEffects},
      {.name = "progress after the outcome", .attempt = With(Running(), [](AttemptView& a) { a.finished = true; }),
       .input = Event{0, R"({"time":1.5,"progress":{"step":"3"}})"}, .check = NoEffects},
      {.name = "progress of a terminal job", .attempt = With(Running(), [](AttemptView& a) { a.state = fp8d::v1::FAILED; }),
       .input = Event{0, R"({"time":1.5,"progress":{"step":"3"}})"}, .check = NoEffects},
      {.name = "checkpoint not newer", .attempt = With(Running(), [](AttemptView& a) { a.newest_checkpoint_step = 40; }),
       .input = Event{1, R"({"time":1.5,"checkpoint":{"step":"40","path":"/c/step-40"}})"}, .check = NoEffects},
      {.name = "checkpoint without a path", .attempt = Running(),
       .input = Event{0, R"({"time":1.5,"checkpoint":{"step":"40"}})"}, .message = "without path or step",
       .check = NoEffects},
      {.name = "checkpoint of a terminal job", .attempt = With(Running(), [](AttemptView& a) { a.state = fp8d::v1::CANCELLED; }),
       .input = Event{0, R"({"time":1.5,"checkpoint":{"step":"40","path":"/c/step-40"}})"}, .check = NoEffects},
      {.name = "pending while running", .attempt = Running(),
       .input = Event{0, R"({"time":1.5,"pending":{"reason":"Resources"}})"}, .check = NoEffects},
      {.name = "error during the cancel", .attempt = With(Running(), [](AttemptView& a) { a.state = fp8d::v1::CANCELLING; }),
       .input = Event{0, Error("NUMERIC")},
       .check = [](const Verdict& v) { EXPECT_TRUE(v.final_line); }},
      {.name = "error after the outcome", .attempt = With(Running(), [](AttemptView& a) { a.finished = true; }),
       .input = Event{1, Error("DATA_ERROR")},
       .check = [](const Verdict& v) { EXPECT_TRUE(v.final_line); }},
      {.name = "unknown fields of a newer worker", .attempt = Running(),
       .input = Event{1, R"({"time":1.5,"heartbeat":{"gpu_temp":71},"hostname":"n1"})"}, .check = NoEffects},

      // ---- events that move the attempt along -------------------------------------------------
      {.name = "first of two ranks started", .attempt = Starting(),
       .input = Event{0, R"({"time":1.5,"started":{"rank":0,"world_size":2,"pid":"42"}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.rank_started);
         EXPECT_FALSE(v.to_running);
       }},
      {.name = "last rank started", .attempt = With(Starting(), [](AttemptView& a) { a.ranks[0].started = true; }),
       .input = Event{1, R"({"time":1.5,"started":{"rank":1,"world_size":2,"pid":"43"}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.rank_started);
         EXPECT_TRUE(v.to_running);
         EXPECT_FALSE(v.clear_pending_reason);
       }},
      {.name = "started clears the launcher's pending reason",
       .attempt = With(Starting(), [](AttemptView& a) { a.pending_reason = "Resources"; }),
       .input = Event{0, R"({"time":1.5,"started":{}})"},
       .check = [](const Verdict& v) { EXPECT_TRUE(v.clear_pending_reason); }},
      {.name = "progress of rank 0", .attempt = Running(),
       .input = Event{0, R"({"time":1.5,"progress":{"step":"3","loss":"NaN","fp8_amax_max":448}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.progress);
         EXPECT_TRUE(v.publish_progress);
       }},
      {.name = "progress of rank 1", .attempt = Running(),
       .input = Event{1, R"({"time":1.5,"progress":{"step":"3"}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.progress);
         EXPECT_FALSE(v.publish_progress);
       }},
      {.name = "newer checkpoint", .attempt = With(Running(), [](AttemptView& a) { a.newest_checkpoint_step = 20; }),
       .input = Event{0, R"({"time":1.5,"checkpoint":{"step":"40","path":"/c/step-40","checksum":"x"}})"},
       .check = [](const Verdict& v) {
         ASSERT_TRUE(v.checkpoint.has_value());
         EXPECT_EQ(v.checkpoint->step(), 40);
         EXPECT_EQ(v.checkpoint->path(), "/c/step-40");
       }},
      {.name = "checkpoint while stopping", .attempt = With(Running(), [](AttemptView& a) {
         a.state = fp8d::v1::CANCELLING;
         a.finished = true;
       }),
       .input = Event{0, R"({"time":1.5,"checkpoint":{"step":"7","path":"/c/step-7"}})"},
       .check = [](const Verdict& v) { EXPECT_TRUE(v.checkpoint.has_value()); }},
      {.name = "done", .attempt = Running(),
       .input = Event{0, R"({"time":1.5,"done":{"result":{"final_loss":2.5}}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.final_line);
         EXPECT_EQ(v.rank_done, true);
       }},
      {.name = "done after SIGTERM does not count", .attempt = Running(),
       .input = Event{0, R"({"time":1.5,"done":{"result":{"interrupted":true}}})"},
       .check = [](const Verdict& v) { EXPECT_EQ(v.rank_done, false); }},
      {.name = "pending restarts the clocks", .attempt = Starting(),
       .input = Event{0, R"({"time":1.5,"pending":{"reason":"Resources","slurm_job_id":"12"}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.restart_clocks);
         EXPECT_EQ(v.pending_reason, "Resources");
       }},
      {.name = "pending for the same reason", .attempt = With(Starting(), [](AttemptView& a) { a.pending_reason = "Resources"; }),
       .input = Event{0, R"({"time":1.5,"pending":{"reason":"Resources"}})"},
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.restart_clocks);
         EXPECT_FALSE(v.pending_reason.has_value());
       }},

      // ---- failures reported by the worker ----------------------------------------------------
      {.name = "error INVALID_SPEC", .attempt = Running(), .input = Event{0, Error("INVALID_SPEC", "lr > 10")},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INVALID_SPEC, .message = "rank 0: lr > 10"},
      {.name = "error DATA_ERROR", .attempt = Running(), .input = Event{1, Error("DATA_ERROR")},
       .outcome = Outcome::kFail, .failure = fp8d::v1::DATA_ERROR, .message = "rank 1: boom"},
      {.name = "error NUMERIC", .attempt = Running(), .input = Event{0, Error("NUMERIC")},
       .outcome = Outcome::kFail, .failure = fp8d::v1::NUMERIC},
      {.name = "error INTERNAL_ERROR", .attempt = Starting(), .input = Event{0, Error("INTERNAL_ERROR")},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INTERNAL_ERROR},
      {.name = "error RESOURCE_EXHAUSTED", .attempt = Running(), .input = Event{0, Error("RESOURCE_EXHAUSTED")},
       .outcome = Outcome::kFail, .failure = fp8d::v1::RESOURCE_EXHAUSTED},
      {.name = "error of a class this daemon does not know", .attempt = Running(), .input = Event{0, Error("GREMLINS", "")},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INTERNAL_ERROR, .message = "worker reported INTERNAL_ERROR"},

      // ---- exits ------------------------------------------------------------------------------
      {.name = "last rank exits 0 after done", .attempt = Finishing(), .input = Exit{0},
       .outcome = Outcome::kSucceed},
      {.name = "re-adopted rank ends after done", .attempt = Finishing(), .input = Exit{0, -1, 0, true},
       .outcome = Outcome::kSucceed},
      {.name = "short job: exits before every started was seen",
       .attempt = With(Finishing(), [](AttemptView& a) {
         a.state = fp8d::v1::STARTING;
         for (RankView& r : a.ranks) r.started = false;
       }),
       .input = Exit{0}, .outcome = Outcome::kSucceed},
      {.name = "one rank exits 0, the other still runs", .attempt = With(Running(), [](AttemptView& a) { a.ranks[0].done = true; }),
       .input = Exit{0}, .check = NoEffects},
      {.name = "exit during the cancel", .attempt = With(Running(), [](AttemptView& a) { a.state = fp8d::v1::CANCELLING; }),
       .input = Exit{0, 0, 15}, .check = NoEffects},
      {.name = "exit after the outcome", .attempt = With(Running(), [](AttemptView& a) { a.finished = true; }),
       .input = Exit{1, 70}, .check = NoEffects},
      {.name = "exit 64", .attempt = Running(), .input = Exit{0, 64},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INVALID_SPEC, .message = "rank 0 exited with code 64"},
      {.name = "exit 65", .attempt = Running(), .input = Exit{1, 65},
       .outcome = Outcome::kFail, .failure = fp8d::v1::DATA_ERROR},
      {.name = "exit 70", .attempt = Running(), .input = Exit{1, 70},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INTERNAL_ERROR},
      {.name = "exit 75", .attempt = Running(), .input = Exit{1, 75},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INTERNAL_ERROR},
      {.name = "exit 3", .attempt = Running(), .input = Exit{0, 3},
       .outcome = Outcome::kFail, .failure = fp8d::v1::WORKER_CRASH},
      {.name = "killed by a signal", .attempt = Running(), .input = Exit{1, -1, 9},
       .outcome = Outcome::kFail, .failure = fp8d::v1::WORKER_CRASH, .message = "killed by signal 9"},
      {.name = "exit 0 without done", .attempt = Running(), .input = Exit{0},
       .outcome = Outcome::kFail, .failure = fp8d::v1::WORKER_CRASH, .message = "exited 0 without reporting done"},
      {.name = "re-adopted rank ends without done", .attempt = Running(), .input = Exit{0, -1, 0, true},
       .outcome = Outcome::kFail, .failure = fp8d::v1::WORKER_CRASH, .message = "exited without reporting done"},
      {.name = "rank never started (controller restart)", .attempt = Starting(),
       .input = Exit{1, -1, 0, false, true}, .outcome = Outcome::kFail, .failure = fp8d::v1::CONTROLLER_RESTART,
       .check = [](const Verdict& v) { EXPECT_TRUE(v.uncounted); }},
      {.name = "launcher: node lost", .attempt = Running(), .input = Exit{0, -1, 0, false, false, C::kNodeLost},
       .outcome = Outcome::kFail, .failure = fp8d::v1::NODE_LOST},
      {.name = "launcher: preempted", .attempt = Running(), .input = Exit{0, -1, 0, false, false, C::kPreempted},
       .outcome = Outcome::kFail, .failure = fp8d::v1::NODE_LOST},
      {.name = "launcher: time limit", .attempt = Running(), .input = Exit{0, -1, 0, false, false, C::kTimeLimit},
       .outcome = Outcome::kFail, .failure = fp8d::v1::DEADLINE_EXCEEDED},
      {.name = "launcher: out of memory", .attempt = Finishing(), .input = Exit{0, 0, 0, false, false, C::kOutOfMemory},
       .outcome = Outcome::kFail, .failure = fp8d::v1::RESOURCE_EXHAUSTED},
      {.name = "launcher: cancelled outside", .attempt = Running(),
       .input = Exit{0, -1, 0, false, false, C::kCancelledOutside},
       .outcome = Outcome::kFail, .failure = fp8d::v1::WORKER_CRASH},
      {.name = "launcher: can never start", .attempt = Starting(), .input = Exit{0, -1, 0, false, false, C::kRejected},
       .outcome = Outcome::kFail, .failure = fp8d::v1::INVALID_SPEC},

      // ---- preemption ---------------------------------------------------------------------------
      {.name = "preempted rank exits 76 after its checkpoint", .attempt = Preempting(), .input = Exit{0, 76},
       .outcome = Outcome::kFail, .failure = fp8d::v1::PREEMPTED,
       .message = "preempted by jobs/x (rank 0 exited with code 76); requeued, not counted",
       .check = [](const Verdict& v) { EXPECT_TRUE(v.uncounted); }},
      {.name = "preempted rank killed after the grace", .attempt = Preempting(), .input = Exit{1, -1, 9},
       .outcome = Outcome::kFail, .failure = fp8d::v1::PREEMPTED, .message = "killed by signal 9",
       .check = [](const Verdict& v) { EXPECT_TRUE(v.uncounted); }},
      {.name = "preempted rank of an older worker exits 75", .attempt = Preempting(), .input = Exit{0, 75},
       .outcome = Outcome::kFail, .failure = fp8d::v1::PREEMPTED,
       .check = [](const Verdict& v) { EXPECT_TRUE(v.uncounted); }},
      {.name = "preempted re-adopted rank ends", .attempt = Preempting(), .input = Exit{0, -1, 0, true},
       .outcome = Outcome::kFail, .failure = fp8d::v1::PREEMPTED},
      {.name = "preempted rank ended by the launcher", .attempt = Preempting(),
       .input = Exit{0, -1, 0, false, false, C::kCancelledOutside}, .outcome = Outcome::kFail,
       .failure = fp8d::v1::PREEMPTED, .message = "launcher says so"},
      {.name = "preempted attempt that finished its work within the grace",
       .attempt = With(Finishing(), [](AttemptView& a) { a.preempting = true; }), .input = Exit{0, 0},
       .outcome = Outcome::kSucceed},
      {.name = "exit 76 without a preemption is a crash", .attempt = Running(), .input = Exit{0, 76},
       .outcome = Outcome::kFail, .failure = fp8d::v1::WORKER_CRASH, .message = "rank 0 exited with code 76",
       .check = [](const Verdict& v) { EXPECT_FALSE(v.uncounted); }},
      {.name = "error while preempted does not fail the attempt", .attempt = Preempting(),
       .input = Event{1, Error("INTERNAL_ERROR", "collective cut short")},
       .check = [](const Verdict& v) { EXPECT_TRUE(v.final_line); }},
      {.name = "preempted event", .attempt = Preempting(),
       .input = Event{0, R"({"time":1.5,"preempted":{"step":"6","checkpoint":"/c/step-6"}})"}, .check = NoEffects},
      {.name = "no progress timeout while preempted",
       .attempt = With(Preempting(), [](AttemptView& a) { a.last_progress_ms = kNow - 300'001; }),
       .input = Tick{}, .check = NoEffects, .timeout = "progress_timeout"},
      {.name = "no heartbeat timeout while preempted",
       .attempt = With(Preempting(), [](AttemptView& a) { a.ranks[0].last_seen_ms = kNow - 30'001; }),
       .input = Tick{}, .check = NoEffects, .timeout = "heartbeat_timeout"},
      {.name = "preemption grace over: SIGKILL",
       .attempt = With(Preempting(), [](AttemptView& a) { a.kill_at_ms = kNow; }),
       .input = Tick{}, .timeouts = Preemption(), .message = "still running 30.0 s after SIGTERM",
       .check = [](const Verdict& v) { EXPECT_TRUE(v.sigkill); }, .timeout = "preemption_grace"},
      {.name = "preemption grace not over", .attempt = Preempting(), .input = Tick{},
       .timeouts = Preemption(), .check = NoEffects, .timeout = "preemption_grace"},

      // ---- the clock --------------------------------------------------------------------------
      {.name = "tick with nothing due", .attempt = Running(), .input = Tick{}, .check = NoEffects},
      {.name = "tick with every timeout off, an hour later", .attempt = Running(), .input = Tick{},
       .now = kNow + 3'600'000, .timeouts = {}, .check = NoEffects},
      {.name = "heartbeat timeout", .attempt = With(Running(), [](AttemptView& a) { a.ranks[1].last_seen_ms = kNow - 30'001; }),
       .input = Tick{}, .outcome = Outcome::kFail, .failure = fp8d::v1::HUNG,
       .message = "rank 1 sent no heartbeat for 30.0 s (heartbeat_timeout 30.0 s)", .timeout = "heartbeat_timeout"},
      {.name = "heartbeat timeout not yet over", .attempt = With(Running(), [](AttemptView& a) { a.ranks[1].last_seen_ms = kNow - 30'000; }),
       .input = Tick{}, .check = NoEffects, .timeout = "heartbeat_timeout"},
      {.name = "an exited rank needs no heartbeat",
       .attempt = With(Running(), [](AttemptView& a) {
         a.ranks[1].last_seen_ms = 0;
         a.ranks[1].exited = true;
       }),
       .input = Tick{}, .check = NoEffects, .timeout = "heartbeat_timeout"},
      {.name = "not every rank started in time", .attempt = With(Starting(), [](AttemptView& a) { a.start_ms = kNow - 300'001; }),
       .input = Tick{}, .outcome = Outcome::kFail, .failure = fp8d::v1::HUNG,
       .message = "not every rank reported started within 300.0 s", .timeout = "progress_timeout"},
      {.name = "no progress (stall)", .attempt = With(Running(), [](AttemptView& a) { a.last_progress_ms = kNow - 300'001; }),
       .input = Tick{}, .outcome = Outcome::kFail, .failure = fp8d::v1::HUNG, .message = "no progress for 300.0 s",
       .timeout = "progress_timeout"},
      {.name = "no progress, attempt already decided",
       .attempt = With(Running(), [](AttemptView& a) {
         a.last_progress_ms = 0;
         a.finished = true;
       }),
       .input = Tick{}, .check = NoEffects, .timeout = "progress_timeout"},
      {.name = "attempt deadline", .attempt = With(Running(), [](AttemptView& a) { a.start_ms = kNow - 60'001; }),
       .input = Tick{}, .timeouts = Deadline(60'000), .outcome = Outcome::kFail,
       .failure = fp8d::v1::DEADLINE_EXCEEDED, .message = "past its deadline of 60.0 s", .timeout = "attempt_deadline"},
      {.name = "attempt deadline not reached", .attempt = With(Running(), [](AttemptView& a) { a.start_ms = kNow - 60'000; }),
       .input = Tick{}, .timeouts = Deadline(60'000), .check = NoEffects, .timeout = "attempt_deadline"},
      {.name = "cancel grace over: SIGKILL",
       .attempt = With(Running(), [](AttemptView& a) {
         a.state = fp8d::v1::CANCELLING;
         a.finished = true;
         a.kill_at_ms = kNow;
       }),
       .input = Tick{}, .message = "still running 10.0 s after SIGTERM",
       .check = [](const Verdict& v) { EXPECT_TRUE(v.sigkill); }, .timeout = "cancel_grace"},
      {.name = "cancel grace not over",
       .attempt = With(Running(), [](AttemptView& a) {
         a.state = fp8d::v1::CANCELLING;
         a.finished = true;
         a.kill_at_ms = kNow + 1;
       }),
       .input = Tick{}, .check = NoEffects, .timeout = "cancel_grace"},
      {.name = "SIGKILL sent once",
       .attempt = With(Running(), [](AttemptView& a) {
         a.state = fp8d::v1::RETRY_WAIT;
         a.finished = true;
         a.kill_at_ms = kNow - 5;
         a.sigkill_sent = true;
         a.retry_at_ms = kNow + 10;
       }),
       .input = Tick{}, .check = NoEffects, .timeout = "cancel_grace"},
      {.name = "failed attempt's ranks killed while its job waits to retry",
       .attempt = With(Running(), [](AttemptView& a) {
         a.state = fp8d::v1::RETRY_WAIT;
         a.finished = true;
         a.kill_at_ms = kNow - 5;
         a.retry_at_ms = kNow + 10;
       }),
       .input = Tick{}, .message = "SIGKILL",
       .check = [](const Verdict& v) {
         EXPECT_TRUE(v.sigkill);
         EXPECT_FALSE(v.requeue);
       },
       .timeout = "cancel_grace"},
      {.name = "backoff elapsed",
       .attempt = With(AttemptView{}, [](AttemptView& a) {
         a.state = fp8d::v1::RETRY_WAIT;
         a.retry_at_ms = kNow;
       }),
       .input = Tick{}, .check = [](const Verdict& v) { EXPECT_TRUE(v.requeue); }, .timeout = "retry_backoff"},
      {.name = "backoff not elapsed",
       .attempt = With(AttemptView{}, [](AttemptView& a) {
         a.state = fp8d::v1::RETRY_WAIT;
         a.retry_at_ms = kNow + 1;
       }),
       .input = Tick{}, .check = NoEffects, .timeout = "retry_backoff"},
  };
  return rows;
}

class VerdictTable : public ::testing::TestWithParam<size_t> {};

TEST_P(VerdictTable, Row) {
  const Row& row = Rows()[GetParam()];
  SCOPED_TRACE(row.name);
  launcher::WorkerEvent event;
  launcher::WorkerExit exit;
  SupervisorInput input = TickInput{};
  if (const Event* e = std::get_if<Event>(&row.input)) {
    std::optional<fp8d::v1::WorkerEvent> parsed = launcher::ParseEventLine(e->line);
    ASSERT_TRUE(parsed.has_value()) << e->line;
    event.rank = e->rank;
    event.event = *parsed;
    input = &event;
  } else if (const Exit* x = std::get_if<Exit>(&row.input)) {
    exit.rank = x->rank;
    exit.exit_code = x->exit_code;
    exit.signal = x->signal;
    exit.adopted = x->adopted;
    exit.never_started = x->never_started;
    exit.cause = x->cause;
    exit.cause_message = "launcher says so";
    input = &exit;
  }
  const Verdict v = DecideAttempt(row.attempt, input, row.now, row.timeouts);
  EXPECT_EQ(static_cast<int>(v.outcome), static_cast<int>(row.outcome));
  EXPECT_EQ(fp8d::v1::FailureClass_Name(v.failure), fp8d::v1::FailureClass_Name(row.failure));
  if (row.outcome == Outcome::kFail) {
    EXPECT_NE(v.message, "");  // the job's error says why
    EXPECT_NE(v.message.find(row.message), std::string::npos) << v.message;
  } else if (row.message.empty()) {
    EXPECT_EQ(v.message, "");
  } else {
    EXPECT_NE(v.message.find(row.message), std::string::npos) << v.message;
  }
  if (row.check) row.check(v);
}

INSTANTIATE_TEST_SUITE_P(Rows, VerdictTable, ::testing::Range<size_t>(0, Rows().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name;
                           for (char c : Rows()[info.param].name) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// A new FailureClass needs a row: each one (but UNSPECIFIED) must be produced by some row.
TEST(VerdictCoverage, EveryFailureClassHasARow) {
  std::set<int> produced;
  for (const Row& row : Rows()) {
    if (row.outcome == Outcome::kFail) produced.insert(row.failure);
  }
  const google::protobuf::EnumDescriptor* classes = fp8d::v1::FailureClass_descriptor();
  for (int i = 0; i < classes->value_count(); ++i) {
    const int number = classes->value(i)->number();
    if (number == fp8d::v1::FAILURE_CLASS_UNSPECIFIED) continue;
    // Decided before any attempt exists (a dependency of the job failed), never by a verdict.
    if (number == fp8d::v1::DEPENDENCY_FAILED) continue;
    EXPECT_TRUE(produced.count(number)) << classes->value(i)->name() << " has no row";
  }
}

// Each timeout of the job (every fp8d.v1.Timeouts field) and of the daemon has rows.
TEST(VerdictCoverage, EveryTimeoutHasARow) {
  std::set<std::string> covered;
  for (const Row& row : Rows()) covered.insert(row.timeout);
  const google::protobuf::Descriptor* timeouts = fp8d::v1::Timeouts::descriptor();
  for (int i = 0; i < timeouts->field_count(); ++i) {
    EXPECT_TRUE(covered.count(timeouts->field(i)->name())) << timeouts->field(i)->name() << " has no row";
  }
  for (const char* knob : {"cancel_grace", "preemption_grace", "retry_backoff"}) EXPECT_TRUE(covered.count(knob)) << knob;
}

// Every ErrorClass a worker can send maps to the FailureClass of the same name.
TEST(VerdictCoverage, WorkerErrorClassesKeepTheirNames) {
  const google::protobuf::EnumDescriptor* classes = fp8d::v1::WorkerEvent::ErrorClass_descriptor();
  for (int i = 0; i < classes->value_count(); ++i) {
    const auto cls = static_cast<fp8d::v1::WorkerEvent::ErrorClass>(classes->value(i)->number());
    if (cls == fp8d::v1::WorkerEvent::ERROR_CLASS_UNSPECIFIED) {
      EXPECT_EQ(FailureClassOf(cls), fp8d::v1::INTERNAL_ERROR);
      continue;
    }
    EXPECT_EQ(fp8d::v1::FailureClass_Name(FailureClassOf(cls)), classes->value(i)->name());
  }
}

}  // namespace
}  // namespace fp8d::core
