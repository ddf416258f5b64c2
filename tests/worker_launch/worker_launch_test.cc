// SPDX-License-Identifier: Apache-2.0
// fp8-worker started as torchrun and mpirun start it: two real ranks that find each other with
// only those launchers' variables, and the clear error when nothing says where to meet.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tests/worker_train/worker_process.h"

namespace fp8::worker {
namespace {

namespace fs = std::filesystem;
using namespace fp8::train::testing;

// Trains the tiny model on two ranks, rank r getting env(r), with TMPDIR in the test's folder
// (where a derived rendezvous folder goes), and checks that they met.
void ExpectTwoRanksTrain(const std::string& tag, const std::function<std::vector<std::string>(int)>& env) {
  const std::string dir = MakeTempDir(tag);
  const std::string spec = WriteSpec(dir, TinySpecJson(dir, 3, 2));
  std::vector<WorkerProcess> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> e = env(r);
    e.push_back("TMPDIR=" + dir);
    ranks.push_back(StartWorker(FP8_WORKER_BINARY, {"train", "--spec", spec}, e, dir, "rank-" + std::to_string(r)));
  }
  for (const WorkerProcess& p : ranks) EXPECT_EQ(WaitWorker(p), 0) << dir;
  const auto l0 = Losses(ranks[0].events_path), l1 = Losses(ranks[1].events_path);
  EXPECT_EQ(l0.size(), 3u);
  EXPECT_EQ(l0, l1);  // one all-reduced loss: the two met
  for (int r = 0; r < 2; ++r) {
    const auto started = OfType(Events(ranks[r].events_path), "started");
    ASSERT_EQ(started.size(), 1u);
    EXPECT_EQ(started[0]["world_size"], 2);
    EXPECT_EQ(started[0].value("rank", 0), r);
  }
  EXPECT_TRUE(fs::is_directory(fs::path(dir) / "fp8d-rendezvous")) << "the derived folder is under TMPDIR";
  fs::remove_all(dir);
}

TEST(WorkerLaunch, TorchrunVariablesRunTwoRanks) {
  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  ExpectTwoRanksTrain("torchrun", [&](int r) {
    return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r),
                                    "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
                                    "TORCHELASTIC_RUN_ID=none"};
  });
}

TEST(WorkerLaunch, OpenMpiVariablesRunTwoRanks) {
  const std::string ns = "prterun-test-" + std::to_string(::getpid()) + "@1";
  ExpectTwoRanksTrain("openmpi", [&](int r) {
    return std::vector<std::string>{"OMPI_COMM_WORLD_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_SIZE=2",
                                    "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(r), "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                    "PMIX_NAMESPACE=" + ns};
  });
}

TEST(WorkerLaunch, SeveralRanksWithNowhereToMeetExit64NamingTheVariables) {
  const std::string dir = MakeTempDir("launch-nowhere");
  const std::string spec = WriteSpec(dir, TinySpecJson(dir, 3, 2));
  WorkerProcess p = StartWorker(FP8_WORKER_BINARY, {"train", "--spec", spec}, {"RANK=0", "WORLD_SIZE=2"}, dir, "w");
  EXPECT_EQ(WaitWorker(p), 64);
  const auto ev = Events(p.events_path);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["type"], "error");
  EXPECT_EQ(ev[0]["class"], "INVALID_SPEC");
  EXPECT_EQ(ev[0]["message"],
            "WORLD_SIZE: 2 ranks need a rendezvous: set FP8D_RENDEZVOUS_DIR (a folder every rank reaches), or "
            "MASTER_ADDR and MASTER_PORT as torchrun does");
  EXPECT_FALSE(fs::exists(fs::path(dir) / "out")) << "nothing is written";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8::worker
