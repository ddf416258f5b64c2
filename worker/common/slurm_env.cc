#include "worker/common/slurm_env.h"

#include <cstdlib>
#include <cstring>

namespace fp8::worker {
namespace {

void FillFrom(const char* ours, const char* slurms) {
  const char* have = std::getenv(ours);
  if (have != nullptr && have[0] != '\0') return;  // the launcher said so explicitly
  const char* v = std::getenv(slurms);
  if (v != nullptr && v[0] != '\0') ::setenv(ours, v, 1);
}

}  // namespace

void AdoptSlurmRankEnvironment() {
  if (std::getenv("SLURM_PROCID") == nullptr) return;
  FillFrom("FP8D_RANK", "SLURM_PROCID");
  FillFrom("FP8D_WORLD_SIZE", "SLURM_NTASKS");
  FillFrom("FP8D_LOCAL_RANK", "SLURM_LOCALID");
  // SLURM_NTASKS_PER_NODE is set only with --ntasks-per-node (fp8d's launcher passes it).
  FillFrom("FP8D_LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE");
}

}  // namespace fp8::worker
