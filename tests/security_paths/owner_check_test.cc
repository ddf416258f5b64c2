// SPDX-License-Identifier: Apache-2.0
// fp8d's check at create looks at the filesystem with the rights of the uid the job runs as:
// for a path that user cannot see, the answer is the same whether it exists or not.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/api/job_isolation.h"
#include "tests/integration/daemon_process.h"

namespace {

namespace fs = std::filesystem;

TEST(OwnerCheck, InitFromTheOwnerCannotSeeIsAnsweredAsMissing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the check switches to another user's rights";
  fp8d::itest::TestUser user("fp8d-paths-owner");
  ASSERT_TRUE(user.ok()) << user.error();
  fp8d::itest::TempDir tmp;
  fs::permissions(tmp.path(), fs::perms(0755));
  const std::string secret = tmp.path() + "/root-only";
  fs::create_directories(secret + "/model");
  std::ofstream(secret + "/model/config.json") << "{}";
  fs::permissions(secret, fs::perms(0700));
  const std::vector<std::string> roots = {"/"};
  auto message = [&](const std::string& init_from, int64_t uid) {
    fp8d::v1::Job job;
    job.mutable_train()->set_init_from(init_from);
    return fp8d::api::CheckJobPaths(job, roots, uid).ToString();
  };
  // As the owner: existing and missing read the same (but for the path the caller wrote).
  const std::string existing = message(secret + "/model", user.uid());
  const std::string missing = message(secret + "/absent", user.uid());
  EXPECT_EQ(existing, "INVALID_ARGUMENT: job.train.init_from: " + secret + "/model: cannot be resolved: Permission denied");
  EXPECT_EQ(missing, "INVALID_ARGUMENT: job.train.init_from: " + secret + "/absent: cannot be resolved: Permission denied");
  // fp8d's own uid (workers run as fp8d) sees the model; a directory the owner can read is fine.
  EXPECT_EQ(message(secret + "/model", 0), "OK");
  const std::string shared = tmp.path() + "/shared";
  fs::create_directories(shared);
  std::ofstream(shared + "/config.json") << "{}";
  EXPECT_EQ(message(shared, user.uid()), "OK");
  // The thread that took the owner's rights is gone: fp8d's own are intact.
  EXPECT_TRUE(fs::exists(secret + "/model/config.json"));
}

}  // namespace
