// The fp8-worker executable as the daemon sees it: exit codes, NDJSON events, SIGTERM, resume
// from the environment, and 2 ranks over Gloo against 1 rank with the same global batch.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "worker/train/checkpoint.h"

extern char** environ;

namespace fp8::train {
namespace {

using nlohmann::json;

struct Proc {
  pid_t pid = -1;
  std::string events_path;
};

// Starts fp8-worker with extra environment entries; stdout → events file, stderr → log file.
Proc Start(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& dir,
           const std::string& tag) {
  Proc p;
  p.events_path = dir + "/" + tag + ".events";
  const std::string log = dir + "/" + tag + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.events_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_s = {FP8_WORKER_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env;
  env_s.push_back("FP8_NUM_THREADS=1");
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  EXPECT_EQ(posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

int Wait(const Proc& p) {
  int status = 0;
  waitpid(p.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<json> Events(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

std::vector<json> OfType(const std::vector<json>& ev, const std::string& type) {
  std::vector<json> out;
  for (const json& e : ev)
    if (e["type"] == type) out.push_back(e);
  return out;
}

std::string WriteSpec(const std::string& dir, const json& spec) {
  const std::string path = dir + "/spec.json";
  std::ofstream(path) << spec.dump(2);
  return path;
}

json TinySpecJson(const std::string& dir, int64_t steps, int batch) {
  const std::string data = testing::CorpusShardDir();
  return json{{"model", {{"preset", "tiny"}}},
              {"data", {{"train", data + "/train_*.bin"}, {"val", data + "/val_*.bin"}}},
              {"precision", {{"recipe", "bf16"}}},
              {"training", {{"max_steps", steps}, {"per_device_train_batch_size", batch}, {"logging_steps", 1},
                            {"eval_steps", 1000}, {"save_steps", 1000}}},
              {"output_dir", dir + "/out"}};
}

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
  EXPECT_EQ(ev[0]["message"], "training.learning_rate: must be > 0");
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
  EXPECT_EQ(Wait(p), 75);
  auto ev = Events(p.events_path);
  EXPECT_EQ(ev.front()["type"], "started");
  EXPECT_EQ(ev.back()["type"], "done");
  EXPECT_EQ(ev.back()["result"]["interrupted"], true);
  auto ckpt = OfType(ev, "checkpoint");
  ASSERT_EQ(ckpt.size(), 1u);
  const int64_t stopped_at = ckpt[0]["step"];
  EXPECT_LT(stopped_at, 40);
  const std::string path = ckpt[0]["path"];
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

std::vector<double> Losses(const std::string& events_path) {
  std::vector<double> out;
  for (const json& e : OfType(Events(events_path), "progress")) out.push_back(e["loss"]);
  return out;
}

TEST(WorkerCli, TwoRanksOverGlooMatchOneRankWithSameGlobalBatch) {
  const int steps = 12;
  const std::string dir1 = testing::MakeTempDir("cli-1rank");
  Proc one = Start({"train", "--spec", WriteSpec(dir1, TinySpecJson(dir1, steps, 8))}, {}, dir1, "w");
  ASSERT_EQ(Wait(one), 0);

  const std::string dir2 = testing::MakeTempDir("cli-2rank");
  const std::string spec2 = WriteSpec(dir2, TinySpecJson(dir2, steps, 4));
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
}

}  // namespace
}  // namespace fp8::train
