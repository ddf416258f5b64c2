// SPDX-License-Identifier: Apache-2.0
// Job.env's allowlist (daemon/api/job_env.h) as a table: each row a variable, the operator's
// --job-env-allow entries, and whether CreateJob accepts it.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/api/job_env.h"

namespace fp8d::api {
namespace {

struct EnvCase {
  std::string key;
  std::string value;
  std::vector<std::string> allow;  // --job-env-allow
  bool accepted;
};

std::string Describe(const EnvCase& c) {
  std::string allow;
  for (const auto& a : c.allow) allow += " --job-env-allow " + a;
  return c.key + "=" + c.value + allow;
}

const std::vector<EnvCase> kCases = {
    // values-only tuning knobs: built in
    {"OMP_NUM_THREADS", "4", {}, true},
    {"OMP_PROC_BIND", "close", {}, true},
    {"CUDA_LAUNCH_BLOCKING", "1", {}, true},
    {"CUDA_MODULE_LOADING", "LAZY", {}, true},
    {"NCCL_DEBUG", "INFO", {}, true},
    {"NCCL_SOCKET_IFNAME", "eth0", {}, true},
    {"NCCL_IB_DISABLE", "1", {}, true},
    {"TZ", "Europe/Berlin", {}, true},
    {"TZ", ":UTC", {}, true},
    {"LANG", "C.UTF-8", {}, true},
    {"LC_ALL", "en_US.UTF-8", {}, true},
    {"FP8_NUM_THREADS", "2", {}, true},
    {"FP8_TEST_STEPS", "10", {}, true},
    // loaders, shells, interpreters: refused, and no operator entry admits them
    {"LD_PRELOAD", "/tmp/evil.so", {}, false},
    {"LD_PRELOAD", "/tmp/evil.so", {"LD_PRELOAD"}, false},
    {"LD_LIBRARY_PATH", "/tmp", {"LD_*"}, false},
    {"LD_AUDIT", "/tmp/a.so", {"*"}, false},
    {"GCONV_PATH", "/tmp", {"*"}, false},
    {"GLIBC_TUNABLES", "glibc.malloc.check=3", {"GLIBC_*"}, false},
    {"PYTHONPATH", "/tmp", {"PY*"}, false},
    {"PYTHONSTARTUP", "/tmp/x.py", {}, false},
    {"PERL5OPT", "-Mevil", {"P*"}, false},
    {"PERL5LIB", "/tmp", {}, false},
    {"BASH_ENV", "/tmp/x.sh", {"B*"}, false},
    {"BASH_FUNC_ls%%", "() { id; }", {}, false},  // not even a name
    {"ENV", "/tmp/x.sh", {"*"}, false},
    {"IFS", "/", {"*"}, false},
    {"PATH", "/tmp", {"*"}, false},
    {"HOME", "/tmp", {"*"}, false},
    {"TMPDIR", "/etc", {"*"}, false},
    {"NODE_OPTIONS", "--require /tmp/x.js", {"*"}, false},
    {"JAVA_TOOL_OPTIONS", "-javaagent:/tmp/a.jar", {"*"}, false},
    {"OPENSSL_CONF", "/tmp/engine.cnf", {"*"}, false},
    // plugins and files inside otherwise allowed families
    {"NCCL_NET_PLUGIN", "/tmp/evil", {}, false},
    {"NCCL_NET_PLUGIN", "/tmp/evil", {"NCCL_*"}, false},
    {"NCCL_TUNER_PLUGIN", "/tmp/evil", {"NCCL_*"}, false},
    {"NCCL_CONF_FILE", "/tmp/nccl.conf", {"NCCL_*"}, false},
    {"NCCL_DEBUG_FILE", "/etc/passwd", {"NCCL_*"}, false},
    {"NCCL_NET", "Socket", {"NCCL_*"}, true},  // the operator's prefix admits the rest
    {"OMP_TOOL_LIBRARIES", "/tmp/tool.so", {"OMP_*"}, false},
    {"CUDA_INJECTION64_PATH", "/tmp/i.so", {"CUDA_*"}, false},
    {"CUDA_CACHE_PATH", "/etc", {"CUDA_*"}, false},
    {"CUDA_VISIBLE_DEVICES", "0,1,2,3", {"CUDA_*"}, false},
    // the launcher's own
    {"FP8D_RANK", "3", {}, false},
    // paths in locale and zone names
    {"TZ", "/tmp/zone", {}, false},
    {"TZ", ":/tmp/zone", {}, false},
    {"TZ", "../../tmp/zone", {}, false},
    {"LC_ALL", "/tmp/locale", {}, false},
    {"LANG", "../x", {}, false},
    // unknown names: refused unless the operator allows them
    {"AWS_SECRET_ACCESS_KEY", "x", {}, false},
    {"WANDB_PROJECT", "fp8", {}, false},
    {"WANDB_PROJECT", "fp8", {"WANDB_PROJECT"}, true},
    {"WANDB_MODE", "offline", {"WANDB_*"}, true},
    {"WANDB_MODE", "offline", {"WANDB_PROJECT"}, false},
    // malformed names
    {"A-B", "v", {"*"}, false},
    {"1X", "v", {"*"}, false},
};

TEST(JobEnvAllowlist, Table) {
  for (const EnvCase& c : kCases) {
    fp8d::v1::Job job;
    (*job.mutable_env())[c.key] = c.value;
    const fp8::Status s = ValidateJobEnv(job, c.allow);
    EXPECT_EQ(s.ok(), c.accepted) << Describe(c) << ": " << s.ToString();
    if (!c.accepted) {
      EXPECT_EQ(s.code(), fp8::StatusCode::kInvalidArgument) << Describe(c);
      EXPECT_NE(s.message().find("job.env[" + c.key + "]"), std::string::npos) << s.message();
    }
  }
}

TEST(JobEnvAllowlist, UnknownNamesSayHowToAllowThem) {
  fp8d::v1::Job job;
  (*job.mutable_env())["WANDB_PROJECT"] = "fp8";
  const fp8::Status unknown = ValidateJobEnv(job, {});
  EXPECT_NE(unknown.message().find("--job-env-allow WANDB_PROJECT"), std::string::npos) << unknown.message();
  job.mutable_env()->clear();
  (*job.mutable_env())["LD_PRELOAD"] = "/tmp/x.so";
  const fp8::Status never = ValidateJobEnv(job, {"LD_PRELOAD"});
  EXPECT_NE(never.message().find("job.env[LD_PRELOAD]: not allowed"), std::string::npos) << never.message();
  EXPECT_NE(never.message().find("no --job-env-allow admits it"), std::string::npos) << never.message();
}

TEST(JobEnvAllowlist, SizesAreBounded) {
  fp8d::v1::Job job;
  (*job.mutable_env())["FP8_X"] = std::string(4097, 'x');
  EXPECT_EQ(ValidateJobEnv(job, {}).code(), fp8::StatusCode::kInvalidArgument);
  job.mutable_env()->clear();
  for (int i = 0; i < 65; ++i) (*job.mutable_env())["FP8_" + std::to_string(i)] = "1";
  EXPECT_NE(ValidateJobEnv(job, {}).message().find("at most 64"), std::string::npos);
}

// --job-env-allow entries that could only admit refused names are start-up errors.
TEST(JobEnvAllowlist, OperatorEntries) {
  const std::vector<std::pair<std::string, bool>> entries = {
      {"WANDB_PROJECT", true}, {"WANDB_*", true}, {"NCCL_*", true}, {"*", true},
      {"LD_PRELOAD", false},   {"LD_*", false},   {"LD_P*", false}, {"PYTHONPATH", false},
      {"PYTHON*", false},      {"FP8D_JOB", false}, {"BASH_ENV", false}, {"A-B", false},
      {"", false},             {"X*Y", false}};
  for (const auto& [entry, ok] : entries) {
    const fp8::Status s = CheckJobEnvAllow({entry});
    EXPECT_EQ(s.ok(), ok) << entry << ": " << s.ToString();
    if (!ok) EXPECT_NE(s.message().find("--job-env-allow " + entry), std::string::npos) << s.message();
  }
}

TEST(JobEnvAllowlist, Patterns) {
  EXPECT_TRUE(MatchesEnvPattern("NCCL_*_PLUGIN", "NCCL_NET_PLUGIN"));
  EXPECT_FALSE(MatchesEnvPattern("NCCL_*_PLUGIN", "NCCL_PLUGIN"));
  EXPECT_TRUE(MatchesEnvPattern("LC_*", "LC_"));
  EXPECT_FALSE(MatchesEnvPattern("LANG", "LANGUAGE"));
  EXPECT_TRUE(MatchesEnvPattern("*", "ANYTHING"));
}

}  // namespace
}  // namespace fp8d::api
