// Rank numbers under Slurm. fp8d's Slurm launcher starts the ranks with srun, which gives each
// task its numbers in SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; the worker reads FP8D_RANK
// and friends (docs/design.md §4). This fills each FP8D_ variable that is unset from its Slurm
// counterpart, so the rest of the worker sees one contract whichever launcher started it.
#pragma once

namespace fp8::worker {

// Sets FP8D_RANK, FP8D_WORLD_SIZE, FP8D_LOCAL_RANK and FP8D_LOCAL_WORLD_SIZE from SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID and SLURM_NTASKS_PER_NODE where the FP8D_ one is unset or empty.
// Does nothing outside a Slurm step (no SLURM_PROCID).
void AdoptSlurmRankEnvironment();

}  // namespace fp8::worker
