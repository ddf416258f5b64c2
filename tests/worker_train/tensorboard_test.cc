// SPDX-License-Identifier: Apache-2.0
// training.report_to: tensorboard. The event file of a real CPU run, read back here with a
// reader of its own: the TFRecord framing with both CRCs checked, file_version first, and every
// scalar at steps 1..N equal to what the worker's progress events said.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensorboard/event.pb.h"
#include "tests/worker_train/worker_process.h"
#include "worker/train/tensorboard_writer.h"

namespace fp8::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The RFC 3720 (iSCSI) check values of CRC-32C.
TEST(TensorBoardWriter, Crc32cMatchesTheKnownCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46dd794eu);
  const uint32_t crc = Crc32c("123456789", 9);
  EXPECT_EQ(MaskedCrc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriter, RunDirIsTheJobNameOrTheTrainersDateAndHost) {
  EXPECT_EQ(TensorBoardRunDir("/o", {{"FP8D_JOB", "train-7"}}, "h", 0), "/o/runs/train-7");
  EXPECT_EQ(TensorBoardRunDir("/o", {{"FP8D_JOB", "../x y"}}, "h", 0), "/o/runs/.._x_y");
  EXPECT_EQ(TensorBoardRunDir("/o", {{"FP8D_JOB", ".."}}, "h", 0), "/o/runs/run");
  const std::string plain = TensorBoardRunDir("/o", {}, "node1", 1700000000);
  EXPECT_TRUE(std::regex_match(plain, std::regex(R"(/o/runs/[A-Z][a-z]{2}\d\d_\d\d-\d\d-\d\d_node1)"))) << plain;
}

TEST(TensorBoardWriter, ProgressScalarsNameEveryFigureTheEventHas) {
  fp8d::v1::WorkerEvent::Progress p;
  p.set_loss(2.5);
  p.set_lr(1e-3);
  p.set_grad_norm(0.75);
  p.set_tokens_per_sec(1234);
  std::vector<std::string> tags;
  for (const auto& [tag, v] : ProgressScalars(p)) tags.push_back(tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"train/loss", "train/learning_rate", "train/grad_norm", "train/tokens_per_second"}));
  p.set_mfu(0.4);
  p.set_fp8_amax_max(3);
  p.set_fp8_saturation_fraction(0);  // present though zero
  p.set_moe_load_min(0.5);
  p.set_moe_load_max(1.5);
  p.set_moe_load_cv(0.2);
  p.set_moe_dropped_fraction(0);
  p.set_moe_aux_loss(0.01);
  const auto all = ProgressScalars(p);
  ASSERT_EQ(all.size(), 12u);
  const std::map<std::string, double> got(all.begin(), all.end());
  EXPECT_EQ(got.at("train/mfu"), 0.4);
  EXPECT_EQ(got.at("train/fp8_saturation_fraction"), 0.0);
  EXPECT_EQ(got.at("train/moe_load_max"), 1.5);
  EXPECT_EQ(got.at("train/moe_dropped_fraction"), 0.0);
  EXPECT_EQ(got.at("train/moe_aux_loss"), 0.01);
}

// The records of an event file; fails the test on a bad length, CRC or truncation.
std::vector<std::string> ReadRecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u) << "truncated header at " << at;
    if (bytes.size() - at < 12) break;
    uint64_t len = 0;
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&len, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(len_crc, MaskedCrc32c(bytes.data() + at, 8)) << "length CRC of record " << out.size();
    EXPECT_GE(bytes.size() - at - 12, len + 4) << "truncated record " << out.size();
    if (bytes.size() - at - 12 < len + 4) break;
    std::string data = bytes.substr(at + 12, len);
    std::memcpy(&data_crc, bytes.data() + at + 12 + len, 4);
    EXPECT_EQ(data_crc, MaskedCrc32c(data.data(), data.size())) << "data CRC of record " << out.size();
    out.push_back(std::move(data));
    at += 12 + len + 4;
  }
  return out;
}

std::vector<fs::path> EventFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

struct Scalar {
  int64_t step;
  float value;
};

// tag → its points in file order, after checking the file's first two records.
std::map<std::string, std::vector<Scalar>> ReadScalars(const std::string& path, int64_t first_step) {
  std::map<std::string, std::vector<Scalar>> out;
  const std::vector<std::string> records = ReadRecords(path);
  EXPECT_GE(records.size(), 2u);
  for (size_t i = 0; i < records.size(); ++i) {
    fp8d::tensorboard::Event ev;
    EXPECT_TRUE(ev.ParseFromString(records[i])) << "record " << i;
    EXPECT_GT(ev.wall_time(), 1.6e9) << "record " << i;
    if (i == 0) {
      EXPECT_EQ(ev.file_version(), "brain.Event:2");
      continue;
    }
    if (i == 1) {
      EXPECT_EQ(ev.session_log().status(), fp8d::tensorboard::SessionLog::START);
      EXPECT_EQ(ev.step(), first_step);
      continue;
    }
    EXPECT_TRUE(ev.has_summary()) << "record " << i;
    for (const auto& v : ev.summary().value()) {
      EXPECT_EQ(v.value_case(), fp8d::tensorboard::Summary::Value::kSimpleValue) << v.tag();
      out[v.tag()].push_back({ev.step(), v.simple_value()});
    }
  }
  return out;
}

TEST(TensorBoardWriter, CpuRunWritesEveryScalarAtEveryStep) {
  const std::string dir = testing::MakeTempDir("tensorboard");
  constexpr int64_t kSteps = 6;
  json spec = testing::TinySpecJson(dir, kSteps, 2);
  spec["precision"]["recipe"] = "fp8-tensorwise";
  spec["training"]["eval_steps"] = 3;
  spec["training"]["report_to"] = {"tensorboard"};
  testing::WorkerProcess p = testing::StartWorker(FP8_WORKER_BINARY, {"train", "--spec", testing::WriteSpec(dir, spec)},
                                                  {"FP8D_JOB=tb-job"}, dir, "w");
  ASSERT_EQ(testing::WaitWorker(p), 0) << dir;

  const std::vector<fs::path> files = EventFiles(fs::path(dir) / "out/runs/tb-job");
  ASSERT_EQ(files.size(), 1u) << dir;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  std::smatch name;
  const std::string file_name = files[0].filename().string();
  ASSERT_TRUE(std::regex_match(file_name, name, std::regex(R"(events\.out\.tfevents\.(\d{10})\.(.+))"))) << file_name;
  EXPECT_NEAR(std::stoll(name[1].str()), static_cast<long long>(::time(nullptr)), 600) << file_name;
  EXPECT_EQ(name[2].str(), std::regex_replace(std::string(host), std::regex(R"([^A-Za-z0-9._-])"), "_")) << file_name;
  const auto scalars = ReadScalars(files[0].string(), 1);

  const auto events = testing::Events(p.events_path);
  const auto progress = testing::OfType(events, "progress");
  ASSERT_EQ(progress.size(), static_cast<size_t>(kSteps));
  const std::map<std::string, std::string> field_of = {
      {"train/loss", "loss"},
      {"train/learning_rate", "lr"},
      {"train/grad_norm", "grad_norm"},
      {"train/tokens_per_second", "tokens_per_sec"},
      {"train/fp8_amax_max", "fp8_amax_max"},
      {"train/fp8_saturation_fraction", "fp8_saturation_fraction"},
  };
  for (const auto& [tag, field] : field_of) {
    ASSERT_TRUE(scalars.count(tag)) << tag;
    const auto& points = scalars.at(tag);
    ASSERT_EQ(points.size(), static_cast<size_t>(kSteps)) << tag;
    for (int64_t i = 0; i < kSteps; ++i) {
      EXPECT_EQ(points[i].step, i + 1) << tag;
      EXPECT_EQ(progress[i]["step"].get<int64_t>(), i + 1);
      const double said = progress[i].contains(field) ? progress[i][field].get<double>() : 0.0;
      EXPECT_EQ(points[i].value, static_cast<float>(said)) << tag << " at step " << i + 1;
    }
  }
  // Nothing but the figures above and the evaluations.
  EXPECT_EQ(scalars.size(), field_of.size() + 1);
  std::vector<json> evals;
  for (const json& e : testing::OfType(events, "metric"))
    if (e["name"] == "eval_loss") evals.push_back(e);
  ASSERT_EQ(evals.size(), 2u);
  ASSERT_TRUE(scalars.count("eval/loss"));
  const auto& eval = scalars.at("eval/loss");
  ASSERT_EQ(eval.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(eval[i].step, evals[i]["step"].get<int64_t>());
    EXPECT_EQ(eval[i].value, static_cast<float>(evals[i]["value"].get<double>()));
  }
  EXPECT_EQ(eval[0].step, 3);
  EXPECT_EQ(eval[1].step, 6);
  fs::remove_all(dir);
}

// The default (report_to none) writes no runs/ folder; a resumed attempt adds its own file to
// the job's run, starting with a SessionLog START at the first step it trains (TensorBoard then
// drops the first attempt's points from that step on).
TEST(TensorBoardWriter, NoneWritesNothingAndResumeStartsAtItsStep) {
  const std::string dir = testing::MakeTempDir("tensorboard-resume");
  json spec = testing::TinySpecJson(dir, 2, 2);
  testing::WorkerProcess plain =
      testing::StartWorker(FP8_WORKER_BINARY, {"train", "--spec", testing::WriteSpec(dir, spec)}, {}, dir, "plain");
  ASSERT_EQ(testing::WaitWorker(plain), 0);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "out/runs"));
  fs::remove_all(fs::path(dir) / "out");

  spec["training"]["max_steps"] = 4;
  spec["training"]["save_steps"] = 2;
  spec["training"]["report_to"] = {"tensorboard"};
  const std::string spec_path = testing::WriteSpec(dir, spec);
  // The first attempt runs to the end; the second resumes from its step-2 checkpoint, as a
  // retry after a crash at step 4 would, leaving steps 3..4 of the first file as orphans.
  testing::WorkerProcess first = testing::StartWorker(FP8_WORKER_BINARY, {"train", "--spec", spec_path},
                                                      {"FP8D_JOB=tb-resume", "FP8D_ATTEMPT=1"}, dir, "first");
  ASSERT_EQ(testing::WaitWorker(first), 0);
  const fs::path run = fs::path(dir) / "out/runs/tb-resume";
  ASSERT_EQ(EventFiles(run).size(), 1u);
  testing::WorkerProcess second = testing::StartWorker(
      FP8_WORKER_BINARY, {"train", "--spec", spec_path, "--resume-from", dir + "/out/checkpoints/step-2"},
      {"FP8D_JOB=tb-resume", "FP8D_ATTEMPT=2"}, dir, "second");
  ASSERT_EQ(testing::WaitWorker(second), 0);
  const std::vector<fs::path> files = EventFiles(run);
  ASSERT_EQ(files.size(), 2u);
  // The first attempt's file sorts first (same or earlier second; a same-second name gets ".1").
  const auto a = ReadScalars(files[0].string(), 1);
  const auto b = ReadScalars(files[1].string(), 3);
  ASSERT_EQ(a.at("train/loss").size(), 4u);
  ASSERT_EQ(b.at("train/loss").size(), 2u);
  EXPECT_EQ(b.at("train/loss")[0].step, 3);
  EXPECT_EQ(b.at("train/loss")[1].step, 4);
  // A resumed run repeats the uninterrupted one bit for bit (trainer.h).
  EXPECT_EQ(b.at("train/loss")[1].value, a.at("train/loss")[3].value);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8::train
