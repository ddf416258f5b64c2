// SPDX-License-Identifier: Apache-2.0
// fp8-worker: compute program (docs/design.md §4). One process per rank; NDJSON events on stdout,
// the human log on stderr.
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "worker/common/events.h"
#include "worker/common/launch_env.h"
#include "worker/calibrate/calibrate_main.h"
#include "worker/data/prepare_data_main.h"
#include "worker/train/model_tools_main.h"
#include "worker/train/train_main.h"
#ifdef FP8_HAVE_CUDA_TRAINER
#include "worker/train/cuda/cuda_trainer.h"
#endif

namespace {

fp8::train::CudaTrainerEntryPoints CudaTrainer() {
  fp8::train::CudaTrainerEntryPoints b;
#ifdef FP8_HAVE_CUDA_TRAINER
  b.available = &fp8::train::cuda::CudaDeviceAvailable;
  b.run = &fp8::train::cuda::RunCudaTraining;
#endif
  return b;
}

void Usage() {
  std::fprintf(stderr,
               "usage: fp8-worker train --spec SPEC [--resume-from DIR]\n"
               "       fp8-worker prepare-data --text FILE --out DIR [--tokenizer DIR|tokenizer.json [--doc-separator STR]]\n"
               "       fp8-worker calibrate --spec SPEC\n"
               "       fp8-worker export --checkpoint DIR --out DIR --format hf [--max-shard-bytes N] [--tokenizer DIR]\n"
               "       fp8-worker evaluate --model DIR [--recipe R] (--tokens 1,2,3 | --data GLOB [--seed S] [--first-batch B])\n");
}
}  // namespace

int Dispatch(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return Dispatch(argc, argv);
  } catch (const std::bad_alloc&) {
    // Out of memory is its own failure class: the daemon retries it once and stops when a
    // second attempt runs out at the same step (the shape does not fit).
    std::fprintf(stderr, "fp8-worker: out of memory\n");
    fp8::worker::EventWriter events;
    events.Emit(fp8::worker::ErrorEvent(fp8::worker::WorkerEvent::RESOURCE_EXHAUSTED, "out of memory (std::bad_alloc)"));
    return fp8::worker::kExitTemporary;
  }
}

int Dispatch(int argc, char** argv) {
  if (argc < 2) {
    Usage();
    return fp8::worker::kExitInvalidSpec;
  }
  const std::string cmd = argv[1];
  // Ranks as fp8d, torchrun, Open MPI or srun started them, and the CPU threads each gets.
  if (fp8::Status s = fp8::worker::AdoptLaunchEnvironment(); !s.ok()) {
    std::fprintf(stderr, "fp8-worker: %s\n", s.message().c_str());
    fp8::worker::EventWriter events;
    events.Emit(fp8::worker::ErrorEvent(fp8::worker::WorkerEvent::INVALID_SPEC, s.message()));
    return fp8::worker::kExitInvalidSpec;
  }
  if (cmd == "train") return fp8::train::TrainMain(argc - 2, argv + 2, CudaTrainer());
  if (cmd == "prepare-data") return fp8::data::PrepareDataMain(argc - 2, argv + 2);
  if (cmd == "export") return fp8::train::ExportMain(argc - 2, argv + 2);
  if (cmd == "evaluate") return fp8::train::EvaluateMain(argc - 2, argv + 2);
  if (cmd == "calibrate") return fp8::calibrate::CalibrateMain(argc - 2, argv + 2);
  if (cmd == "-h" || cmd == "--help") {
    Usage();
    return 0;
  }
  std::fprintf(stderr, "fp8-worker: unknown subcommand '%s'\n", cmd.c_str());
  Usage();
  return fp8::worker::kExitInvalidSpec;
}
