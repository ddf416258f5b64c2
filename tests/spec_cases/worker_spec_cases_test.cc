// SPDX-License-Identifier: Apache-2.0
// The worker side of the shared case table: every case is refused by the worker's spec reader
// (the same jobspec validator the daemon runs) naming the field, some of them by the real
// fp8-worker binary with exit 64; and every validator rule has a case.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "jobspec/defaults.h"
#include "jobspec/validate.h"
#include "tests/spec_cases/spec_cases.h"
#include "worker/calibrate/spec.h"
#include "worker/common/spec_file.h"
#include "worker/train/spec.h"

namespace fp8::spec_cases {
namespace {

Status WorkerParse(const SpecCase& c) {
  if (c.kind == "train") return train::ParseTrainSpec(c.spec).status();
  return calibrate::ParseCalibrateSpec(c.spec).status();
}

// The rule the defaulted spec breaks first, so a case cannot pass by tripping another rule.
std::string BrokenRule(const SpecCase& c) {
  if (c.kind == "train") {
    fp8d::v1::TrainSpec p;
    if (!worker::ParseSpecJson(c.spec, &p).ok()) return "(unreadable)";
    jobspec::ApplyTrainDefaults(&p);
    return jobspec::FirstBrokenTrainRule(p);
  }
  fp8d::v1::CalibrateSpec p;
  if (!worker::ParseSpecJson(c.spec, &p).ok()) return "(unreadable)";
  jobspec::ApplyCalibrateDefaults(&p);
  return jobspec::FirstBrokenCalibrateRule(p);
}

TEST(SpecCases, EveryValidatorRuleHasACase) {
  std::set<std::string> covered;
  for (const SpecCase& c : Load()) covered.insert(c.kind + ":" + c.rule);
  std::set<std::string> rules;
  for (const std::string& id : jobspec::TrainRuleIds()) rules.insert("train:" + id);
  for (const std::string& id : jobspec::CalibrateRuleIds()) rules.insert("calibrate:" + id);
  for (const std::string& r : rules) EXPECT_TRUE(covered.count(r)) << "no case in spec_cases.json for rule " << r;
  for (const std::string& c : covered) EXPECT_TRUE(rules.count(c)) << "spec_cases.json names an unknown rule " << c;
}

TEST(SpecCases, MinimalSpecsAreValid) {
  EXPECT_TRUE(train::ParseTrainSpec(Minimal("train")).ok()) << train::ParseTrainSpec(Minimal("train")).status().ToString();
  EXPECT_TRUE(calibrate::ParseCalibrateSpec(Minimal("calibrate")).ok());
}

TEST(SpecCases, TheWorkerRefusesEachCaseNamingTheField) {
  const auto cases = Load();
  ASSERT_GT(cases.size(), 40u);
  for (const SpecCase& c : cases) {
    SCOPED_TRACE(c.kind + " " + c.rule + ": " + c.spec.dump());
    EXPECT_EQ(BrokenRule(c), c.rule);
    const Status st = WorkerParse(c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message().rfind(c.field + ": ", 0), 0u) << st.message();
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
  }
}

TEST(SpecCases, TheWorkerBinaryExits64NamingTheField) {
  const std::string dir = ::testing::TempDir() + "/fp8-spec-cases-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  int ran = 0;
  for (const SpecCase& c : Load()) {
    if (!c.worker_binary) continue;
    SCOPED_TRACE(c.kind + " " + c.rule);
    const std::string spec = dir + "/spec.json", err = dir + "/stderr";
    std::ofstream(spec) << c.spec.dump();
    const std::string cmd = std::string(FP8_WORKER_BINARY) + " " + c.kind + " --spec " + spec + " >/dev/null 2>" + err;
    const int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc));
    EXPECT_EQ(WEXITSTATUS(rc), 64);
    std::ifstream in(err);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(c.field + ": "), std::string::npos) << text;
    ++ran;
  }
  EXPECT_GE(ran, 4);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8::spec_cases
