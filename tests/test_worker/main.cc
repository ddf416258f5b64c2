// SPDX-License-Identifier: Apache-2.0
// fp8-test-worker: a stand-in for fp8-worker that speaks the worker contract (docs/design.md §4,
// event schema in worker/common/events.h) and misbehaves on request, so the launcher, the
// manager and the integration tests can exercise every failure path with real processes and
// no FP8 math.
//
// Usage (as the launcher starts it):  fp8-test-worker <train|calibrate> --spec <path>/spec.json
//
// What to do is read from, in increasing precedence:
//   1. defaults (below);
//   2. the TrainSpec in spec.json: training.max_steps → steps, training.save_steps;
//   3. an optional object {"test": {...}} in spec.json with the lower-case names below;
//   4. environment variables (the primary channel: the daemon passes its environment and
//      LaunchRequest::extra_env to every worker):
//
//   FP8_TEST_MODE            succeed (default) | crash_at_step | hang | hang_after_start |
//                            ignore_sigterm | garbage | exit_code | nan | oom
//   FP8_TEST_STEPS           total steps (default 20)
//   FP8_TEST_STEP_MS         duration of one step in ms (default 50)
//   FP8_TEST_CRASH_STEP      the step at which crash_at_step / hang / exit_code / nan strike
//                            (default 5). The failure happens *during* that step: progress
//                            for crash_step-1 is the last one. 0 = before `started`.
//   FP8_TEST_CRASH_SIGNAL    signal used by crash_at_step (default 9, SIGKILL)
//   FP8_TEST_EXIT_CODE       exit code for exit_code mode (default 64); the `error` event's
//                            class follows it: 64 INVALID_SPEC, 65 DATA_ERROR, else INTERNAL_ERROR
//   FP8_TEST_SAVE_STEPS      write a checkpoint every N steps (default 0 = never)
//   FP8_TEST_HEARTBEAT_MS    heartbeat period (default 200)
//   FP8_TEST_NO_HEARTBEAT    1 = no heartbeat thread at all
//   FP8_TEST_START_DELAY_MS  sleep before `started` (default 0)
//   FP8_TEST_CRASH_ONLY_ATTEMPT  if set (> 0), failure modes apply only when FP8D_ATTEMPT
//                            equals it; other attempts succeed (retry tests)
//   FP8_TEST_FAIL_RANK       if set (>= 0), failure modes apply only to that rank
//   FP8_TEST_STEP_LOG        1 = append "<attempt> <rank> <step> <pid>" to <checkpoint dir>/../steps.log
//                            after each step (one write(2) per line, O_APPEND), so a test can
//                            see which attempt ran which step, and that none ran twice
//   FP8_TEST_SPAWN_CHILD     1 = fork a grandchild in the rank's process group that sleeps
//                            (at most 120 s); its pid is reported as a `metric` event
//                            {name: "test_child_pid", value: pid}
//
// Modes:
//   succeed          started, progress per step, checkpoints, done, exit 0
//   crash_at_step    kill itself with FP8_TEST_CRASH_SIGNAL during crash_step
//   hang             at crash_step the whole process wedges: no heartbeat, no progress, SIGTERM
//                    not honoured (only SIGKILL ends it)
//   hang_after_start started and heartbeats, then never any progress (a stuck collective);
//                    SIGTERM not honoured
//   ignore_sigterm   like succeed, with SIGTERM ignored
//   garbage          like succeed, plus a non-JSON line and a JSON line with no event per step
//   exit_code        at crash_step: `error` event, then exit FP8_TEST_EXIT_CODE
//   oom              at crash_step: `error` RESOURCE_EXHAUSTED (out of memory), exit 75
//   nan              at crash_step: progress with loss NaN ("NaN" in JSON), `error` NUMERIC,
//                    exit 75
//
// Contract behaviour (all modes that do not say otherwise):
//   - resumes from FP8D_RESUME_FROM (a step-N directory; the step is read from its
//     trainer_state.json) and continues at the next step; `started` carries that step;
//   - checkpoints go to <FP8D_CHECKPOINT_DIR>/step-N/ (model.bin + trainer_state.json),
//     written under a temporary name, fsynced and renamed, then a `checkpoint` event. Only
//     rank 0 writes them (the ranks of one job share the directory);
//   - SIGTERM: stops at the step boundary, writes a checkpoint if save_steps > 0 and the
//     current step is not saved yet, emits `preempted` {step, checkpoint} and then `done`
//     with result.interrupted = true, exits 76 (as the real trainer does,
//     docs/architecture.md); ignore_sigterm leaves SIGTERM unanswered (only SIGKILL ends it);
//   - `done` {result: {final_step, resumed_from_step, final_loss}} at the end, exit 0.
//   - stderr (rank-<r>.log) gets the FP8D_* / CUDA_VISIBLE_DEVICES environment and the list
//     of open fds at start, so tests can check what the launcher handed over.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "worker/common/events.h"

namespace {

using fp8::worker::WorkerEvent;
using nlohmann::json;

struct Config {
  std::string mode = "succeed";
  long steps = 20;
  long step_ms = 50;
  long crash_step = 5;
  int crash_signal = SIGKILL;
  int exit_code = 64;
  long save_steps = 0;
  long heartbeat_ms = 200;
  bool no_heartbeat = false;
  long start_delay_ms = 0;
  long crash_only_attempt = 0;
  long fail_rank = -1;
  bool spawn_child = false;
};

// ---- events: one line per write(2) on stdout, so the launcher never sees a torn line --------

std::mutex g_write_mu;

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void WriteLine(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_write_mu);
  std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(1, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

// The real worker's event builders and printer, written with one write(2) (not stdio, which
// a signal or _Exit could leave half-flushed).
void Emit(WorkerEvent event) {
  event.set_time(UnixSeconds());
  WriteLine(fp8::worker::EventLine(event));
}

WorkerEvent HeartbeatEvent() {
  WorkerEvent ev;
  ev.mutable_heartbeat();
  return ev;
}

WorkerEvent ProgressEvent(long step, long total, double loss, double grad_norm) {
  WorkerEvent ev;
  WorkerEvent::Progress* p = ev.mutable_progress();
  p->set_step(step);
  p->set_total_steps(total);
  p->set_loss(loss);
  p->set_lr(1e-3);
  p->set_grad_norm(grad_norm);
  p->set_tokens_per_sec(1000.0);
  return ev;
}

// ---- configuration ---------------------------------------------------------------------

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

long EnvLong(const char* name, long fallback) {
  const char* v = Env(name);
  return v ? std::strtol(v, nullptr, 10) : fallback;
}

// Proto JSON prints int64 as a string: accept both.
bool JsonLong(const json& j, const char* key, long* out) {
  auto it = j.find(key);
  if (it == j.end()) return false;
  if (it->is_number()) {
    *out = it->get<long>();
    return true;
  }
  if (it->is_string()) {
    *out = std::strtol(it->get<std::string>().c_str(), nullptr, 10);
    return true;
  }
  return false;
}

void ApplySpec(const json& spec, Config* c) {
  if (!spec.is_object()) return;
  const json* training = nullptr;
  if (spec.contains("training") && spec["training"].is_object()) training = &spec["training"];
  if (training) {
    long v;
    // snake_case (preserve_proto_field_names) or the proto JSON default lowerCamelCase.
    if ((JsonLong(*training, "max_steps", &v) || JsonLong(*training, "maxSteps", &v)) && v > 0) {
      c->steps = v;
    }
    if ((JsonLong(*training, "save_steps", &v) || JsonLong(*training, "saveSteps", &v)) && v > 0) {
      c->save_steps = v;
    }
  }
  if (!spec.contains("test") || !spec["test"].is_object()) return;
  const json& t = spec["test"];
  if (t.contains("mode") && t["mode"].is_string()) c->mode = t["mode"].get<std::string>();
  JsonLong(t, "steps", &c->steps);
  JsonLong(t, "step_ms", &c->step_ms);
  JsonLong(t, "crash_step", &c->crash_step);
  long v;
  if (JsonLong(t, "crash_signal", &v)) c->crash_signal = static_cast<int>(v);
  if (JsonLong(t, "exit_code", &v)) c->exit_code = static_cast<int>(v);
  JsonLong(t, "save_steps", &c->save_steps);
  JsonLong(t, "heartbeat_ms", &c->heartbeat_ms);
  if (t.contains("no_heartbeat") && t["no_heartbeat"].is_boolean()) c->no_heartbeat = t["no_heartbeat"];
  JsonLong(t, "start_delay_ms", &c->start_delay_ms);
  JsonLong(t, "crash_only_attempt", &c->crash_only_attempt);
  JsonLong(t, "fail_rank", &c->fail_rank);
  if (t.contains("spawn_child") && t["spawn_child"].is_boolean()) c->spawn_child = t["spawn_child"];
}

void ApplyEnv(Config* c) {
  if (const char* m = Env("FP8_TEST_MODE")) c->mode = m;
  c->steps = EnvLong("FP8_TEST_STEPS", c->steps);
  c->step_ms = EnvLong("FP8_TEST_STEP_MS", c->step_ms);
  c->crash_step = EnvLong("FP8_TEST_CRASH_STEP", c->crash_step);
  c->crash_signal = static_cast<int>(EnvLong("FP8_TEST_CRASH_SIGNAL", c->crash_signal));
  c->exit_code = static_cast<int>(EnvLong("FP8_TEST_EXIT_CODE", c->exit_code));
  c->save_steps = EnvLong("FP8_TEST_SAVE_STEPS", c->save_steps);
  c->heartbeat_ms = EnvLong("FP8_TEST_HEARTBEAT_MS", c->heartbeat_ms);
  c->no_heartbeat = EnvLong("FP8_TEST_NO_HEARTBEAT", c->no_heartbeat ? 1 : 0) != 0;
  c->start_delay_ms = EnvLong("FP8_TEST_START_DELAY_MS", c->start_delay_ms);
  c->crash_only_attempt = EnvLong("FP8_TEST_CRASH_ONLY_ATTEMPT", c->crash_only_attempt);
  c->fail_rank = EnvLong("FP8_TEST_FAIL_RANK", c->fail_rank);
  c->spawn_child = EnvLong("FP8_TEST_SPAWN_CHILD", c->spawn_child ? 1 : 0) != 0;
}

// ---- heartbeat ---------------------------------------------------------------------------

std::atomic<bool> g_heartbeat_on{false};
std::atomic<bool> g_frozen{false};  // `hang`: the whole process is wedged, heartbeats too

void HeartbeatLoop(long period_ms) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
    if (!g_heartbeat_on.load()) return;
    if (!g_frozen.load()) Emit(HeartbeatEvent());
  }
}

// ---- signals -------------------------------------------------------------------------------

std::atomic<bool> g_stop{false};
void OnTerm(int) { g_stop.store(true); }

[[noreturn]] void SleepForever() {
  for (;;) ::pause();
}

// ---- checkpoints -----------------------------------------------------------------------------

bool WriteFileSynced(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

void FsyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

uint64_t Fnv1a(const std::string& data, uint64_t h = 1469598103934665603ull) {
  for (unsigned char ch : data) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

void RemoveTree(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d != nullptr) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string child = path + "/" + name;
      struct stat st {};
      if (::lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(child);
      } else {
        ::unlink(child.c_str());
      }
    }
    ::closedir(d);
  }
  ::rmdir(path.c_str());
}

void MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
}

// Writes <dir>/step-N whole or not at all, then announces it. Returns its path ("" if not written).
std::string SaveCheckpoint(const std::string& dir, long step, double loss) {
  MakeDirs(dir);
  std::string final_path = dir + "/step-" + std::to_string(step);
  std::string tmp = dir + "/.tmp-step-" + std::to_string(step) + "-" + std::to_string(::getpid());
  RemoveTree(tmp);
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    std::fprintf(stderr, "checkpoint: mkdir %s: %s\n", tmp.c_str(), std::strerror(errno));
    return "";
  }
  std::string model = "test-model step=" + std::to_string(step) + "\n";
  json state = {{"step", step}, {"global_step", step}, {"loss", loss}};
  std::string state_text = state.dump(2) + "\n";
  if (!WriteFileSynced(tmp + "/model.bin", model) ||
      !WriteFileSynced(tmp + "/trainer_state.json", state_text)) {
    std::fprintf(stderr, "checkpoint: writing %s failed\n", tmp.c_str());
    RemoveTree(tmp);
    return "";
  }
  FsyncDir(tmp);
  // A step reached again after resuming from an older checkpoint replaces the old directory.
  struct stat st {};
  if (::stat(final_path.c_str(), &st) == 0) {
    std::string old = tmp + ".old";
    ::rename(final_path.c_str(), old.c_str());
    RemoveTree(old);
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    std::fprintf(stderr, "checkpoint: rename to %s: %s\n", final_path.c_str(), std::strerror(errno));
    RemoveTree(tmp);
    return "";
  }
  FsyncDir(dir);
  char checksum[32];
  std::snprintf(checksum, sizeof(checksum), "fnv1a64:%016llx",
                static_cast<unsigned long long>(Fnv1a(state_text, Fnv1a(model))));
  Emit(fp8::worker::CheckpointEvent(step, final_path, checksum));
  return final_path;
}

// Step recorded in <resume_from>/trainer_state.json; -1 if unreadable.
long ResumeStep(const std::string& resume_from) {
  std::ifstream in(resume_from + "/trainer_state.json");
  if (!in) return -1;
  json state = json::parse(in, nullptr, false);
  long step = -1;
  if (state.is_discarded() || !JsonLong(state, "step", &step)) return -1;
  return step;
}

// ---- the run -------------------------------------------------------------------------------

[[noreturn]] void Fail(WorkerEvent::ErrorClass cls, const std::string& message, int code) {
  Emit(fp8::worker::ErrorEvent(cls, message));
  std::fprintf(stderr, "error: %s: %s\n", WorkerEvent::ErrorClass_Name(cls).c_str(), message.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

void LogEnvironmentAndFds() {
  const char* keys[] = {"FP8D_JOB", "FP8D_ATTEMPT", "FP8D_RANK", "FP8D_WORLD_SIZE",
                        "FP8D_LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "FP8D_RENDEZVOUS_DIR",
                        "FP8D_CHECKPOINT_DIR", "FP8D_RESUME_FROM", "FP8D_SLURM_NODE"};
  for (const char* k : keys) {
    const char* v = std::getenv(k);
    std::fprintf(stderr, "env %s=%s\n", k, v ? v : "<unset>");
  }
  std::string fds;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int self = ::dirfd(d);
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      if (std::atoi(e->d_name) == self) continue;
      fds += std::string(fds.empty() ? "" : ",") + e->d_name;
    }
    ::closedir(d);
  }
  std::fprintf(stderr, "fds %s\n", fds.c_str());
  // Where stdio points and whether stdout/stderr append (the launcher opens them O_APPEND).
  for (int fd = 0; fd <= 2; ++fd) {
    char target[4096] = {};
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n < 0) n = 0;
    target[n] = '\0';
    std::ifstream info("/proc/self/fdinfo/" + std::to_string(fd));
    std::string key, flags;
    while (info >> key) {
      if (key == "flags:") {
        info >> flags;
        break;
      }
    }
    bool append = (std::strtoul(flags.c_str(), nullptr, 8) & O_APPEND) != 0;
    std::fprintf(stderr, "stdio %d %s%s\n", fd, target, append ? " append" : "");
  }
  std::fflush(stderr);
}

int Run(const std::string& kind, const std::string& spec_path) {
  Config c;
  json spec;
  if (!spec_path.empty()) {
    std::ifstream in(spec_path);
    if (!in) Fail(WorkerEvent::INVALID_SPEC, "spec: cannot open " + spec_path, 64);
    spec = json::parse(in, nullptr, false);
    if (spec.is_discarded()) Fail(WorkerEvent::INVALID_SPEC, "spec: " + spec_path + " is not JSON", 64);
  }
  ApplySpec(spec, &c);
  ApplyEnv(&c);

  const long rank = EnvLong("FP8D_RANK", 0);
  const long world = EnvLong("FP8D_WORLD_SIZE", 1);
  const long attempt = EnvLong("FP8D_ATTEMPT", 1);
  std::string ckpt_dir = Env("FP8D_CHECKPOINT_DIR") ? Env("FP8D_CHECKPOINT_DIR") : "";
  for (const char* key : {"output_dir", "outputDir"}) {
    if (ckpt_dir.empty() && spec.is_object() && spec.contains(key) && spec[key].is_string() &&
        !spec[key].get<std::string>().empty()) {
      ckpt_dir = spec[key].get<std::string>() + "/checkpoints";
    }
  }
  const std::string resume_from = Env("FP8D_RESUME_FROM") ? Env("FP8D_RESUME_FROM") : "";

  bool faulty = c.mode != "succeed" && c.mode != "ignore_sigterm" && c.mode != "garbage";
  if (c.crash_only_attempt > 0 && attempt != c.crash_only_attempt) faulty = false;
  if (c.fail_rank >= 0 && rank != c.fail_rank) faulty = false;
  const std::string mode = faulty ? c.mode : (c.mode == "ignore_sigterm" || c.mode == "garbage"
                                                   ? c.mode
                                                   : std::string("succeed"));

  std::fprintf(stderr, "fp8-test-worker %s: mode=%s steps=%ld step_ms=%ld crash_step=%ld "
               "save_steps=%ld rank=%ld/%ld attempt=%ld\n",
               kind.c_str(), mode.c_str(), c.steps, c.step_ms, c.crash_step, c.save_steps,
               rank, world, attempt);
  LogEnvironmentAndFds();

  if (mode == "ignore_sigterm") {
    ::signal(SIGTERM, SIG_IGN);
  } else if (mode != "hang" && mode != "hang_after_start") {
    struct sigaction sa {};
    sa.sa_handler = OnTerm;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
  } else {
    ::signal(SIGTERM, SIG_IGN);  // wedged: SIGTERM goes unanswered, SIGKILL is needed
  }

  if (c.spawn_child) {
    // Before any thread exists, so fork is safe. The child stays in our process group.
    pid_t child = ::fork();
    if (child == 0) {
      // A plain helper: default dispositions, so the group's SIGTERM ends it.
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      for (int i = 0; i < 1200; ++i) ::usleep(100 * 1000);
      std::_Exit(0);
    }
    Emit(fp8::worker::MetricEvent("test_child_pid", child, 0));
  }

  auto strike = [&](long step) {
    if (mode == "crash_at_step") {
      std::fprintf(stderr, "crashing at step %ld with signal %d\n", step, c.crash_signal);
      std::fflush(stderr);
      ::signal(c.crash_signal, SIG_DFL);
      ::raise(c.crash_signal);
      std::_Exit(70);  // a signal that does not kill: still fail
    }
    if (mode == "hang") {
      std::fprintf(stderr, "hanging at step %ld\n", step);
      std::fflush(stderr);
      g_frozen.store(true);
      SleepForever();
    }
    if (mode == "exit_code") {
      const WorkerEvent::ErrorClass cls = c.exit_code == 64   ? WorkerEvent::INVALID_SPEC
                                          : c.exit_code == 65 ? WorkerEvent::DATA_ERROR
                                                              : WorkerEvent::INTERNAL_ERROR;
      Fail(cls, "test failure at step " + std::to_string(step), c.exit_code);
    }
    if (mode == "oom") {
      Fail(WorkerEvent::RESOURCE_EXHAUSTED, "out of memory at step " + std::to_string(step), 75);
    }
    if (mode == "nan") {
      Emit(ProgressEvent(step, c.steps, NAN, NAN));
      Fail(WorkerEvent::NUMERIC, "loss is NaN at step " + std::to_string(step), 75);
    }
  };
  const bool step_faults = mode == "crash_at_step" || mode == "hang" || mode == "exit_code" ||
                           mode == "nan" || mode == "oom";

  if (c.start_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.start_delay_ms));

  long resumed_from = 0;
  if (!resume_from.empty()) {
    resumed_from = ResumeStep(resume_from);
    if (resumed_from < 0) {
      Fail(WorkerEvent::DATA_ERROR, "FP8D_RESUME_FROM: no readable trainer_state.json in " + resume_from, 65);
    }
  }
  if (step_faults && c.crash_step == 0) strike(0);

  std::thread heartbeat;
  if (!c.no_heartbeat && c.heartbeat_ms > 0) {
    g_heartbeat_on.store(true);
    heartbeat = std::thread(HeartbeatLoop, c.heartbeat_ms);
  }
  Emit(fp8::worker::StartedEvent(static_cast<int>(rank), static_cast<int>(world), ::getpid(), resumed_from));

  if (mode == "hang_after_start") SleepForever();

  const bool step_log = EnvLong("FP8_TEST_STEP_LOG", 0) != 0 && !ckpt_dir.empty();
  if (step_log) MakeDirs(ckpt_dir);
  long step = resumed_from;
  long saved = resumed_from;
  std::string checkpoint;  // the newest written by this run (rank 0)
  double loss = 4.0;
  bool interrupted = false;
  while (step < c.steps) {
    if (g_stop.load()) {
      interrupted = true;
      break;
    }
    long next = step + 1;
    if (step_faults && next == c.crash_step) strike(next);
    std::this_thread::sleep_for(std::chrono::milliseconds(c.step_ms));
    step = next;
    loss = 4.0 / (1.0 + 0.1 * static_cast<double>(step));
    double remaining = static_cast<double>((c.steps - step) * c.step_ms) / 1000.0;
    if (step_log) {
      const std::string line = std::to_string(attempt) + " " + std::to_string(rank) + " " +
                               std::to_string(step) + " " + std::to_string(::getpid()) + "\n";
      const std::string path = ckpt_dir + "/../steps.log";
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        [[maybe_unused]] ssize_t n = ::write(fd, line.data(), line.size());
        ::close(fd);
      }
    }
    WorkerEvent progress = ProgressEvent(step, c.steps, loss, 1.0);
    progress.mutable_progress()->set_eta_seconds(remaining);
    Emit(std::move(progress));
    if (mode == "garbage") {
      WriteLine("this is not json, step " + std::to_string(step));
      WriteLine("{\"no_type_here\": " + std::to_string(step) + "}");
    }
    if (c.save_steps > 0 && step % c.save_steps == 0 && rank == 0 && !ckpt_dir.empty()) {
      checkpoint = SaveCheckpoint(ckpt_dir, step, loss);
      saved = step;
    }
  }
  if (saved != step) checkpoint.clear();  // `checkpoint` is the one of `step`, if any
  if (interrupted && c.save_steps > 0 && saved != step && rank == 0 && !ckpt_dir.empty()) {
    checkpoint = SaveCheckpoint(ckpt_dir, step, loss);
  }
  json result = {{"final_step", step}, {"resumed_from_step", resumed_from}, {"final_loss", loss}};
  if (interrupted) {
    result["interrupted"] = true;
    Emit(fp8::worker::PreemptedEvent(step, checkpoint));
  }
  Emit(fp8::worker::DoneEvent(result));
  g_heartbeat_on.store(false);
  if (heartbeat.joinable()) heartbeat.join();
  std::fprintf(stderr, "%s at step %ld\n", interrupted ? "interrupted" : "done", step);
  return interrupted ? fp8::worker::kExitPreempted : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind, spec_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--spec" && i + 1 < argc) {
      spec_path = argv[++i];
    } else if (kind.empty() && (a == "train" || a == "calibrate")) {
      kind = a;
    } else {
      std::fprintf(stderr, "usage: fp8-test-worker <train|calibrate> --spec <spec.json>\n");
      Emit(fp8::worker::ErrorEvent(WorkerEvent::INVALID_SPEC, "unexpected argument: " + a));
      return 64;
    }
  }
  if (kind.empty()) {
    std::fprintf(stderr, "usage: fp8-test-worker <train|calibrate> --spec <spec.json>\n");
    Emit(fp8::worker::ErrorEvent(WorkerEvent::INVALID_SPEC, "missing subcommand train|calibrate"));
    return 64;
  }
  return Run(kind, spec_path);
}
