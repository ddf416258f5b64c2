// SPDX-License-Identifier: Apache-2.0
// Where this process stands among the ranks, whichever launcher started it. fp8d's launchers
// set FP8D_RANK, FP8D_WORLD_SIZE, FP8D_LOCAL_RANK, FP8D_LOCAL_WORLD_SIZE and
// FP8D_RENDEZVOUS_DIR (docs/design.md §4); so that other launchers can run fp8-worker too, each
// FP8D_ variable that is unset is taken from the launcher that did start it:
//   torchrun     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI     OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm (srun) SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// in that order: the innermost launcher first (mpirun inside an sbatch script sees the batch
// step's SLURM_PROCID 0 in every rank; torchrun under srun sees srun's one task).
//
// The ranks meet through a folder (Gloo's FileStore, the NCCL id file). Without
// FP8D_RENDEZVOUS_DIR the folder is derived on the local disk,
// <tmp>/fp8d-rendezvous/<MASTER_ADDR>_<MASTER_PORT>_<launch>, where <launch> names this launch
// the same way in every rank: TORCHELASTIC_RUN_ID (and restart count), PMIX_NAMESPACE,
// SLURM_JOB_ID.SLURM_STEP_ID, or else the launcher process (the parent pid, which torchrun's
// agent, mpirun's daemon and srun's slurmstepd each are to all ranks of a node). So a derived
// folder serves ranks on one node only; ranks on several nodes need FP8D_RENDEZVOUS_DIR on a
// file system they share.
//
// CPU threads: each rank takes its share of the cores it may run on (cores / local ranks, at
// least 1), unless FP8_NUM_THREADS or OMP_NUM_THREADS says otherwise (FP8_NUM_THREADS wins).
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace fp8::worker {

using EnvMap = std::map<std::string, std::string>;

struct RankPlacement {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string rendezvous_dir;  // empty for a single rank
  // Whose variables gave the rank: "fp8d", "torchrun", "openmpi", "slurm", or "" (none: one rank).
  std::string launcher;
  bool derived_rendezvous = false;  // rendezvous_dir is derived (not FP8D_RENDEZVOUS_DIR)
};

// What a pure resolution needs besides the environment.
struct LaunchContext {
  long parent_pid = 0;
  std::string temp_dir = "/tmp";
};

// The placement `env` describes; an error names the variable (e.g. "RANK: must be < WORLD_SIZE
// (2), got 2") or, for several ranks with no way to meet, the variables that would give one.
StatusOr<RankPlacement> ResolveRankPlacement(const EnvMap& env, const LaunchContext& context);

// The size of the CPU kernels' thread pool for a rank: FP8_NUM_THREADS, else OMP_NUM_THREADS
// (its first entry, as OpenMP reads "4,2"), else max(1, cores / local_world_size). A value that
// is not an integer in [1, 1024] is an error naming the variable.
StatusOr<int> CpuThreadCount(const EnvMap& env, int cores, int local_world_size);

// Resolves this process's environment and writes the result back as FP8D_RANK,
// FP8D_WORLD_SIZE, FP8D_LOCAL_RANK, FP8D_LOCAL_WORLD_SIZE, FP8D_RENDEZVOUS_DIR (several ranks)
// and FP8_NUM_THREADS, before anything reads them (the thread pool sizes itself at first use).
Status AdoptLaunchEnvironment();

}  // namespace fp8::worker
