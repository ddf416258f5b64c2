// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/http_metrics.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "common/version.h"
#include "daemon/api/process_metrics.h"

namespace fp8d::api {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,   0.25,   0.5,   1,    2.5};
  return b;
}

struct GrpcMetrics {
  prometheus::Registry registry;
  prometheus::Family<prometheus::Counter>& requests =
      BuildCounter().Name("fp8d_grpc_requests_total")
          .Help("gRPC calls finished, by method and status code").Register(registry);
  prometheus::Family<Histogram>& latency =
      BuildHistogram().Name("fp8d_grpc_request_duration_seconds")
          .Help("Time from a unary call's arrival to its answer, by method").Register(registry);
};

// Store commits take from a fraction of a millisecond (WAL append) to seconds (fsync on a slow
// disk, a waiting write lock).
struct StoreMetrics {
  prometheus::Registry registry;
  Histogram& commit = BuildHistogram().Name("fp8d_store_commit_seconds")
                          .Help("SQLite write transactions, BEGIN IMMEDIATE (lock wait included) to COMMIT done")
                          .Register(registry)
                          .Add({}, Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                               0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
};

StoreMetrics& Store() {
  static StoreMetrics* metrics = new StoreMetrics();  // lives as long as the process
  return *metrics;
}

GrpcMetrics& Grpc() {
  static GrpcMetrics* metrics = new GrpcMetrics();  // lives as long as the process
  return *metrics;
}

constexpr int kStatusCodes = static_cast<int>(fp8::StatusCode::kUnauthenticated) + 1;

}  // namespace

void RecordGrpcCall(std::string_view method, fp8::StatusCode code, double seconds) {
  // Family::Add builds a label map and looks it up under the family's lock: on every call that
  // was a few allocations of each CreateJob. The metrics it returns live as long as their
  // family, so each is looked up once.
  struct MethodMetrics {
    Histogram* latency = nullptr;
    // One per code, and a last one for any code out of range (its name is INVALID_CODE).
    std::array<prometheus::Counter*, kStatusCodes + 1> requests{};
  };
  static std::mutex mu;
  static auto* const by_method = new std::map<std::string, MethodMetrics, std::less<>>();
  const int index = static_cast<int>(code);
  const size_t slot = index >= 0 && index < kStatusCodes ? static_cast<size_t>(index) : kStatusCodes;
  prometheus::Counter* requests = nullptr;
  Histogram* latency = nullptr;
  {
    std::lock_guard lock(mu);
    auto it = by_method->find(method);
    if (it == by_method->end()) it = by_method->emplace(std::string(method), MethodMetrics{}).first;
    MethodMetrics& m = it->second;
    GrpcMetrics& grpc = Grpc();
    if (m.latency == nullptr) m.latency = &grpc.latency.Add({{"method", it->first}}, LatencyBuckets());
    if (m.requests[slot] == nullptr) {
      m.requests[slot] = &grpc.requests.Add({{"method", it->first}, {"code", fp8::StatusCodeName(code)}});
    }
    requests = m.requests[slot];
    latency = m.latency;
  }
  requests->Increment();
  latency->Observe(seconds);
}

void RecordStoreCommit(double seconds) { Store().commit.Observe(seconds); }

namespace {

using fp8d::v1::JobKind;

// fp8d_build_info, the capacity gauges and the process metrics.
void AddDaemonFamilies(prometheus::Registry& registry, const core::ManagerFigures& figures) {
  BuildGauge().Name("fp8d_build_info")
      .Help("Always 1; the labels say which fp8d this is")
      .Register(registry)
      .Add({{"version", fp8::kVersion}, {"commit", fp8::kGitCommit}, {"build_type", fp8::kBuildType}})
      .Set(1);
  if (figures.slots) {
    auto& slots = BuildGauge().Name("fp8d_slots")
                      .Help("Slots of the node (kind gpu or cpu): those it offers (state total) and "
                            "those attempts hold (state used)")
                      .Register(registry);
    const core::SlotCounts& c = *figures.slots;
    slots.Add({{"kind", "gpu"}, {"state", "total"}}).Set(static_cast<double>(c.gpu_total));
    slots.Add({{"kind", "gpu"}, {"state", "used"}}).Set(static_cast<double>(c.gpu_used));
    slots.Add({{"kind", "cpu"}, {"state", "total"}}).Set(static_cast<double>(c.cpu_total));
    slots.Add({{"kind", "cpu"}, {"state", "used"}}).Set(static_cast<double>(c.cpu_used));
  }
  // Per scheduler queue (fp8d's `queues:`, or the one queue `default`).
  if (figures.queues.queues_size() > 0) {
    auto& used = BuildGauge().Name("fp8d_queue_used_slots")
                     .Help("Slots (kind gpu or cpu) the queue's jobs hold").Register(registry);
    auto& pending = BuildGauge().Name("fp8d_queue_pending_jobs").Help("QUEUED jobs of the queue").Register(registry);
    auto& preemptions = BuildCounter().Name("fp8d_queue_preemptions_total")
                            .Help("Jobs of the queue the scheduler preempted since fp8d started")
                            .Register(registry);
    for (const fp8d::v1::QueueStatus& q : figures.queues.queues()) {
      used.Add({{"queue", q.name()}, {"kind", "gpu"}}).Set(static_cast<double>(q.used_gpus()));
      used.Add({{"queue", q.name()}, {"kind", "cpu"}}).Set(static_cast<double>(q.used_cpu_slots()));
      pending.Add({{"queue", q.name()}}).Set(static_cast<double>(q.pending_jobs()));
      preemptions.Add({{"queue", q.name()}}).Increment(static_cast<double>(q.preemptions()));
    }
  }
  if (std::optional<ProcessFigures> p = ReadProcessFigures()) {
    BuildCounter().Name("process_cpu_seconds_total").Help("Total user and system CPU time spent in seconds")
        .Register(registry).Add({}).Increment(p->cpu_seconds);
    BuildGauge().Name("process_resident_memory_bytes").Help("Resident memory size in bytes")
        .Register(registry).Add({}).Set(p->resident_bytes);
    BuildGauge().Name("process_open_fds").Help("Number of open file descriptors")
        .Register(registry).Add({}).Set(p->open_fds);
    BuildGauge().Name("process_start_time_seconds")
        .Help("Start time of the process since unix epoch in seconds")
        .Register(registry).Add({}).Set(p->start_time_seconds);
  }
}

// Prometheus' cumulative buckets from a CountHistogram's per-bucket counts.
void Replay(Histogram& h, const core::CountHistogram& from) {
  std::vector<double> increments(from.counts.begin(), from.counts.end());
  h.ObserveMultiple(increments, from.sum);
}

// The counters and histograms kept across deletions, every kind present (zeros included) so a
// series exists before its first increment.
void AddJobCounters(prometheus::Registry& registry, const core::JobCounters& counters) {
  auto& attempts = BuildCounter().Name("fp8d_job_attempts_started_total")
                       .Help("Attempts started, by job kind").Register(registry);
  auto& failures = BuildCounter().Name("fp8d_job_failures_total")
                       .Help("Attempts that ended with a failure class (retried, requeued by "
                             "preemption, or final) and queued jobs failed before a start "
                             "(unschedulable, a dependency failed), by job kind and failure class")
                       .Register(registry);
  auto& queue_wait = BuildHistogram().Name("fp8d_job_queue_wait_seconds")
                         .Help("Create to first start, by job kind").Register(registry);
  auto& run_time = BuildHistogram().Name("fp8d_job_run_seconds")
                       .Help("First start to end, for finished jobs that started, by job kind")
                       .Register(registry);
  for (int k = fp8d::v1::TRAIN; k <= fp8d::v1::CALIBRATE; ++k) {
    const std::string kind = fp8d::v1::JobKind_Name(k);
    auto it = counters.by_kind().find(static_cast<JobKind>(k));
    const core::KindCounters empty;
    const core::KindCounters& c = it == counters.by_kind().end() ? empty : it->second;
    attempts.Add({{"kind", kind}}).Increment(static_cast<double>(c.attempts_started));
    for (const auto& [failure_class, n] : c.failures) {
      failures.Add({{"kind", kind}, {"failure_class", fp8d::v1::FailureClass_Name(failure_class)}})
          .Increment(static_cast<double>(n));
    }
    Replay(queue_wait.Add({{"kind", kind}}, c.queue_wait.bounds), c.queue_wait);
    Replay(run_time.Add({{"kind", kind}}, c.run_time.bounds), c.run_time);
  }
}

}  // namespace

std::string RenderMetrics(const std::vector<fp8d::v1::Job>& jobs, const core::ManagerFigures& figures) {
  prometheus::Registry registry;
  auto& by_state = BuildGauge().Name("fp8d_jobs")
                       .Help("Jobs by state and kind").Register(registry);
  for (int s = fp8d::v1::QUEUED; s <= fp8d::v1::CANCELLED; ++s) {
    for (int k = fp8d::v1::TRAIN; k <= fp8d::v1::CALIBRATE; ++k) {
      by_state.Add({{"state", fp8d::v1::JobState_Name(s)}, {"kind", fp8d::v1::JobKind_Name(k)}});
    }
  }
  AddJobCounters(registry, figures.counters);
  AddDaemonFamilies(registry, figures);
  auto& step = BuildGauge().Name("fp8d_job_step").Help("Latest step of a running job").Register(registry);
  auto& total = BuildGauge().Name("fp8d_job_total_steps").Help("Total steps of a running job").Register(registry);
  auto& loss = BuildGauge().Name("fp8d_job_loss").Help("Latest training loss of a running job").Register(registry);
  auto& tps = BuildGauge().Name("fp8d_job_tokens_per_second")
                  .Help("Latest throughput of a running job").Register(registry);
  auto& amax = BuildGauge().Name("fp8d_job_fp8_amax_max")
                   .Help("Largest amax over the latest reported step's FP8 casts of a running job")
                   .Register(registry);
  auto& saturation = BuildGauge().Name("fp8d_job_fp8_saturation_fraction")
                         .Help("Fraction of the latest reported step's FP8 cast elements clipped to the FP8 max")
                         .Register(registry);
  // Mixture-of-experts models only: the expert load of the latest reported step.
  struct OptionalGauge {
    prometheus::Family<prometheus::Gauge>& family;
    bool (fp8d::v1::Progress::*has)() const;
    double (fp8d::v1::Progress::*get)() const;
  };
  auto moe_gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return BuildGauge().Name(name).Help(help).Register(registry);
  };
  using P = fp8d::v1::Progress;
  const OptionalGauge moe[] = {
      {moe_gauge("fp8d_job_moe_load_min",
                 "Lowest expert load (tokens as a multiple of its layer's mean) of a running MoE job"),
       &P::has_moe_load_min, &P::moe_load_min},
      {moe_gauge("fp8d_job_moe_load_max",
                 "Highest expert load (tokens as a multiple of its layer's mean) of a running MoE job"),
       &P::has_moe_load_max, &P::moe_load_max},
      {moe_gauge("fp8d_job_moe_load_cv",
                 "Largest coefficient of variation of one MoE layer's expert loads"),
       &P::has_moe_load_cv, &P::moe_load_cv},
      {moe_gauge("fp8d_job_moe_dropped_fraction",
                 "Fraction of expert assignments dropped past capacity"),
       &P::has_moe_dropped_fraction, &P::moe_dropped_fraction},
      {moe_gauge("fp8d_job_moe_aux_loss", "Load-balancing auxiliary loss of a running MoE job"),
       &P::has_moe_aux_loss, &P::moe_aux_loss},
  };
  for (const fp8d::v1::Job& job : jobs) {
    by_state.Add({{"state", fp8d::v1::JobState_Name(job.state())},
                  {"kind", fp8d::v1::JobKind_Name(job.kind())}}).Increment();
    if (job.state() == fp8d::v1::RUNNING && job.has_progress()) {
      const prometheus::Labels labels = {{kJobLabel, job.name()}};
      step.Add(labels).Set(static_cast<double>(job.progress().step()));
      total.Add(labels).Set(static_cast<double>(job.progress().total_steps()));
      loss.Add(labels).Set(job.progress().loss());
      tps.Add(labels).Set(job.progress().tokens_per_second());
      if (job.progress().has_fp8_amax_max()) amax.Add(labels).Set(job.progress().fp8_amax_max());
      if (job.progress().has_fp8_saturation_fraction()) {
        saturation.Add(labels).Set(job.progress().fp8_saturation_fraction());
      }
      for (const OptionalGauge& g : moe) {
        if ((job.progress().*g.has)()) g.family.Add(labels).Set((job.progress().*g.get)());
      }
    }
  }
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  for (auto& f : Grpc().registry.Collect()) families.push_back(std::move(f));
  for (auto& f : Store().registry.Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace fp8d::api
