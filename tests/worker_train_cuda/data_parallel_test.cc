// SPDX-License-Identifier: Apache-2.0
// Data parallelism on GPUs: `fp8-worker train` (backend cuda) as 2 real processes, one GPU each, gradients
// all-reduced over NCCL, against 1 process with the same global batch. Needs 2 CUDA devices and
// libnccl.so.2; skips otherwise.
#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker_train/worker_process.h"

namespace fp8::train::testing {
namespace {

class CudaDataParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaDataParallel, TwoRanksOverNcclMatchOneRankWithSameGlobalBatch) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  if (void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)) dlclose(nccl);
  else GTEST_SKIP() << "libnccl.so.2 not loadable";
  // The build machine's path, unless the binaries were carried elsewhere (scripts/gpu/).
  const char* env_bin = std::getenv("FP8_WORKER_BINARY");
  const std::string binary = env_bin ? env_bin : FP8_WORKER_BINARY;
  const int steps = 12;
  auto spec = [&](const std::string& dir, int batch) {
    nlohmann::json s = TinySpecJson(dir, steps, batch);
    s["precision"]["recipe"] = GetParam();
    s["backend"] = "cuda";
    s["training"]["save_steps"] = steps;
    return WriteSpec(dir, s);
  };
  const std::string dir1 = MakeTempDir("nccl-1rank");
  WorkerProcess one = StartWorker(binary, {"train", "--spec", spec(dir1, 8)}, {}, dir1, "w");
  ASSERT_EQ(WaitWorker(one), 0);

  const std::string dir2 = MakeTempDir("nccl-2rank");
  const std::string spec2 = spec(dir2, 4);
  std::vector<WorkerProcess> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(StartWorker(binary, {"train", "--spec", spec2},
                                {"FP8D_RANK=" + std::to_string(r), "FP8D_WORLD_SIZE=2", "FP8D_RENDEZVOUS_DIR=" + dir2 + "/rdzv",
                                 "FP8D_COLLECTIVE_TIMEOUT_S=60"},
                                dir2, "rank-" + std::to_string(r)));
  for (const WorkerProcess& p : ranks) EXPECT_EQ(WaitWorker(p), 0) << "see " << p.events_path;

  const auto ref = Losses(one.events_path);
  const auto r0 = Losses(ranks[0].events_path), r1 = Losses(ranks[1].events_path);
  ASSERT_EQ(ref.size(), static_cast<size_t>(steps));
  ASSERT_EQ(r0.size(), ref.size());
  EXPECT_EQ(r0, r1);  // the all-reduced loss, the same on every rank
  // The same samples in two halves: only the summation order of the gradients differs.
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(r0[i], ref[i], 1e-3 * ref[i]) << "step " << i + 1;
  EXPECT_LT(r0.back(), r0.front());
  const auto started = OfType(Events(ranks[1].events_path), "started");
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0]["world_size"], 2);
  EXPECT_EQ(OfType(Events(ranks[0].events_path), "checkpoint").size(), 1u);  // rank 0 writes checkpoints
  EXPECT_TRUE(OfType(Events(ranks[1].events_path), "checkpoint").empty());
  // Both ranks end with one scaling state (fp8-tensorwise; the others have none).
  const nlohmann::json d0 = OfType(Events(ranks[0].events_path), "done").back()["result"];
  const nlohmann::json d1 = OfType(Events(ranks[1].events_path), "done").back()["result"];
  EXPECT_EQ(d0.contains("fp8_scaling_digest"), GetParam() == "fp8-tensorwise");
  EXPECT_EQ(d0.value("fp8_scaling_digest", ""), d1.value("fp8_scaling_digest", ""));
}

// fp8-tensorwise too: its amaxes are reduced (max) over the ranks before the histories take
// them, so the ranks keep one scaling state.
INSTANTIATE_TEST_SUITE_P(Recipes, CudaDataParallel, ::testing::Values("bf16", "fp8-tensorwise", "fp8-blockwise"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace fp8::train::testing
