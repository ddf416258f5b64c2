// SPDX-License-Identifier: Apache-2.0
// ResolveRankPlacement and CpuThreadCount as tables: environment in, placement (or the error's
// text) out.
#include "worker/common/launch_env.h"

#include <gtest/gtest.h>

namespace fp8::worker {
namespace {

struct PlacementCase {
  const char* name;
  EnvMap env;
  // Expected: rank, world, local rank, local world, rendezvous dir, launcher; or an error.
  int rank, world, local_rank, local_world;
  const char* rendezvous;
  const char* launcher;
  const char* error = nullptr;  // a substring of the error; null: must succeed
};

const LaunchContext kContext{.parent_pid = 4242, .temp_dir = "/tmp"};

const PlacementCase kPlacements[] = {
    {"nothing: one rank", {}, 0, 1, 0, 1, "", ""},
    {"fp8d's local launcher",
     {{"FP8D_RANK", "1"}, {"FP8D_WORLD_SIZE", "2"}, {"FP8D_LOCAL_RANK", "1"}, {"FP8D_LOCAL_WORLD_SIZE", "2"},
      {"FP8D_RENDEZVOUS_DIR", "/a/rdzv"}},
     1, 2, 1, 2, "/a/rdzv", "fp8d"},
    {"fp8d's variables win over torchrun's",
     {{"FP8D_RANK", "0"}, {"FP8D_WORLD_SIZE", "2"}, {"FP8D_RENDEZVOUS_DIR", "/a/rdzv"}, {"RANK", "5"},
      {"WORLD_SIZE", "8"}},
     0, 2, 0, 2, "/a/rdzv", "fp8d"},
    {"torchrun, static rendezvous: the agent's pid names the launch",
     {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"}},
     3, 4, 3, 4, "/tmp/fp8d-rendezvous/127.0.0.1_29500_ppid-4242", "torchrun"},
    {"torchrun with a run id and a restart",
     {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node-a"},
      {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", "job/7"}, {"TORCHELASTIC_RESTART_COUNT", "2"}},
     0, 2, 0, 2, "/tmp/fp8d-rendezvous/node-a_29400_torchrun-job_7-2", "torchrun"},
    {"torchrun inside a Slurm step: torchrun's numbers",
     {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
      {"MASTER_PORT", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}},
     1, 2, 1, 2, "/tmp/fp8d-rendezvous/h_1_slurm-9.0", "torchrun"},
    {"Open MPI under sbatch: Open MPI's numbers, not the batch step's",
     {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}, {"PMIX_NAMESPACE", "prterun-h-1234@1"}, {"SLURM_PROCID", "0"},
      {"SLURM_NTASKS", "1"}},
     2, 3, 2, 3, "/tmp/fp8d-rendezvous/pmix-prterun-h-1234_1", "openmpi"},
    {"srun: the step names the launch",
     {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_NUM_NODES", "1"},
      {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}},
     1, 2, 1, 2, "/tmp/fp8d-rendezvous/slurm-77.3", "slurm"},
    {"fp8d's Slurm launcher: FP8D_WORLD_SIZE and the folder, srun's rank",
     {{"FP8D_WORLD_SIZE", "4"}, {"FP8D_RENDEZVOUS_DIR", "/shared/rdzv"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"},
      {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "2"}},
     3, 4, 1, 2, "/shared/rdzv", "slurm"},
    {"Slurm without tasks per node: ranks spread over the nodes",
     {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"}, {"FP8D_RENDEZVOUS_DIR", "/shared/rdzv"}},
     2, 4, 0, 2, "/shared/rdzv", "slurm"},
    {"several ranks, no way to meet",
     {{"RANK", "0"}, {"WORLD_SIZE", "2"}}, 0, 0, 0, 0, "", "",
     "WORLD_SIZE: 2 ranks need a rendezvous: set FP8D_RENDEZVOUS_DIR (a folder every rank reaches), or MASTER_ADDR "
     "and MASTER_PORT"},
    {"MASTER_ADDR without MASTER_PORT",
     {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, 0, 0, 0, 0, "", "", "MASTER_PORT: required with MASTER_ADDR"},
    {"ranks on several nodes need a shared folder",
     {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
      {"MASTER_PORT", "1"}},
     0, 0, 0, 0, "", "", "FP8D_RENDEZVOUS_DIR: required for ranks on several nodes (LOCAL_WORLD_SIZE 2 < WORLD_SIZE 4)"},
    {"rank past the world", {{"RANK", "2"}, {"WORLD_SIZE", "2"}}, 0, 0, 0, 0, "", "", "RANK: must be < WORLD_SIZE (2), got 2"},
    {"not a number", {{"OMPI_COMM_WORLD_RANK", "x"}}, 0, 0, 0, 0, "", "",
     "OMPI_COMM_WORLD_RANK: must be an integer in [0, 1048576] (got \"x\")"},
    {"world of zero", {{"FP8D_WORLD_SIZE", "0"}}, 0, 0, 0, 0, "", "", "FP8D_WORLD_SIZE: must be an integer in [1, "},
    {"local rank past the local world",
     {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
      {"MASTER_PORT", "1"}},
     0, 0, 0, 0, "", "", "LOCAL_RANK: must be < LOCAL_WORLD_SIZE (2), got 2"},
    {"Slurm's per-node counts as it may print them",
     {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "2(x2)"}}, 0, 0, 0, 0, "", "",
     "SLURM_NTASKS_PER_NODE: must be an integer"},
};

class Placement : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(Placement, Resolves) {
  const PlacementCase& c = GetParam();
  auto p = ResolveRankPlacement(c.env, kContext);
  if (c.error != nullptr) {
    ASSERT_FALSE(p.ok()) << c.name;
    EXPECT_NE(p.status().message().find(c.error), std::string::npos) << c.name << ": " << p.status().message();
    return;
  }
  ASSERT_TRUE(p.ok()) << c.name << ": " << p.status().message();
  EXPECT_EQ(p->rank, c.rank) << c.name;
  EXPECT_EQ(p->world_size, c.world) << c.name;
  EXPECT_EQ(p->local_rank, c.local_rank) << c.name;
  EXPECT_EQ(p->local_world_size, c.local_world) << c.name;
  EXPECT_EQ(p->rendezvous_dir, c.rendezvous) << c.name;
  EXPECT_EQ(p->launcher, c.launcher) << c.name;
  EXPECT_EQ(p->derived_rendezvous, std::string(c.rendezvous).starts_with("/tmp/fp8d-rendezvous/")) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Table, Placement, ::testing::ValuesIn(kPlacements), [](const auto& info) {
  return "case" + std::to_string(info.index);
});

struct ThreadCase {
  EnvMap env;
  int cores, local_world;
  int threads;                  // expected, when error is null
  const char* error = nullptr;  // a substring of the error
};

TEST(CpuThreads, ShareOfTheCoresUnlessToldOtherwise) {
  const ThreadCase cases[] = {
      {{}, 2, 1, 2},
      {{}, 2, 2, 1},  // two CPU ranks on two cores: one each, no oversubscription
      {{}, 16, 3, 5},
      {{}, 2, 4, 1},  // at least one
      {{{"OMP_NUM_THREADS", "3"}}, 16, 4, 3},
      {{{"OMP_NUM_THREADS", "6,2"}}, 16, 4, 6},  // OpenMP's nested list: the outer level
      {{{"FP8_NUM_THREADS", "2"}, {"OMP_NUM_THREADS", "7"}}, 16, 4, 2},  // FP8_NUM_THREADS wins
      {{{"FP8_NUM_THREADS", "0"}}, 16, 1, 0, "FP8_NUM_THREADS: must be an integer in [1, 1024] (got \"0\")"},
      {{{"OMP_NUM_THREADS", "many"}}, 16, 1, 0, "OMP_NUM_THREADS: must be an integer in [1, 1024] (got \"many\")"},
  };
  for (const ThreadCase& c : cases) {
    auto t = CpuThreadCount(c.env, c.cores, c.local_world);
    if (c.error != nullptr) {
      ASSERT_FALSE(t.ok());
      EXPECT_NE(t.status().message().find(c.error), std::string::npos) << t.status().message();
    } else {
      ASSERT_TRUE(t.ok()) << t.status().message();
      EXPECT_EQ(*t, c.threads) << c.cores << " cores, " << c.local_world << " local ranks";
    }
  }
}

}  // namespace
}  // namespace fp8::worker
