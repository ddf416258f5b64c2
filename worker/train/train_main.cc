// SPDX-License-Identifier: Apache-2.0
#include "worker/train/train_main.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/common/events.h"
#include "worker/data/shards.h"
#include "worker/train/collective.h"
#include "worker/train/hf_model.h"
#include "worker/train/moe_dispatch.h"
#include "worker/train/spec.h"
#include "worker/train/trainer.h"

namespace fp8::train {
namespace {

using worker::EventWriter;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool ParseIntEnv(const char* name, int* out, std::string* error) {
  const std::string v = Env(name);
  if (v.empty()) return true;
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20) {
    *error = std::string(name) + ": not a non-negative integer: '" + v + "'";
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}

int InvalidSpec(EventWriter& ev, const std::string& msg) {
  std::fprintf(stderr, "fp8-worker: invalid spec: %s\n", msg.c_str());
  ev.Emit(worker::ErrorEvent(worker::WorkerEvent::INVALID_SPEC, msg));
  return worker::kExitInvalidSpec;
}

// The CUDA model has no MoE layer yet. jobspec refuses backend cuda with a spec's model.moe at
// create; this is the worker's one check, which also sees a mixture of experts that init_from
// names. An unreadable init_from is left for the trainer to report.
bool TrainsMixtureOfExperts(const TrainSpec& spec) {
  if (spec.model.moe.enabled()) return true;
  if (spec.init_from.empty()) return false;
  auto src = OpenModelSource(spec.init_from);
  return src.ok() && src->config.moe.enabled();
}

}  // namespace

int TrainMain(int argc, char** argv, const CudaTrainerEntryPoints& cuda) {
  EventWriter events;
  std::string spec_path, resume_from = Env("FP8D_RESUME_FROM");
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--spec" || a == "--resume-from") && i + 1 < argc) {
      (a == "--spec" ? spec_path : resume_from) = argv[++i];
    } else if (a.starts_with("--spec=")) {
      spec_path = a.substr(7);
    } else if (a.starts_with("--resume-from=")) {
      resume_from = a.substr(14);
    } else if (a == "-h" || a == "--help") {
      std::fprintf(stderr, "usage: fp8-worker train --spec SPEC.json|.yaml [--resume-from DIR]\n");
      return 0;
    } else {
      return InvalidSpec(events, "unknown argument '" + a + "' (usage: fp8-worker train --spec FILE [--resume-from DIR])");
    }
  }
  if (spec_path.empty()) return InvalidSpec(events, "--spec: required");
  auto spec = LoadTrainSpec(spec_path);
  if (!spec.ok()) return InvalidSpec(events, spec.status().message());
  const bool cuda_built = cuda.available != nullptr && cuda.run != nullptr;
  if (spec->backend == Backend::kCuda && !cuda_built)
    return InvalidSpec(events, "backend: cuda is not available in this build of fp8-worker (use auto or cpu)");

  int rank = 0, world = 1, heartbeat_ms = 2000, timeout_s = 300, expert_parallel = 1;
  std::string env_error;
  if (!ParseIntEnv("FP8D_RANK", &rank, &env_error) || !ParseIntEnv("FP8D_WORLD_SIZE", &world, &env_error) ||
      !ParseIntEnv("FP8D_EXPERT_PARALLEL", &expert_parallel, &env_error) ||
      !ParseIntEnv("FP8D_HEARTBEAT_MS", &heartbeat_ms, &env_error) ||
      !ParseIntEnv("FP8D_COLLECTIVE_TIMEOUT_S", &timeout_s, &env_error))
    return InvalidSpec(events, env_error);
  if (world < 1) world = 1;
  if (rank >= world) return InvalidSpec(events, "FP8D_RANK: must be < FP8D_WORLD_SIZE");

  worker::InstallStopSignalHandlers();
  TrainOptions opts;
  opts.checkpoint_dir = Env("FP8D_CHECKPOINT_DIR");
  opts.resume_from = resume_from;
  opts.heartbeat_ms = heartbeat_ms;
  opts.tty_progress = ::isatty(STDERR_FILENO) != 0;
  opts.expert_parallel = expert_parallel == 0 ? 1 : expert_parallel;  // resources.expert_parallel: 0 = 1

  // Both families train on either backend (the CUDA one picks its model by architecture,
  // cuda_causal_lm.h); auto takes the GPU when there is one, but for a mixture of experts.
  const bool moe = cuda_built && spec->backend != Backend::kCpu && TrainsMixtureOfExperts(*spec);
  if (moe && spec->backend == Backend::kCuda)
    return InvalidSpec(events, "model.moe: the cuda backend does not run MoE yet" +
                                   (spec->init_from.empty() ? std::string() : " (init_from is a mixture of experts)"));
  // Expert parallelism is the CPU backend's (which refuses it for a dense model).
  if (cuda_built && spec->backend != Backend::kCpu && !moe && opts.expert_parallel == 1) {
    if (cuda.available()) {
      return cuda.run(*spec, opts, {rank, world, Env("FP8D_RENDEZVOUS_DIR"), std::chrono::seconds(timeout_s)}, events).exit_code;
    }
    if (spec->backend == Backend::kCuda) {
      // The job asked for a GPU this node does not have. A retry lands on the same node and
      // fails the same way, so it is INVALID_SPEC (exit 64) as in calibrate; fp8d refuses
      // such a job at create when none of its nodes has a GPU.
      return InvalidSpec(events, "backend: cuda requested but no CUDA device is visible");
    }
  }

  // A spec that builds its model is checked before the rendezvous (a wrong degree is refused at
  // once, not after waiting for peers); the CPU backend checks a model from init_from.
  if (spec->init_from.empty())
    if (Status s = moe::CheckExpertParallel(*spec, opts.expert_parallel, world); !s.ok())
      return InvalidSpec(events, s.message());

  std::unique_ptr<Collective> coll;
  if (world == 1) {
    coll = MakeSingleProcessCollective();
  } else {
    // Heartbeats during the rendezvous too: peers may take a while to start.
    if (heartbeat_ms > 0) events.StartHeartbeat(heartbeat_ms);
    auto g = MakeGlooCollective(rank, world, Env("FP8D_RENDEZVOUS_DIR"), std::chrono::seconds(timeout_s));
    events.StopHeartbeat();
    if (!g.ok()) {
      std::fprintf(stderr, "fp8-worker: %s\n", g.status().message().c_str());
      events.Emit(worker::ErrorEvent(worker::WorkerEvent::INTERNAL_ERROR, g.status().message()));
      return worker::kExitTemporary;
    }
    coll = std::move(g).value();
  }

  TrainResult r = RunTraining(*spec, opts, *coll, events);
  return r.exit_code;
}

}  // namespace fp8::train
