// SPDX-License-Identifier: Apache-2.0
// The fault-injection worker itself: its knobs do what main.cc documents, so the tests of the
// launcher, the manager and the integration can trust it.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// An event line is {"time": t, "<type>": {payload}} (proto/fp8d/v1/worker_event.proto): the
// key that is not "time" names it.
std::string TypeOf(const json& e) {
  for (const auto& [key, value] : e.items()) {
    if (key != "time") return key;
  }
  return "";
}

// Proto JSON writes int64 fields as strings; the tests compare numbers.
json Numbers(json payload) {
  for (auto& [key, value] : payload.items()) {
    if (!value.is_string()) continue;
    const std::string s = value.get<std::string>();
    if (!s.empty() && s.find_first_not_of("-0123456789") == std::string::npos) value = std::stoll(s);
  }
  return payload;
}

struct RunResult {
  int exit_code = -1;  // the shell's view: 128 + signal for a killed worker
  std::vector<json> events;
  std::string log;
  std::vector<std::string> types() const {
    std::vector<std::string> t;
    for (const auto& e : events) {
      if (TypeOf(e) != "heartbeat") t.push_back(TypeOf(e));
    }
    return t;
  }
  // The payloads of the events of `type`.
  std::vector<json> of(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (TypeOf(e) == type) out.push_back(Numbers(e[type]));
    }
    return out;
  }
};

class TestWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string base = (fs::temp_directory_path() / "fp8-test-worker-XXXXXX").string();
    std::vector<char> buf(base.begin(), base.end());
    buf.push_back('\0');
    ASSERT_NE(::mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs the worker to completion with only `env` (plus PATH) in its environment; with
  // `sigterm_after_s` > 0 it gets SIGTERM that long after its start (and SIGKILL 2 s later, so
  // a worker that ignores it cannot outlive the test).
  RunResult Run(const std::map<std::string, std::string>& env, const std::string& spec = "{}",
                const std::string& args = "", double sigterm_after_s = 0) {
    std::ofstream(dir_ + "/spec.json") << spec;
    std::string cmd = "env -i PATH=/usr/bin:/bin";
    for (const auto& [k, v] : env) cmd += " " + k + "=" + ShellQuote(v);
    cmd += " " + ShellQuote(FP8_TEST_WORKER_PATH) + " " +
           (args.empty() ? "train --spec " + ShellQuote(dir_ + "/spec.json") : args) + " > " +
           ShellQuote(dir_ + "/events") + " 2> " + ShellQuote(dir_ + "/log");
    if (sigterm_after_s > 0) {
      const std::string after = std::to_string(sigterm_after_s);
      cmd += " & pid=$!; sleep " + after + "; kill -TERM $pid; (sleep 2; kill -KILL $pid 2>/dev/null) & "
             "killer=$!; wait $pid; rc=$?; kill $killer 2>/dev/null; echo $rc > " + ShellQuote(dir_ + "/rc");
    } else {
      cmd += "; echo $? > " + ShellQuote(dir_ + "/rc");
    }
    EXPECT_EQ(std::system(("sh -c " + ShellQuote(cmd)).c_str()), 0);
    RunResult r;
    r.exit_code = std::atoi(ReadFile(dir_ + "/rc").c_str());
    r.log = ReadFile(dir_ + "/log");
    std::stringstream lines(ReadFile(dir_ + "/events"));
    std::string line;
    while (std::getline(lines, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) r.events.push_back(j);
    }
    return r;
  }

  std::string dir_;
};

TEST_F(TestWorkerTest, SucceedsWithCheckpointsAndDone) {
  std::string ckpt = dir_ + "/ckpt";
  RunResult r = Run({{"FP8_TEST_STEPS", "6"}, {"FP8_TEST_STEP_MS", "1"},
                     {"FP8_TEST_SAVE_STEPS", "2"}, {"FP8D_CHECKPOINT_DIR", ckpt},
                     {"FP8D_RANK", "0"}, {"FP8D_WORLD_SIZE", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(r.types(), (std::vector<std::string>{"started", "progress", "progress", "checkpoint",
                                                 "progress", "progress", "checkpoint", "progress",
                                                 "progress", "checkpoint", "done"}));
  std::vector<long> steps;
  for (const auto& p : r.of("progress")) steps.push_back(p["step"]);
  EXPECT_EQ(steps, (std::vector<long>{1, 2, 3, 4, 5, 6}));
  for (const auto& c : r.of("checkpoint")) {
    std::string path = c["path"];
    EXPECT_EQ(path, ckpt + "/step-" + std::to_string(c["step"].get<long>()));
    json state = json::parse(ReadFile(path + "/trainer_state.json"));
    EXPECT_EQ(state["step"], c["step"]);
    EXPECT_TRUE(fs::exists(path + "/model.bin"));
    EXPECT_FALSE(c["checksum"].get<std::string>().empty());
  }
  // Nothing half-written left behind.
  for (const auto& entry : fs::directory_iterator(ckpt)) {
    EXPECT_EQ(entry.path().filename().string().rfind("step-", 0), 0u) << entry.path();
  }
  json done = r.of("done").at(0);
  EXPECT_EQ(done["result"]["final_step"], 6);
  EXPECT_EQ(done["result"]["resumed_from_step"], 0);
  EXPECT_FALSE(r.of("started").at(0).contains("step"));  // proto JSON leaves zeros out
  EXPECT_EQ(r.of("started").at(0)["pid"].is_number(), true);
}

TEST_F(TestWorkerTest, ResumesFromTheCheckpointItIsGiven) {
  std::string ckpt = dir_ + "/ckpt";
  RunResult first = Run({{"FP8_TEST_STEPS", "6"}, {"FP8_TEST_STEP_MS", "1"},
                         {"FP8_TEST_SAVE_STEPS", "2"}, {"FP8D_CHECKPOINT_DIR", ckpt},
                         {"FP8_TEST_MODE", "crash_at_step"}, {"FP8_TEST_CRASH_STEP", "5"}});
  EXPECT_EQ(first.exit_code, 128 + 9);
  EXPECT_EQ(first.of("progress").back()["step"], 4);
  ASSERT_TRUE(fs::exists(ckpt + "/step-4"));

  RunResult second = Run({{"FP8_TEST_STEPS", "6"}, {"FP8_TEST_STEP_MS", "1"},
                          {"FP8_TEST_SAVE_STEPS", "2"}, {"FP8D_CHECKPOINT_DIR", ckpt},
                          {"FP8D_RESUME_FROM", ckpt + "/step-4"}});
  EXPECT_EQ(second.exit_code, 0) << second.log;
  EXPECT_EQ(second.of("started").at(0)["step"], 4);
  std::vector<long> steps;
  for (const auto& p : second.of("progress")) steps.push_back(p["step"]);
  EXPECT_EQ(steps, (std::vector<long>{5, 6}));
  EXPECT_EQ(second.of("done").at(0)["result"]["final_step"], 6);
  EXPECT_EQ(second.of("done").at(0)["result"]["resumed_from_step"], 4);
}

TEST_F(TestWorkerTest, UnreadableResumePointIsADataError) {
  RunResult r = Run({{"FP8D_RESUME_FROM", dir_ + "/missing/step-3"}});
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_EQ(r.of("error").at(0)["class"], "DATA_ERROR");
  EXPECT_TRUE(r.of("started").empty());
}

TEST_F(TestWorkerTest, FailsOnlyOnTheNamedAttempt) {
  std::map<std::string, std::string> env = {{"FP8_TEST_MODE", "crash_at_step"},
                                            {"FP8_TEST_CRASH_STEP", "2"},
                                            {"FP8_TEST_STEPS", "3"},
                                            {"FP8_TEST_STEP_MS", "1"},
                                            {"FP8_TEST_CRASH_ONLY_ATTEMPT", "1"},
                                            {"FP8D_ATTEMPT", "1"}};
  EXPECT_EQ(Run(env).exit_code, 128 + 9);
  env["FP8D_ATTEMPT"] = "2";
  RunResult r = Run(env);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.of("done").at(0)["result"]["final_step"], 3);
}

TEST_F(TestWorkerTest, FailsOnlyOnTheNamedRank) {
  std::map<std::string, std::string> env = {{"FP8_TEST_MODE", "exit_code"},
                                            {"FP8_TEST_EXIT_CODE", "70"},
                                            {"FP8_TEST_CRASH_STEP", "1"},
                                            {"FP8_TEST_STEPS", "2"},
                                            {"FP8_TEST_STEP_MS", "1"},
                                            {"FP8_TEST_FAIL_RANK", "1"},
                                            {"FP8D_RANK", "1"}};
  RunResult failed = Run(env);
  EXPECT_EQ(failed.exit_code, 70);
  EXPECT_EQ(failed.of("error").at(0)["class"], "INTERNAL_ERROR");
  env["FP8D_RANK"] = "0";
  EXPECT_EQ(Run(env).exit_code, 0);
}

TEST_F(TestWorkerTest, ExitCodeBeforeStartEmitsOnlyTheError) {
  RunResult r = Run({{"FP8_TEST_MODE", "exit_code"}, {"FP8_TEST_EXIT_CODE", "64"},
                     {"FP8_TEST_CRASH_STEP", "0"}});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(r.types(), (std::vector<std::string>{"error"}));
  EXPECT_EQ(r.of("error").at(0)["class"], "INVALID_SPEC");
}

TEST_F(TestWorkerTest, NanModeReportsNumericAndExits75) {
  RunResult r = Run({{"FP8_TEST_MODE", "nan"}, {"FP8_TEST_CRASH_STEP", "3"},
                     {"FP8_TEST_STEP_MS", "1"}});
  EXPECT_EQ(r.exit_code, 75);
  auto progress = r.of("progress");
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress.back()["loss"], "NaN");  // proto JSON's spelling: NaN is not a JSON number
  EXPECT_EQ(r.of("error").at(0)["class"], "NUMERIC");
}

TEST_F(TestWorkerTest, SpecAndEnvironmentPrecedence) {
  // TrainSpec's training.max_steps (proto JSON prints int64 as a string)...
  EXPECT_EQ(Run({{"FP8_TEST_STEP_MS", "1"}}, R"({"training": {"max_steps": "4"}})")
                .of("done").at(0)["result"]["final_step"], 4);
  EXPECT_EQ(Run({{"FP8_TEST_STEP_MS", "1"}}, R"({"training": {"maxSteps": "5"}})")
                .of("done").at(0)["result"]["final_step"], 5);
  // ...under the "test" object...
  EXPECT_EQ(Run({{"FP8_TEST_STEP_MS", "1"}},
                R"({"training": {"max_steps": "4"}, "test": {"steps": 3}})")
                .of("done").at(0)["result"]["final_step"], 3);
  // ...under the environment.
  EXPECT_EQ(Run({{"FP8_TEST_STEP_MS", "1"}, {"FP8_TEST_STEPS", "2"}},
                R"({"training": {"max_steps": "4"}, "test": {"steps": 3}})")
                .of("done").at(0)["result"]["final_step"], 2);
  // The test object alone can choose a failure.
  EXPECT_EQ(Run({}, R"({"test": {"mode": "exit_code", "exit_code": 65, "crash_step": 0}})").exit_code,
            65);
}

TEST_F(TestWorkerTest, GarbageModeMixesInNonEvents) {
  RunResult r = Run({{"FP8_TEST_MODE", "garbage"}, {"FP8_TEST_STEPS", "1"}, {"FP8_TEST_STEP_MS", "1"}});
  EXPECT_EQ(r.exit_code, 0);
  std::string raw = ReadFile(dir_ + "/events");
  EXPECT_NE(raw.find("this is not json, step 1\n"), std::string::npos);
  EXPECT_NE(raw.find("{\"no_type_here\": 1}\n"), std::string::npos);
  EXPECT_EQ(r.types(), (std::vector<std::string>{"started", "progress", "no_type_here", "done"}));
}

TEST_F(TestWorkerTest, BadArgumentsAreAnInvalidSpec) {
  EXPECT_EQ(Run({}, "{}", "bogus").exit_code, 64);
  EXPECT_EQ(Run({}, "{}", "train --spec " + dir_ + "/nope.json").exit_code, 64);
  EXPECT_EQ(Run({}, "not json").exit_code, 64);
}

TEST_F(TestWorkerTest, HeartbeatsCanBeTurnedOff) {
  RunResult r = Run({{"FP8_TEST_NO_HEARTBEAT", "1"}, {"FP8_TEST_STEPS", "3"},
                     {"FP8_TEST_STEP_MS", "20"}, {"FP8_TEST_HEARTBEAT_MS", "1"}});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.of("heartbeat").empty());
}

}  // namespace

namespace {

// SIGTERM (a preemption): the step in flight finishes, its checkpoint is written, then
// `preempted` names it, then an interrupted `done`; exit 76.
TEST_F(TestWorkerTest, SigtermCheckpointsTheStepReportsPreemptedAndExits76) {
  RunResult r = Run({{"FP8_TEST_STEPS", "1000"}, {"FP8_TEST_STEP_MS", "20"}, {"FP8_TEST_SAVE_STEPS", "1000"},
                     {"FP8D_CHECKPOINT_DIR", dir_ + "/ck"}},
                    "{}", "", 0.3);
  EXPECT_EQ(r.exit_code, 76) << r.log;
  const std::vector<std::string> types = r.types();
  ASSERT_GE(types.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(types.end() - 3, types.end()),
            (std::vector<std::string>{"checkpoint", "preempted", "done"}));
  const json preempted = r.of("preempted").at(0);
  const json checkpoint = r.of("checkpoint").back();
  EXPECT_EQ(preempted["step"], checkpoint["step"]);
  EXPECT_EQ(preempted["step"], r.of("progress").back()["step"]) << "the last step done";
  EXPECT_EQ(preempted["checkpoint"], checkpoint["path"]);
  EXPECT_TRUE(fs::exists(checkpoint["path"].get<std::string>() + "/trainer_state.json"));
  EXPECT_EQ(r.of("done").at(0)["result"]["interrupted"], true);
}

// ignore_sigterm: SIGTERM changes nothing; only the SIGKILL after the grace ends it.
TEST_F(TestWorkerTest, IgnoreSigtermModeRunsOnUntilKilled) {
  RunResult r = Run({{"FP8_TEST_MODE", "ignore_sigterm"}, {"FP8_TEST_STEPS", "1000"}, {"FP8_TEST_STEP_MS", "20"},
                     {"FP8D_CHECKPOINT_DIR", dir_ + "/ck"}},
                    "{}", "", 0.3);
  EXPECT_EQ(r.exit_code, 128 + 9) << r.log;
  EXPECT_TRUE(r.of("preempted").empty());
  EXPECT_TRUE(r.of("done").empty());
  EXPECT_GT(r.of("progress").size(), 50u) << "it ran on for a while after SIGTERM (at ~15 steps)";
}

}  // namespace
