// SPDX-License-Identifier: Apache-2.0
// fp8-worker run as the launcher runs it: a real process with
// extra environment entries, its NDJSON events on stdout captured to a file. Shared by the CPU
// executable tests and the CUDA data-parallel test.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/event_lines.h"

#include "tests/worker_train/test_util.h"

extern char** environ;

namespace fp8::train::testing {

struct WorkerProcess {
  pid_t pid = -1;
  std::string events_path;
};

// Starts `binary args...` with `env` added to this process's environment; stdout → <dir>/<tag>.events,
// stderr → <dir>/<tag>.log.
inline WorkerProcess StartWorker(const std::string& binary, const std::vector<std::string>& args,
                                 const std::vector<std::string>& env, const std::string& dir, const std::string& tag) {
  WorkerProcess p;
  p.events_path = dir + "/" + tag + ".events";
  const std::string log = dir + "/" + tag + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.events_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_s = {binary};
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

// The exit code, or 128 + the signal that ended it.
inline int WaitWorker(const WorkerProcess& p) {
  int status = 0;
  waitpid(p.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::vector<nlohmann::json> Events(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded()) out.push_back(fp8::testing::FlatEvent(j));
  }
  return out;
}

inline std::vector<nlohmann::json> OfType(const std::vector<nlohmann::json>& ev, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : ev)
    if (e["type"] == type) out.push_back(e);
  return out;
}

// The loss of every `progress` event, in order.
inline std::vector<double> Losses(const std::string& events_path) {
  std::vector<double> out;
  for (const nlohmann::json& e : OfType(Events(events_path), "progress")) out.push_back(e["loss"]);
  return out;
}

inline std::string WriteSpec(const std::string& dir, const nlohmann::json& spec) {
  const std::string path = dir + "/spec.json";
  std::ofstream(path) << spec.dump(2);
  return path;
}

// The tiny model on the shipped corpus, a progress event every step.
inline nlohmann::json TinySpecJson(const std::string& dir, int64_t steps, int batch) {
  const std::string data = CorpusShardDir();
  return nlohmann::json{{"model", {{"preset", "tiny"}}},
                        {"data", {{"train", data + "/train_*.bin"}, {"val", data + "/val_*.bin"}}},
                        {"precision", {{"recipe", "bf16"}}},
                        {"training", {{"max_steps", steps}, {"per_device_train_batch_size", batch}, {"logging_steps", 1},
                                      {"eval_steps", 1000}, {"save_steps", 1000}}},
                        {"output_dir", dir + "/out"}};
}

}  // namespace fp8::train::testing
