// SPDX-License-Identifier: Apache-2.0
// The fp8-worker executable as the daemon sees it: exit codes, NDJSON events, SIGTERM, resume
// from the environment, and 2 ranks over Gloo against 1 rank with the same global batch.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/worker_train/worker_process.h"
#include "worker/train/checkpoint.h"

namespace fp8::train {
namespace {

using nlohmann::json;

using testing::Events;
using testing::Losses;
using testing::OfType;
using testing::TinySpecJson;
using testing::WriteSpec;
using Proc = testing::WorkerProcess;

Proc Start(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& dir,
           const std::string& tag) {
  return testing::StartWorker(FP8_WORKER_BINARY, args, env, dir, tag);
}

int Wait(const Proc& p) { return testing::WaitWorker(p); }

TEST(WorkerCli, InvalidSpecExits64AndNamesTheField) {
  const std::string dir = testing::MakeTempDir("cli-invalid");
  json spec = TinySpecJson(dir, 5, 2);
  spec["training"]["learning_rate"] = -0.1;
  Proc p = Start({"train", "--spec", WriteSpec(dir, spec)}, {}, dir, "w");
  EXPECT_EQ(Wait(p), 64);
  auto ev = Events(p.events_path);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["type"], "error");
  EXPECT_EQ(ev[0]["class"], "INVALID_SPEC");
  EXPECT_EQ(ev[0]["message"], "training.learning_rate: must be in (0, 10]");
}

TEST(WorkerCli, MissingDataExits65) {
  const std::string dir = testing::MakeTempDir("cli-data");
  json spec = TinySpecJson(dir, 5, 2);
  spec["data"]["train"] = dir + "/nothing_*.bin";
  Proc p = Start({"train", "--spec", WriteSpec(dir, spec)}, {}, dir, "w");
  EXPECT_EQ(Wait(p), 65);
  auto errors = OfType(Events(p.events_path), "error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["class"], "DATA_ERROR");
  EXPECT_NE(errors[0]["message"].get<std::string>().find("data.train"), std::string::npos);
}

// SIGTERM (a preemption): the worker stops at the step boundary, checkpoints that step, says
// `preempted` and exits 76; resumed from that checkpoint it runs the remaining steps.
TEST(WorkerCli, SigtermCheckpointsThenResumeFromEnvironmentFinishes) {
  const std::string dir = testing::MakeTempDir("cli-sigterm");
  const std::string spec = WriteSpec(dir, TinySpecJson(dir, 40, 2));
  Proc p = Start({"train", "--spec", spec}, {"FP8D_HEARTBEAT_MS=50"}, dir, "first");
  // Wait for the first progress event, then ask it to stop.
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    running = !OfType(Events(p.events_path), "progress").empty();
  }
  ASSERT_TRUE(running);
  kill(p.pid, SIGTERM);
  EXPECT_EQ(Wait(p), 76) << "the preempted exit code";
  auto ev = Events(p.events_path);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.front()["type"], "started");
  EXPECT_EQ(ev.back()["type"], "done");
  EXPECT_EQ(ev.back()["result"]["interrupted"], true);
  auto ckpt = OfType(ev, "checkpoint");
  ASSERT_EQ(ckpt.size(), 1u);
  const int64_t stopped_at = ckpt[0]["step"];
  EXPECT_LT(stopped_at, 40);
  const std::string path = ckpt[0]["path"];
  // The checkpoint of the step it stopped at, then `preempted` naming it, then `done`.
  const nlohmann::json& preempted = ev[ev.size() - 2];
  ASSERT_EQ(preempted["type"], "preempted");
  EXPECT_EQ(preempted["step"], stopped_at);
  EXPECT_EQ(preempted["checkpoint"], path);
  EXPECT_EQ(OfType(ev, "progress").back()["step"], stopped_at) << "the checkpoint is of the last step done";
  EXPECT_TRUE(std::filesystem::path(path).is_absolute());
  EXPECT_EQ(ckpt[0]["checksum"], *Fnv1a64File(path + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(path + "/optimizer.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(path + "/trainer_state.json"));

  Proc q = Start({"train", "--spec", spec}, {"FP8D_RESUME_FROM=" + dir + "/out/checkpoints"}, dir, "second");
  EXPECT_EQ(Wait(q), 0);
  auto ev2 = Events(q.events_path);
  ASSERT_FALSE(ev2.empty());
  EXPECT_EQ(ev2.front()["type"], "started");
  EXPECT_EQ(ev2.front()["step"], stopped_at);
  EXPECT_EQ(OfType(ev2, "progress").front()["step"], stopped_at + 1);
  EXPECT_EQ(ev2.back()["type"], "done");
  EXPECT_EQ(ev2.back()["result"]["steps"], 40);
  EXPECT_EQ(ev2.back()["result"]["interrupted"], false);
  EXPECT_TRUE(ev2.back()["result"]["final_loss"].is_number());
  EXPECT_EQ(OfType(ev2, "checkpoint").back()["step"], 40);
}

class WorkerCliRanks : public ::testing::TestWithParam<std::string> {};

// fp8-tensorwise too: the ranks max-reduce their amaxes before the histories take them, so they
// keep one scaling state (only the first step's casts are scaled by each rank's own amax).
TEST_P(WorkerCliRanks, TwoRanksOverGlooMatchOneRankWithSameGlobalBatch) {
  const int steps = 12;
  auto spec_json = [&](const std::string& dir, int batch) {
    json s = TinySpecJson(dir, steps, batch);
    s["precision"]["recipe"] = GetParam();
    return s;
  };
  const std::string dir1 = testing::MakeTempDir("cli-1rank");
  Proc one = Start({"train", "--spec", WriteSpec(dir1, spec_json(dir1, 8))}, {}, dir1, "w");
  ASSERT_EQ(Wait(one), 0);
  // FP8 recipes report the step's casts in each progress event; the others leave them out.
  const bool fp8 = GetParam() == "fp8-tensorwise";
  for (const json& p : OfType(Events(one.events_path), "progress")) {
    ASSERT_EQ(p.contains("fp8_amax_max"), fp8) << p.dump();
    ASSERT_EQ(p.contains("fp8_saturation_fraction"), fp8) << p.dump();
    if (!fp8) continue;
    EXPECT_GT(p["fp8_amax_max"].get<double>(), 0) << p.dump();
    EXPECT_GE(p["fp8_saturation_fraction"].get<double>(), 0) << p.dump();
    EXPECT_LE(p["fp8_saturation_fraction"].get<double>(), 1) << p.dump();
  }

  const std::string dir2 = testing::MakeTempDir("cli-2rank");
  const std::string spec2 = WriteSpec(dir2, spec_json(dir2, 4));
  std::vector<Proc> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(Start({"train", "--spec", spec2},
                          {"FP8D_RANK=" + std::to_string(r), "FP8D_WORLD_SIZE=2", "FP8D_RENDEZVOUS_DIR=" + dir2 + "/rdzv"},
                          dir2, "rank-" + std::to_string(r)));
  for (const Proc& p : ranks) EXPECT_EQ(Wait(p), 0);

  const auto ref = Losses(one.events_path);
  const auto r0 = Losses(ranks[0].events_path), r1 = Losses(ranks[1].events_path);
  ASSERT_EQ(ref.size(), static_cast<size_t>(steps));
  ASSERT_EQ(r0.size(), ref.size());
  EXPECT_EQ(r0, r1);  // every rank sees the same all-reduced loss
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(r0[i], ref[i], 1e-3 * ref[i]) << "step " << i + 1;
  // Only rank 0 writes checkpoints.
  EXPECT_EQ(OfType(Events(ranks[0].events_path), "checkpoint").size(), 1u);
  EXPECT_TRUE(OfType(Events(ranks[1].events_path), "checkpoint").empty());
  EXPECT_EQ(OfType(Events(ranks[1].events_path), "started")[0]["world_size"], 2);

  // Both ranks end with one scaling state (fp8-tensorwise; the others have none).
  const json d0 = OfType(Events(ranks[0].events_path), "done").back()["result"];
  const json d1 = OfType(Events(ranks[1].events_path), "done").back()["result"];
  EXPECT_EQ(d0.contains("fp8_scaling_digest"), GetParam() == "fp8-tensorwise");
  EXPECT_EQ(d0.value("fp8_scaling_digest", ""), d1.value("fp8_scaling_digest", ""));
}

INSTANTIATE_TEST_SUITE_P(Recipes, WorkerCliRanks, ::testing::Values("bf16", "fp8-tensorwise"), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n) if (ch == '-') ch = '_';
  return n;
});

}  // namespace
}  // namespace fp8::train
