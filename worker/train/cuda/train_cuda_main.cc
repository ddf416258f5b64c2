// fp8-train-cuda: `fp8-worker train --spec FILE [--resume-from DIR]` on the CUDA backend, as a
// standalone program (the same environment contract: FP8D_RANK, FP8D_WORLD_SIZE,
// FP8D_RENDEZVOUS_DIR, FP8D_CHECKPOINT_DIR, FP8D_RESUME_FROM, FP8D_HEARTBEAT_MS). It exists so
// the GPU path can be run before fp8-worker's own dispatcher routes `backend: cuda` here.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/common/events.h"
#include "worker/train/cuda/cuda_trainer.h"
#include "worker/train/spec.h"

namespace {
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
int EnvInt(const char* name, int def) {
  const std::string v = Env(name);
  return v.empty() ? def : std::atoi(v.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  fp8::worker::EventWriter events;
  std::string spec_path, resume = Env("FP8D_RESUME_FROM");
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--spec" && i + 1 < argc) spec_path = argv[++i];
    else if (a == "--resume-from" && i + 1 < argc) resume = argv[++i];
    else {
      std::fprintf(stderr, "usage: fp8-train-cuda --spec FILE [--resume-from DIR]\n");
      return fp8::worker::kExitInvalidSpec;
    }
  }
  auto spec = fp8::train::LoadTrainSpec(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "fp8-train-cuda: invalid spec: %s\n", spec.status().message().c_str());
    events.Emit("error", {{"class", "INVALID_SPEC"}, {"message", spec.status().message()}});
    return fp8::worker::kExitInvalidSpec;
  }
  fp8::worker::InstallStopSignalHandlers();
  fp8::train::TrainOptions opts;
  opts.checkpoint_dir = Env("FP8D_CHECKPOINT_DIR");
  opts.resume_from = resume;
  opts.heartbeat_ms = EnvInt("FP8D_HEARTBEAT_MS", 2000);
  opts.tty_progress = ::isatty(STDERR_FILENO) != 0;
  fp8::train::cuda::CudaDistributed dist;
  dist.rank = EnvInt("FP8D_RANK", 0);
  dist.world_size = std::max(1, EnvInt("FP8D_WORLD_SIZE", 1));
  dist.rendezvous_dir = Env("FP8D_RENDEZVOUS_DIR");
  dist.timeout = std::chrono::seconds(EnvInt("FP8D_COLLECTIVE_TIMEOUT_S", 300));
  return fp8::train::cuda::RunCudaTraining(*spec, opts, dist, events).exit_code;
}
