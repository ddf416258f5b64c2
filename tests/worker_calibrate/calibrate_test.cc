// SPDX-License-Identifier: Apache-2.0
// `fp8-worker calibrate` end to end through CalibrateMain: FP8 round trip within the E4M3
// error bound on a generated multi-shard model, untouched tensors byte-identical, index and
// config contents, dequantize back to BF16, restart after an interruption, and bad input /
// bad specs ending with the right exit code and message.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/event_lines.h"
#include "kernels/fp8_format.h"
#include "kernels/quantize.h"
#include "kernels/scaling.h"
#include "tests/worker_calibrate/model_fixture.h"
#include "worker/calibrate/calibrate_main.h"
#include "worker/common/events.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using safetensors::DType;
using safetensors::Reader;
using ::testing::HasSubstr;
using testing::FixtureModel;
using testing::FixtureTensor;
using testing::Slurp;

json ReadJson(const fs::path& p) { return json::parse(Slurp(p)); }

class CalibrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("calib_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(root_);
  }

  // Runs CalibrateMain with `spec` (written to a file); returns the exit code and keeps the
  // events it wrote.
  int Run(const json& spec, std::vector<std::string> extra = {}, const std::string& spec_name = "spec.json") {
    const fs::path spec_path = root_ / spec_name;
    std::ofstream(spec_path) << spec.dump(2);
    return RunWithSpecFile(spec_path.string(), extra);
  }
  int RunWithSpecFile(const std::string& spec_path, std::vector<std::string> extra = {}) {
    const fs::path events = root_ / "events.ndjson";
    fs::remove(events);
    std::vector<std::string> args = {"--spec", spec_path, "--events", events.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    const int rc = CalibrateMain(static_cast<int>(argv.size()), argv.data());
    events_.clear();
    std::ifstream f(events);
    for (std::string line; std::getline(f, line);) events_.push_back(fp8::testing::FlatEvent(json::parse(line)));
    return rc;
  }
  std::vector<json> EventsOfType(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events_)
      if (e["type"] == type) out.push_back(e);
    return out;
  }
  std::string ErrorMessage() const {
    auto errs = EventsOfType("error");
    return errs.empty() ? "" : errs.back()["message"].get<std::string>();
  }
  void ExpectDataError(const json& spec, const std::string& what, const std::string& file) {
    const int rc = Run(spec);
    EXPECT_EQ(rc, 65) << ErrorMessage();
    auto errs = EventsOfType("error");
    ASSERT_EQ(errs.size(), 1u);
    EXPECT_EQ(errs[0]["class"], "DATA_ERROR");
    EXPECT_THAT(ErrorMessage(), HasSubstr(what));
    EXPECT_THAT(ErrorMessage(), HasSubstr(file));
    // Nothing half-written looks whole: no output dir, no staging dir.
    EXPECT_FALSE(fs::exists(spec["output_dir"].get<std::string>()));
    EXPECT_FALSE(fs::exists(spec["output_dir"].get<std::string>() + ".partial"));
  }

  fs::path root_;
  std::vector<json> events_;
};

// |x − x̂| for x̂ = E4M3(x / s)·s, rounding to nearest: E4M3 has 3 mantissa bits, so for a
// normal v = x/s (|v| ≥ 2^-6) the spacing is 2^(e−3) with 2^e ≤ |v| and the error at most half
// of it, 2^(e−4) ≤ |v|·2^-4; below 2^-6 (subnormals) the spacing is 2^-9, the error ≤ 2^-10.
// Scaled back: |x − x̂| ≤ max(|x|·2^-4, s·2^-10), plus FP32 rounding of x/s and q·s (~2^-23|x|).
double E4M3Bound(float x, float s) {
  return std::max(std::fabs(x) * 0.0625, s * std::ldexp(1.0, -10)) + std::fabs(x) * 1e-6;
}

std::vector<float> ReadScales(const Reader& r, const std::string& name) {
  auto bytes = r.Read(name);
  EXPECT_TRUE(bytes.ok());
  std::vector<float> s(bytes->size() / 4);
  std::memcpy(s.data(), bytes->data(), bytes->size());
  return s;
}

// Checks one quantized tensor against its original: shape, scale layout and values, bound.
void CheckQuantized(const FixtureTensor& orig, const Reader& r, kernels::ScaleFormat sf) {
  SCOPED_TRACE(orig.name);
  const auto* q = r.Find(orig.name);
  const auto* s = r.Find(orig.name + "_scale_inv");
  ASSERT_NE(q, nullptr);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(q->dtype, DType::F8_E4M3);
  EXPECT_EQ(q->shape, orig.shape);
  EXPECT_EQ(s->dtype, DType::F32);
  const int64_t rows = orig.shape[0], cols = orig.shape[1];
  const int64_t br = kernels::CeilDiv(rows, 128), bc = kernels::CeilDiv(cols, 128);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{br, bc}));
  const std::vector<float> x = orig.Values();
  const std::vector<float> scales = ReadScales(r, s->name);
  auto qbytes = r.Read(orig.name);
  ASSERT_TRUE(qbytes.ok());
  // Each block's scale is its own amax / 448 (edge blocks cover only their real elements).
  for (int64_t bi = 0; bi < br; ++bi)
    for (int64_t bj = 0; bj < bc; ++bj) {
      float amax = 0;
      for (int64_t i = bi * 128; i < std::min(rows, bi * 128 + 128); ++i)
        for (int64_t j = bj * 128; j < std::min(cols, bj * 128 + 128); ++j) amax = std::max(amax, std::fabs(x[i * cols + j]));
      const float expect = kernels::ScaleInvFromAmax(amax, kernels::Fp8Format::kE4M3, sf);
      ASSERT_EQ(scales[bi * bc + bj], expect) << "block " << bi << "," << bj;
      if (sf == kernels::ScaleFormat::kUe8m0) {
        int e;
        EXPECT_EQ(std::frexp(expect, &e), 0.5f) << "not a power of two";
      }
    }
  int64_t violations = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float sc = scales[(i / 128) * bc + j / 128];
      const float xhat = kernels::Fp8ToFloat((*qbytes)[i * cols + j], kernels::Fp8Format::kE4M3) * sc;
      const float xv = x[i * cols + j];
      if (std::fabs(static_cast<double>(xv) - xhat) > E4M3Bound(xv, sc) && ++violations < 5)
        ADD_FAILURE() << "element " << i << "," << j << ": x=" << xv << " x̂=" << xhat << " s=" << sc;
    }
  EXPECT_EQ(violations, 0);
}

json QuantizeSpec(const std::string& in, const std::string& out) {
  return {{"input", in}, {"output_dir", out}};
}

TEST_F(CalibrateTest, QuantizesMultiShardModelWithinE4M3Bound) {
  const FixtureModel m = testing::WriteFixtureModel((root_ / "in").string(), 1);
  const fs::path out = root_ / "out";
  ASSERT_EQ(Run(QuantizeSpec(m.dir, out.string())), 0) << ErrorMessage();

  // Events: started, one progress per input tensor (ending at total), done.
  ASSERT_EQ(EventsOfType("started").size(), 1u);
  auto progress = EventsOfType("progress");
  ASSERT_EQ(progress.size(), m.tensors.size());
  EXPECT_EQ(progress.back()["step"], m.tensors.size());
  EXPECT_EQ(progress.back()["total_steps"], m.tensors.size());
  auto done = EventsOfType("done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]["result"]["tensors_converted"], 6);
  EXPECT_EQ(done[0]["result"]["shards_skipped"], 0);

  const auto quantized = testing::DefaultQuantizedNames();
  std::map<std::string, std::unique_ptr<Reader>> readers;
  for (const auto& shard : m.shards) {
    auto r = Reader::Open((out / shard).string());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->metadata().at("format"), "pt");
    readers[shard] = std::make_unique<Reader>(std::move(*r));
  }
  for (const auto& [name, t] : m.tensors) {
    const Reader& r = *readers.at(t.shard);
    if (std::find(quantized.begin(), quantized.end(), name) != quantized.end()) {
      CheckQuantized(t, r, kernels::ScaleFormat::kFp32);
    } else {
      SCOPED_TRACE(name);
      const auto* info = r.Find(name);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(info->dtype, t.dtype);
      EXPECT_EQ(info->shape, t.shape);
      EXPECT_EQ(*r.Read(name), t.bytes) << "untouched tensor changed";
      EXPECT_EQ(r.Find(name + "_scale_inv"), nullptr);
    }
  }

  // Index: every output tensor, in the shard that holds it; total_size = data bytes.
  const json index = ReadJson(out / "model.safetensors.index.json");
  uint64_t total = 0;
  size_t count = 0;
  for (const auto& [shard, r] : readers) {
    for (const auto& t : r->tensors()) {
      EXPECT_EQ(index["weight_map"][t.name], shard) << t.name;
      total += t.nbytes();
      ++count;
    }
  }
  EXPECT_EQ(index["weight_map"].size(), count);
  EXPECT_EQ(count, m.tensors.size() + quantized.size());
  EXPECT_EQ(index["metadata"]["total_size"], total);

  // config.json: the original plus quantization_config.
  const json config = ReadJson(out / "config.json");
  EXPECT_EQ(config["hidden_size"], 136);
  const json& qc = config["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "fp8");
  EXPECT_EQ(qc["fmt"], "e4m3");
  EXPECT_EQ(qc["activation_scheme"], "dynamic");
  EXPECT_EQ(qc["weight_block_size"], json::array({128, 128}));
  EXPECT_FALSE(qc.contains("scale_fmt"));
  const json ignored = json::array({"lm_head", "model.embed_tokens", "model.layers.1.mlp.gate"});
  EXPECT_EQ(qc["ignored_layers"], ignored);
  EXPECT_EQ(qc["modules_to_not_convert"], ignored);

  // Other files copied; reports written; nothing left of the staging.
  EXPECT_EQ(Slurp(out / "tokenizer.json"), Slurp(fs::path(m.dir) / "tokenizer.json"));
  const json report = ReadJson(out / "report.json");
  ASSERT_EQ(report["tensors"].size(), m.tensors.size());
  for (const auto& t : report["tensors"]) {
    if (!t["quantized"].get<bool>()) continue;
    EXPECT_GT(t["amax"].get<double>(), 0);
    EXPECT_LE(t["scale_inv_min"].get<double>(), t["scale_inv_max"].get<double>());
    EXPECT_EQ(t["frac_saturated"], 0.0);
    EXPECT_GT(t["frac_flushed"].get<double>(), 0.0) << "the fixture has values below E4M3's range";
    EXPECT_LT(t["rel_error"].get<double>(), 0.0625);
    EXPECT_GT(t["snr_db"].get<double>(), 24.0);
  }
  const std::string text = Slurp(out / "report.txt");
  EXPECT_THAT(text, HasSubstr("model.layers.0.mlp.down_proj.weight"));
  EXPECT_THAT(text, HasSubstr("SNR dB"));
  EXPECT_FALSE(fs::exists(out.string() + ".partial"));
  EXPECT_FALSE(fs::exists(out / ".fp8-calibrate"));
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();

  // Run again: the job is already complete; nothing is rewritten.
  const auto mtime = fs::last_write_time(out / m.shards[0]);
  ASSERT_EQ(Run(QuantizeSpec(m.dir, out.string())), 0) << ErrorMessage();
  EXPECT_EQ(EventsOfType("done")[0]["result"]["already_complete"], true);
  EXPECT_EQ(fs::last_write_time(out / m.shards[0]), mtime);
}

TEST_F(CalibrateTest, DequantizeGivesBf16OfOurOwnDequantization) {
  const FixtureModel m = testing::WriteFixtureModel((root_ / "in").string(), 2);
  const fs::path fp8_dir = root_ / "fp8", bf16_dir = root_ / "bf16";
  ASSERT_EQ(Run(QuantizeSpec(m.dir, fp8_dir.string())), 0) << ErrorMessage();
  ASSERT_EQ(Run({{"input", fp8_dir.string()}, {"output_dir", bf16_dir.string()}, {"direction", "dequantize"}}), 0)
      << ErrorMessage();
  EXPECT_EQ(EventsOfType("done")[0]["result"]["tensors_converted"], 6);

  const json config = ReadJson(bf16_dir / "config.json");
  EXPECT_FALSE(config.contains("quantization_config"));
  EXPECT_EQ(config["hidden_size"], 136);
  const json index = ReadJson(bf16_dir / "model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"].size(), m.tensors.size());

  const auto quantized = testing::DefaultQuantizedNames();
  for (const auto& [name, t] : m.tensors) {
    SCOPED_TRACE(name);
    auto fr = Reader::Open((fp8_dir / t.shard).string());
    auto br = Reader::Open((bf16_dir / t.shard).string());
    ASSERT_TRUE(fr.ok() && br.ok());
    EXPECT_EQ(br->Find(name + "_scale_inv"), nullptr);
    const auto* info = br->Find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->shape, t.shape);
    if (std::find(quantized.begin(), quantized.end(), name) == quantized.end()) {
      EXPECT_EQ(info->dtype, t.dtype);
      EXPECT_EQ(*br->Read(name), t.bytes);
      continue;
    }
    EXPECT_EQ(info->dtype, DType::BF16);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    auto q = fr->Read(name);
    const std::vector<float> scales = ReadScales(*fr, name + "_scale_inv");
    std::vector<float> x(static_cast<size_t>(rows * cols));
    ASSERT_TRUE(kernels::Dequantize128x128(q->data(), scales.data(), rows, cols, kernels::Fp8Format::kE4M3, x.data()).ok());
    auto got = br->Read(name);
    ASSERT_EQ(got->size(), x.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, got->data() + 2 * i, 2);
      ASSERT_EQ(h, kernels::FloatToBf16(x[i])) << "element " << i;
    }
  }
}

TEST_F(CalibrateTest, Ue8m0ScalesArePowersOfTwo) {
  const FixtureModel m = testing::WriteFixtureModel((root_ / "in").string(), 3);
  const fs::path out = root_ / "out";
  ASSERT_EQ(Run({{"input", m.dir}, {"output_dir", out.string()}, {"weights", {{"scale_format", "ue8m0"}}}}), 0)
      << ErrorMessage();
  EXPECT_EQ(ReadJson(out / "config.json")["quantization_config"]["scale_fmt"], "ue8m0");
  for (const auto& name : testing::DefaultQuantizedNames()) {
    const auto& t = m.tensors.at(name);
    auto r = Reader::Open((out / t.shard).string());
    ASSERT_TRUE(r.ok());
    CheckQuantized(t, *r, kernels::ScaleFormat::kUe8m0);
  }
}

TEST_F(CalibrateTest, ChannelAndTensorGranularityAndUserPatterns) {
  const std::string in = (root_ / "one.safetensors").string();
  std::vector<FixtureTensor> ts = {testing::RandomTensor("a.weight", DType::BF16, {70, 200}, 11),
                                   testing::RandomTensor("lm_head.weight", DType::F32, {30, 200}, 12),
                                   testing::RandomTensor("b.weight", DType::F16, {10, 20}, 13)};
  testing::WriteSingleShard(in, ts);
  for (const char* g : {"channel", "tensor"}) {
    SCOPED_TRACE(g);
    const fs::path out = root_ / (std::string("out_") + g);
    // An explicit include overrides the default lm_head exclusion; a user exclude does not.
    json spec = {{"input", in},
                 {"output_dir", out.string()},
                 {"weights", {{"granularity", g}, {"include", {"*lm_head*", "a.*"}}, {"exclude", {"a.*"}}}}};
    ASSERT_EQ(Run(spec), 0) << ErrorMessage();
    auto r = Reader::Open((out / "one.safetensors").string());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->Find("a.weight")->dtype, DType::BF16);
    EXPECT_EQ(r->Find("b.weight")->dtype, DType::F16);
    ASSERT_EQ(r->Find("lm_head.weight")->dtype, DType::F8_E4M3);
    // Per channel and per tensor: compressed-tensors' weight_scale (output_format auto).
    EXPECT_EQ(r->Find("lm_head.weight_scale_inv"), nullptr);
    const auto* s = r->Find("lm_head.weight_scale");
    ASSERT_NE(s, nullptr);
    const std::vector<float> x = ts[1].Values();
    const std::vector<float> scales = ReadScales(*r, s->name);
    const bool channel = std::string(g) == "channel";
    EXPECT_EQ(s->shape, channel ? std::vector<int64_t>({30, 1}) : std::vector<int64_t>({1}));
    auto q = r->Read("lm_head.weight");
    for (int64_t i = 0; i < 30; ++i) {
      float amax = 0;
      for (int64_t j = 0; j < 200; ++j) amax = std::max(amax, std::fabs(x[i * 200 + j]));
      if (channel) {
        EXPECT_EQ(scales[i], kernels::ScaleInvFromAmax(amax, kernels::Fp8Format::kE4M3, kernels::ScaleFormat::kFp32));
      }
      for (int64_t j = 0; j < 200; ++j) {
        const float sc = channel ? scales[i] : scales[0];
        const float xhat = kernels::Fp8ToFloat((*q)[i * 200 + j], kernels::Fp8Format::kE4M3) * sc;
        ASSERT_LE(std::fabs(x[i * 200 + j] - xhat), E4M3Bound(x[i * 200 + j], sc)) << i << "," << j;
      }
    }
    const json qc = ReadJson(out / "config.json")["quantization_config"];
    EXPECT_EQ(qc["quant_method"], "compressed-tensors");
    EXPECT_EQ(qc["config_groups"]["group_0"]["weights"]["strategy"], g);
    EXPECT_FALSE(qc["config_groups"]["group_0"]["weights"].contains("block_structure"));
    EXPECT_EQ(qc["ignore"], json::array({"a", "b"}));  // lm_head is quantized here
  }
  // Round trip back through dequantize for per-channel scales.
  ASSERT_EQ(Run({{"input", (root_ / "out_channel").string()}, {"output_dir", (root_ / "back").string()},
                 {"direction", "dequantize"}}),
            0)
      << ErrorMessage();
  auto r = Reader::Open((root_ / "back" / "one.safetensors").string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Find("lm_head.weight")->dtype, DType::BF16);
  EXPECT_EQ(r->Find("lm_head.weight_scale"), nullptr);
}

// compressed-tensors' ignore list holds the linears left in BF16 (the router, the untied head),
// never an embedding: vLLM answers every ignored layer with UnquantizedLinearMethod.
TEST_F(CalibrateTest, CompressedTensorsIgnoresLinearsNotEmbeddings) {
  const FixtureModel m = testing::WriteFixtureModel((root_ / "in").string(), 1);
  const fs::path out = root_ / "out";
  json spec = QuantizeSpec(m.dir, out.string());
  spec["output_format"] = "compressed-tensors";
  ASSERT_EQ(Run(spec), 0) << ErrorMessage();
  const json qc = ReadJson(out / "config.json")["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["ignore"], json::array({"lm_head", "model.layers.1.mlp.gate"}));
  const json& group = qc["config_groups"]["group_0"];
  EXPECT_EQ(group["weights"]["block_structure"], json::array({128, 128}));
  EXPECT_EQ(group["input_activations"]["strategy"], "group");  // compressed-tensors' FP8_BLOCK preset
  EXPECT_EQ(EventsOfType("done")[0]["result"]["output_format"], "compressed-tensors");
  for (const auto& name : testing::DefaultQuantizedNames()) {
    const auto& t = m.tensors.at(name);
    auto r = Reader::Open((out / t.shard).string());
    ASSERT_TRUE(r.ok());
    ASSERT_NE(r->Find(name + "_scale"), nullptr) << name;
    EXPECT_EQ(r->Find(name + "_scale_inv"), nullptr) << name;
  }
}

TEST_F(CalibrateTest, RestartSkipsFinishedShards) {
  const FixtureModel m = testing::WriteFixtureModel((root_ / "in").string(), 4);
  const fs::path out = root_ / "out";
  const fs::path staging = out.string() + ".partial";
  const json spec = QuantizeSpec(m.dir, out.string());

  // Interrupted after one shard: exit 75 (retryable), no output dir, the shard kept in staging.
  ASSERT_EQ(Run(spec, {"--max-shards", "1"}), 75) << ErrorMessage();
  EXPECT_EQ(EventsOfType("error")[0]["class"], "INTERNAL_ERROR");
  EXPECT_FALSE(fs::exists(out));
  ASSERT_TRUE(fs::exists(staging / m.shards[0]));
  EXPECT_FALSE(fs::exists(staging / m.shards[1]));
  struct stat before {};
  ASSERT_EQ(::stat((staging / m.shards[0]).c_str(), &before), 0);

  ASSERT_EQ(Run(spec), 0) << ErrorMessage();
  auto done = EventsOfType("done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]["result"]["shards_skipped"], 1);
  auto progress = EventsOfType("progress");
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress[0]["skipped"], true);
  EXPECT_EQ(progress[0]["shard"], m.shards[0]);
  EXPECT_EQ(progress.back()["step"], m.tensors.size());

  // The finished shard was not rewritten (same inode, same mtime) and the result matches a
  // run that was never interrupted.
  struct stat after {};
  ASSERT_EQ(::stat((out / m.shards[0]).c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  const fs::path fresh = root_ / "fresh";
  ASSERT_EQ(Run(QuantizeSpec(m.dir, fresh.string())), 0);
  for (const auto& shard : m.shards) EXPECT_EQ(Slurp(out / shard), Slurp(fresh / shard)) << shard;
  EXPECT_EQ(Slurp(out / "model.safetensors.index.json"), Slurp(fresh / "model.safetensors.index.json"));
  EXPECT_EQ(ReadJson(out / "report.json")["tensors"], ReadJson(fresh / "report.json")["tensors"]);

  // A changed spec does not reuse a stale staging dir.
  ASSERT_EQ(Run(QuantizeSpec(m.dir, (root_ / "other").string()), {"--max-shards", "1"}), 75);
  ASSERT_EQ(Run({{"input", m.dir}, {"output_dir", (root_ / "other").string()}, {"weights", {{"scale_format", "ue8m0"}}}}), 0);
  EXPECT_EQ(EventsOfType("done")[0]["result"]["shards_skipped"], 0);
}

TEST_F(CalibrateTest, StopRequestEndsAtTensorBoundaryAndRestartFinishes) {
  const FixtureModel m = testing::WriteFixtureModel((root_ / "in").string(), 6);
  const fs::path out = root_ / "out";
  // As after SIGTERM: the job stops before its next tensor, exits 75 (retryable), emits
  // `error`, and leaves no output directory; the restart then completes.
  worker::StopRequested().store(true);
  const int rc = Run(QuantizeSpec(m.dir, out.string()));
  worker::StopRequested().store(false);
  EXPECT_EQ(rc, 75);
  EXPECT_THAT(ErrorMessage(), HasSubstr("stopped on request"));
  EXPECT_TRUE(EventsOfType("done").empty());
  EXPECT_FALSE(fs::exists(out));
  ASSERT_EQ(Run(QuantizeSpec(m.dir, out.string())), 0) << ErrorMessage();
  EXPECT_TRUE(fs::exists(out / "report.json"));
}

TEST_F(CalibrateTest, BadInputExits65NamingFileAndProblem) {
  const std::string out = (root_ / "out").string();
  auto t = testing::RandomTensor("x.weight", DType::BF16, {130, 140}, 5);

  // Not safetensors.
  const std::string text = (root_ / "text.safetensors").string();
  std::ofstream(text) << "this is plainly not a safetensors file, just some text";
  ExpectDataError(QuantizeSpec(text, out), "not a safetensors file", text);

  // Truncated.
  const std::string good = (root_ / "good.safetensors").string();
  testing::WriteSingleShard(good, {t});
  const std::string cut = (root_ / "cut.safetensors").string();
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(cut) - 100);
  ExpectDataError(QuantizeSpec(cut, out), "exceed the data section", cut);

  // Overlapping and out-of-range offsets, written by hand.
  auto raw = [&](const std::string& name, const std::string& header, size_t data) {
    const std::string p = (root_ / name).string();
    std::ofstream f(p, std::ios::binary);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << std::string(data, '\0');
    return p;
  };
  const std::string overlap = raw("overlap.safetensors",
                                  R"({"a.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                                  R"("b.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[4,12]}})",
                                  12);
  ExpectDataError(QuantizeSpec(overlap, out), "overlap", overlap);
  const std::string beyond = raw("beyond.safetensors",
                                 R"({"a.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", 4);
  ExpectDataError(QuantizeSpec(beyond, out), "exceed", beyond);

  // Unsupported dtype of a tensor the patterns select.
  const std::string ints = (root_ / "ints.safetensors").string();
  FixtureTensor it{"y.weight", DType::I32, {4, 4}, std::vector<uint8_t>(64, 1), ""};
  testing::WriteSingleShard(ints, {t, it});
  ExpectDataError(QuantizeSpec(ints, out), "unsupported dtype I32", ints);

  // A pattern that matches nothing.
  ExpectDataError({{"input", good}, {"output_dir", out}, {"weights", {{"include", {"*.nothing"}}}}},
                  "pattern \"*.nothing\" matches no tensor", good);
  ExpectDataError({{"input", good}, {"output_dir", out}, {"weights", {{"exclude", {"*.nothing"}}}}},
                  "pattern \"*.nothing\" matches no tensor", good);

  // Index entries that escape the model directory, and a path-like tensor name.
  for (const std::string shard : {"../evil.safetensors", "/tmp/abs.safetensors"}) {
    const fs::path dir = root_ / "escape";
    fs::remove_all(dir);
    fs::create_directories(dir);
    testing::WriteSingleShard((dir / "model.safetensors").string(), {t});
    std::ofstream(dir / "model.safetensors.index.json") << json({{"weight_map", {{"x.weight", shard}}}}).dump();
    ExpectDataError(QuantizeSpec(dir.string(), out), "escape the model directory",
                    (dir / "model.safetensors.index.json").string());
  }
  const std::string evil = (root_ / "evilname.safetensors").string();
  FixtureTensor e = t;
  e.name = "../../etc/x.weight";
  testing::WriteSingleShard(evil, {e});
  ExpectDataError(QuantizeSpec(evil, out), "escaping its directory", evil);

  // Index that disagrees with its shards.
  const fs::path dir = root_ / "liar";
  fs::create_directories(dir);
  testing::WriteSingleShard((dir / "model.safetensors").string(), {t});
  std::ofstream(dir / "model.safetensors.index.json")
      << json({{"weight_map", {{"x.weight", "model.safetensors"}, {"ghost.weight", "model.safetensors"}}}}).dump();
  ExpectDataError(QuantizeSpec(dir.string(), out), "\"ghost.weight\" is not in shard", "index.json");

  // NaN in a weight.
  auto nan_t = t;
  const uint16_t nan_bf16 = 0x7FC0;
  std::memcpy(nan_t.bytes.data() + 2 * 1000, &nan_bf16, 2);
  const std::string nan_file = (root_ / "nan.safetensors").string();
  testing::WriteSingleShard(nan_file, {nan_t});
  ExpectDataError(QuantizeSpec(nan_file, out), "NaN or Inf", nan_file);

  // Dequantize of a model without FP8 tensors; FP8 tensor without its scale.
  ExpectDataError({{"input", good}, {"output_dir", out}, {"direction", "dequantize"}}, "no FP8 tensor", good);
  FixtureTensor f8{"z.weight", DType::F8_E4M3, {2, 2}, std::vector<uint8_t>(4, 0x38), ""};
  const std::string lone = (root_ / "lone.safetensors").string();
  testing::WriteSingleShard(lone, {f8});
  ExpectDataError({{"input", lone}, {"output_dir", out}, {"direction", "dequantize"}}, "has no \"z.weight_scale_inv\"",
                  lone);
}

TEST_F(CalibrateTest, BadSpecExits64NamingTheField) {
  const std::string good = (root_ / "good.safetensors").string();
  testing::WriteSingleShard(good, {testing::RandomTensor("x.weight", DType::BF16, {4, 4}, 5)});
  const std::string out = (root_ / "out").string();
  struct Case {
    json spec;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"input", good}, {"output_dir", out}, {"weights", {{"granularty", "block"}}}}, "weights.granularty"},
      {{{"input", good}, {"output_dir", out}, {"weights", {{"granularity", "row"}}}}, "weights.granularity"},
      {{{"input", good}, {"output_dir", out}, {"weights", {{"fmt", "e5m2"}}}}, "weights.fmt"},
      {{{"input", good}, {"output_dir", out}, {"weights", {{"scale_format", "e8"}}}}, "weights.scale_format"},
      {{{"input", good}, {"output_dir", out}, {"weights", {{"include", "*.weight"}}}}, "weights.include"},
      {{{"input", good}, {"output_dir", out}, {"activations", {{"method", "avg"}}}}, "activations.method"},
      {{{"input", good}, {"output_dir", out}, {"activations", {{"percentile", 120}}}}, "activations.percentile"},
      {{{"input", good}, {"output_dir", out}, {"activations", {{"data", "/data/*.bin"}}}, {"direction", "dequantize"}},
       "activations.data"},
      {{{"input", good}, {"output_dir", out}, {"direction", "sideways"}}, "direction"},
      {{{"input", good}, {"output_dir", out}, {"backend", "tpu"}}, "backend"},
      {{{"input", good}, {"output_dir", out}, {"output_format", "gguf"}}, "output_format"},
      {{{"input", good}, {"output_dir", out}, {"output_format", "deepseek"}, {"weights", {{"granularity", "tensor"}}}},
       "output_format"},
      {{{"input", good}, {"output_dir", out}, {"bogus", 1}}, "bogus"},
      {{{"output_dir", out}}, "input"},
      {{{"input", good}}, "output_dir"},
      {{{"input", (root_ / "missing").string()}, {"output_dir", out}}, "input"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec.dump());
    EXPECT_EQ(Run(c.spec), 64);
    auto errs = EventsOfType("error");
    ASSERT_EQ(errs.size(), 1u);
    EXPECT_EQ(errs[0]["class"], "INVALID_SPEC");
    EXPECT_THAT(ErrorMessage(), HasSubstr(c.field + ": "));
    EXPECT_FALSE(fs::exists(out));
  }
  // An occupied output_dir is refused, and left alone.
  fs::create_directories(out);
  std::ofstream(fs::path(out) / "keep.txt") << "mine";
  EXPECT_EQ(Run(QuantizeSpec(good, out)), 64);
  EXPECT_THAT(ErrorMessage(), HasSubstr("output_dir"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "keep.txt"));
  // Command-line errors.
  std::vector<std::string> args = {"--frobnicate"};
  std::vector<char*> argv = {args[0].data()};
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(CalibrateMain(1, argv.data()), 64);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("unknown argument"));
}

TEST_F(CalibrateTest, YamlSpecAndEmptyOutputDir) {
  const std::string good = (root_ / "good.safetensors").string();
  testing::WriteSingleShard(good, {testing::RandomTensor("x.weight", DType::BF16, {4, 4}, 5)});
  const fs::path out = root_ / "out";
  fs::create_directories(out);  // an empty directory made by the caller is fine
  const fs::path spec = root_ / "spec.yaml";
  std::ofstream(spec) << "input: " << good << "\noutput_dir: " << out.string()
                      << "\nweights:\n  granularity: block\n  scale_format: ue8m0\n  include: ['x.*']\n";
  ASSERT_EQ(RunWithSpecFile(spec.string()), 0) << ErrorMessage();
  EXPECT_EQ(ReadJson(out / "config.json")["quantization_config"]["scale_fmt"], "ue8m0");
  auto r = Reader::Open((out / "good.safetensors").string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Find("x.weight")->dtype, DType::F8_E4M3);
}

}  // namespace
}  // namespace fp8::calibrate
