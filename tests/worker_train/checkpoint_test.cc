// SPDX-License-Identifier: Apache-2.0
// Checkpoint temporary directories: a failed write leaves none behind, and a worker starting
// up removes those of writers that are gone (issue 14, item 4).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/worker_train/test_util.h"
#include "worker/train/checkpoint.h"
#include "worker/train/model.h"
#include "worker/train/optimizer.h"

namespace fp8::train::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A pid that surely belongs to no process: a child that has exited and been reaped.
pid_t DeadPid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(Checkpoint, FailedWriteRemovesItsTemporaryDirectory) {
  const std::string dir = MakeTempDir("ckpt-fail");
  TrainSpec spec = TinySpec(Recipe::kBf16, 1, dir);
  // In a child whose file size limit is far below the model's size, so writing the tensors
  // fails part-way (EFBIG), as a full disk would.
  pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    GptModel model(spec.model, spec.precision);
    AdamW opt(spec.training, false, model.tensors(), model.num_params());
    auto saved = SaveCheckpoint(dir + "/checkpoints", 3, model, opt, nlohmann::json{{"step", 3}}, 2);
    ::_exit(saved.ok() ? 2 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the write did not fail";
  EXPECT_EQ(Entries(dir + "/checkpoints"), std::vector<std::string>{}) << "a temporary dir was left";
  fs::remove_all(dir);
}

TEST(Checkpoint, StartUpRemovesStaleTemporaryDirectoriesOnly) {
  const std::string dir = MakeTempDir("ckpt-stale");
  const std::string ckpt = dir + "/checkpoints";
  const std::string dead = std::to_string(DeadPid());
  const std::string live = std::to_string(::getppid());  // the test runner's parent lives on
  for (const std::string& name : std::vector<std::string>{".step-5.tmp-" + dead, ".step-6.old-" + dead,
                                  ".step-7.tmp-" + live, std::string("step-4"), std::string(".step-x.tmp-abc")}) {
    fs::create_directories(ckpt + "/" + name);
  }
  ASSERT_TRUE(PrepareCheckpointDir(ckpt).ok());
  EXPECT_EQ(Entries(ckpt), (std::vector<std::string>{".step-7.tmp-" + live, ".step-x.tmp-abc", "step-4"}));
  fs::remove_all(dir);
}

TEST(Checkpoint, AnOutputDirThatCannotBeCreatedIsInvalid) {
  const std::string dir = MakeTempDir("ckpt-file");
  { std::ofstream(dir + "/file") << "x"; }
  Status st = PrepareCheckpointDir(dir + "/file/checkpoints");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8::train::testing
