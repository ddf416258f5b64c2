// SPDX-License-Identifier: Apache-2.0
// The path rule of jobspec/paths.h on every path field of TrainSpec and CalibrateSpec: what
// fp8d decides at create and what the worker decides before it opens the path, for a direct
// path, `..`, a symlink out of the roots, a glob with `..` after its wildcard, a glob through a
// symlinked directory, and a directory swapped for a symlink after create.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>

#include "jobspec/paths.h"

namespace {

namespace fs = std::filesystem;
using fp8::jobspec::PathCheck;
using fp8d::v1::Job;

struct Field {
  const char* path;  // in Job: "train.data.train"
  bool glob;
};

const Field kFields[] = {
    {"train.data.train", true},     {"train.data.val", true},    {"train.output_dir", false},
    {"train.init_from", false},     {"calibrate.input", false},  {"calibrate.output_dir", false},
    {"calibrate.activations.data", true},
};

// Sets the string field at `path` ("train.data.train") of `job`.
void SetField(Job* job, const std::string& path, const std::string& value) {
  google::protobuf::Message* m = job;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const google::protobuf::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(name);
    ASSERT_NE(f, nullptr) << path;
    if (dot == std::string::npos) {
      m->GetReflection()->SetString(m, f, value);
      return;
    }
    m = m->GetReflection()->MutableMessage(m, f);
    start = dot + 1;
  }
}

class PathRule : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fp8d-path-rule-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = fs::canonical(tmpl).string();
    root_ = base_ + "/root";
    outside_ = base_ + "/outside-secret";
    fs::create_directories(root_ + "/sub");
    fs::create_directories(root_ + "/d1");
    fs::create_directories(root_ + "/swap");
    fs::create_directories(outside_);
    for (const std::string& dir : {root_ + "/sub", root_ + "/swap", outside_}) {
      std::ofstream(dir + "/a.bin") << "x";
    }
    fs::create_directory_symlink(outside_, root_ + "/link");
    roots_ = {root_};
  }
  void TearDown() override { fs::remove_all(base_); }

  // The value a case writes into a field; globs get a pattern, the others a path.
  std::string Value(const std::string& dir, bool glob) const { return dir + (glob ? "/*.bin" : "/a.bin"); }

  fp8::Status AtCreate(const Field& f, const std::string& value) const {
    Job job;
    SetField(&job, f.path, value);
    return fp8::jobspec::CheckSpecPaths(job, "job", roots_, PathCheck::kAtCreate);
  }

  // The worker's check of the spec fp8d wrote, allowed_roots included.
  fp8::Status BeforeOpen(const Field& f, const std::string& value) const {
    Job job;
    SetField(&job, f.path, value);
    fp8::jobspec::SetAllowedRoots(&job, roots_);
    if (job.has_train()) return fp8::jobspec::CheckPathsBeforeOpen(job.train(), job.train().allowed_roots());
    return fp8::jobspec::CheckPathsBeforeOpen(job.calibrate(), job.calibrate().allowed_roots());
  }

  // A refusal names the field, shows what the caller wrote and never where a symlink leads.
  void ExpectRefused(const fp8::Status& st, const Field& f, const std::string& value, const std::string& prefix) {
    const std::string field = prefix + std::string(f.path).substr(std::string(f.path).find('.') + 1);
    ASSERT_FALSE(st.ok()) << f.path << " = " << value;
    EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message().rfind(field + ": ", 0), 0u) << st.message();
    EXPECT_NE(st.message().find(value), std::string::npos) << st.message();
    if (value.find("outside-secret") == std::string::npos) {
      EXPECT_EQ(st.message().find("outside-secret"), std::string::npos) << "resolved target printed: " << st.message();
    }
  }

  std::string base_, root_, outside_;
  std::vector<std::string> roots_;
};

TEST_F(PathRule, DirectPathUnderTheRootsIsAccepted) {
  for (const Field& f : kFields) {
    const std::string v = Value(root_ + "/sub", f.glob);
    EXPECT_TRUE(AtCreate(f, v).ok()) << f.path << ": " << AtCreate(f, v).message();
    EXPECT_TRUE(BeforeOpen(f, v).ok()) << f.path << ": " << BeforeOpen(f, v).message();
  }
}

TEST_F(PathRule, DotDotOutOfTheRootsIsRefused) {
  for (const Field& f : kFields) {
    const std::string v = Value(root_ + "/../outside-secret", f.glob);
    ExpectRefused(AtCreate(f, v), f, v, f.path[0] == 't' ? "job.train." : "job.calibrate.");
    ExpectRefused(BeforeOpen(f, v), f, v, "");
  }
}

TEST_F(PathRule, SymlinkOutOfTheRootsIsRefusedWithoutItsTarget) {
  for (const Field& f : kFields) {
    const std::string v = Value(root_ + "/link", f.glob);
    ExpectRefused(AtCreate(f, v), f, v, f.path[0] == 't' ? "job.train." : "job.calibrate.");
    ExpectRefused(BeforeOpen(f, v), f, v, "");
  }
}

TEST_F(PathRule, DotDotAfterAWildcardIsRefused) {
  // `d*` matches d1; `../..` then climbs out of the root. In a path that is not a glob, `d*` is
  // a name that does not exist, and `..` below it is refused as well.
  for (const Field& f : kFields) {
    const std::string v = root_ + "/d*/../../outside-secret/a.bin";
    ExpectRefused(AtCreate(f, v), f, v, f.path[0] == 't' ? "job.train." : "job.calibrate.");
    ExpectRefused(BeforeOpen(f, v), f, v, "");
  }
}

TEST_F(PathRule, GlobThroughASymlinkedDirectoryIsRefusedByTheWorker) {
  for (const Field& f : kFields) {
    const std::string v = root_ + "/l[i]nk/*.bin";
    if (!f.glob) {
      // Taken literally: a name under the root that does not exist; opening it reads nothing.
      EXPECT_TRUE(AtCreate(f, v).ok()) << f.path << ": " << AtCreate(f, v).message();
      EXPECT_TRUE(BeforeOpen(f, v).ok()) << f.path << ": " << BeforeOpen(f, v).message();
      continue;
    }
    // fp8d sees the literal directory (the root) only; the worker sees the match.
    EXPECT_TRUE(AtCreate(f, v).ok()) << f.path << ": " << AtCreate(f, v).message();
    ExpectRefused(BeforeOpen(f, v), f, v, "");
  }
}

TEST_F(PathRule, DirectorySwappedForASymlinkAfterCreateIsRefusedByTheWorker) {
  for (const Field& f : kFields) {
    fs::remove_all(root_ + "/swap");
    fs::create_directories(root_ + "/swap");
    std::ofstream(root_ + "/swap/a.bin") << "x";
    const std::string v = Value(root_ + "/swap", f.glob);
    EXPECT_TRUE(AtCreate(f, v).ok()) << f.path << ": " << AtCreate(f, v).message();
    fs::remove_all(root_ + "/swap");
    fs::create_directory_symlink(outside_, root_ + "/swap");
    ExpectRefused(BeforeOpen(f, v), f, v, "");
  }
}

TEST_F(PathRule, RelativePathsAndMissingRootsAreRefused) {
  for (const Field& f : kFields) {
    EXPECT_NE(AtCreate(f, "rel/a.bin").message().find("absolute"), std::string::npos) << f.path;
  }
  Job job;
  job.mutable_train()->set_output_dir(root_ + "/sub");
  EXPECT_FALSE(fp8::jobspec::CheckSpecPaths(job, "job", {}, PathCheck::kAtCreate).ok());
  EXPECT_TRUE(fp8::jobspec::ResolveRoots({base_ + "/no-such-root"}).empty());
}

TEST(ResolvePath, FollowsLinksLikeTheKernel) {
  char tmpl[] = "/tmp/fp8d-resolve-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string base = fs::canonical(tmpl).string();
  fs::create_directories(base + "/a/b");
  fs::create_directory_symlink(base + "/a/b", base + "/l");
  fs::create_symlink("b", base + "/a/rel");
  fs::create_symlink(base + "/nowhere/x", base + "/dangling");
  EXPECT_EQ(*fp8::jobspec::ResolvePath(base + "/l/../c"), base + "/a/c");  // `..` of the target
  EXPECT_EQ(*fp8::jobspec::ResolvePath(base + "/a/rel/new/dir"), base + "/a/b/new/dir");
  // A dangling link is judged by where it points, not by where it sits.
  EXPECT_EQ(*fp8::jobspec::ResolvePath(base + "/dangling"), base + "/nowhere/x");
  EXPECT_FALSE(fp8::jobspec::ResolvePath(base + "/new/../x").ok());
  fs::create_symlink(base + "/loop", base + "/loop");
  EXPECT_FALSE(fp8::jobspec::ResolvePath(base + "/loop/x").ok());
  fs::remove_all(base);
}

}  // namespace
