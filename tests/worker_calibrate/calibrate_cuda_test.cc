// SPDX-License-Identifier: Apache-2.0
// The calibration job's CUDA backend against its CPU backend: the same model quantized with
// `backend: cuda` and `backend: cpu` gives byte-identical shards (FP8 bytes and scales) and
// index, and the dequantized BF16 output is byte-identical too; the statistics agree closely.
// The model has shapes that are not multiples of 128, rows whose length is not a multiple of
// 16 (padded on the device), F32 and BF16 inputs on the GPU and an F16 one that stays on the
// CPU. The converter is also run directly with a tiny chunk size, so the two-slot pipeline
// goes through many chunks. Skips (GTEST_SKIP) without an sm_90 device.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/worker_calibrate/model_fixture.h"
#include "worker/calibrate/calibrate.h"
#include "worker/calibrate/cuda_weight_converter.h"
#include "worker/calibrate/spec.h"
#include "worker/calibrate/tensor_convert.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using safetensors::DType;
using testing::FixtureTensor;
using testing::Slurp;

class CalibrateCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device of compute capability 9.0";
    root_ = fs::temp_directory_path() / ("calib_cuda_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!root_.empty() && !HasFailure()) fs::remove_all(root_);
  }

  // Two shards of linear weights (the default patterns select every 2-D *.weight here except
  // the embedding) plus tensors that are copied.
  fs::path WriteModel() {
    const fs::path dir = root_ / "model";
    fs::create_directories(dir);
    const std::vector<std::vector<FixtureTensor>> shards = {
        {testing::RandomTensor("model.embed_tokens.weight", DType::BF16, {300, 208}, 1),
         testing::RandomTensor("model.layers.0.self_attn.q_proj.weight", DType::BF16, {300, 208}, 2),
         testing::RandomTensor("model.layers.0.self_attn.o_proj.weight", DType::F32, {136, 400}, 3),
         testing::RandomTensor("model.layers.0.mlp.up_proj.weight", DType::BF16, {1100, 1040}, 4, 3.0f),
         testing::RandomTensor("model.layers.0.input_layernorm.weight", DType::BF16, {208}, 5)},
        {testing::RandomTensor("model.layers.0.mlp.down_proj.weight", DType::BF16, {129, 257}, 6),
         testing::RandomTensor("model.layers.0.mlp.gate_proj.weight", DType::F16, {136, 160}, 7),
         testing::RandomTensor("model.layers.1.self_attn.k_proj.weight", DType::F32, {1, 50}, 8),
         testing::RandomTensor("model.layers.1.self_attn.v_proj.weight", DType::BF16, {2, 4112}, 9, 1e-3f)},
    };
    json weight_map = json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
      testing::WriteSingleShard((dir / name).string(), shards[s]);
      for (const auto& t : shards[s]) weight_map[t.name] = name;
    }
    std::ofstream(dir / "model.safetensors.index.json") << json({{"weight_map", weight_map}}).dump();
    std::ofstream(dir / "config.json") << json({{"hidden_size", 208}}).dump();
    return dir;
  }

  json Run(const json& spec) {
    auto opts = ParseCalibrateSpec(spec);
    EXPECT_TRUE(opts.ok()) << opts.status().message();
    auto summary = RunCalibration(*opts, RunControls{});
    EXPECT_TRUE(summary.ok()) << summary.status().message();
    return summary.ok() ? *summary : json();
  }

  // Every .safetensors file and the index are identical in the two outputs.
  void ExpectSameShards(const fs::path& a, const fs::path& b) {
    int compared = 0;
    for (const auto& e : fs::directory_iterator(a)) {
      const std::string name = e.path().filename().string();
      if (!name.ends_with(".safetensors") && name != "model.safetensors.index.json") continue;
      ASSERT_TRUE(fs::exists(b / name)) << name;
      EXPECT_TRUE(Slurp(e.path()) == Slurp(b / name)) << name << " differs between " << a << " and " << b;
      ++compared;
    }
    EXPECT_EQ(compared, 3);
  }

  fs::path root_;
};

TEST_F(CalibrateCudaTest, QuantizeAndDequantizeMatchTheCpuByteForByte) {
  const fs::path model = WriteModel();
  for (const char* sf : {"fp32", "ue8m0"}) {
    SCOPED_TRACE(sf);
    const fs::path cpu = root_ / (std::string("cpu_") + sf), gpu = root_ / (std::string("cuda_") + sf);
    const json weights = {{"scale_format", sf}};
    const json s_cpu = Run({{"input", model.string()}, {"output_dir", cpu.string()}, {"weights", weights}, {"backend", "cpu"}});
    const json s_gpu = Run({{"input", model.string()}, {"output_dir", gpu.string()}, {"weights", weights}, {"backend", "cuda"}});
    EXPECT_EQ(s_cpu["backend"], "cpu");
    EXPECT_EQ(s_gpu["backend"], "cuda");
    EXPECT_EQ(s_gpu["tensors_converted"], 7);
    ExpectSameShards(cpu, gpu);

    // The statistics are computed on the GPU (double sums) and the CPU (float partial sums):
    // counts equal, sums within rounding.
    const json r_cpu = json::parse(Slurp(cpu / kReportJson)), r_gpu = json::parse(Slurp(gpu / kReportJson));
    ASSERT_EQ(r_cpu["tensors"].size(), r_gpu["tensors"].size());
    for (size_t i = 0; i < r_cpu["tensors"].size(); ++i) {
      const json &c = r_cpu["tensors"][i], &g = r_gpu["tensors"][i];
      SCOPED_TRACE(c["name"].get<std::string>());
      ASSERT_EQ(c["quantized"], g["quantized"]);
      if (!c["quantized"].get<bool>()) continue;
      EXPECT_EQ(c["amax"], g["amax"]);
      EXPECT_EQ(c["scale_inv_min"], g["scale_inv_min"]);
      EXPECT_EQ(c["scale_inv_max"], g["scale_inv_max"]);
      EXPECT_EQ(c["frac_saturated"], g["frac_saturated"]);
      EXPECT_EQ(c["frac_flushed"], g["frac_flushed"]);
      EXPECT_NEAR(c["rel_error"].get<double>(), g["rel_error"].get<double>(), 1e-4 * c["rel_error"].get<double>());
    }

    const fs::path back_cpu = root_ / (std::string("back_cpu_") + sf), back_gpu = root_ / (std::string("back_cuda_") + sf);
    Run({{"input", cpu.string()}, {"output_dir", back_cpu.string()}, {"direction", "dequantize"}, {"backend", "cpu"}});
    const json d = Run({{"input", cpu.string()}, {"output_dir", back_gpu.string()}, {"direction", "dequantize"}, {"backend", "cuda"}});
    EXPECT_EQ(d["backend"], "cuda");
    ExpectSameShards(back_cpu, back_gpu);
  }
}

// Many chunks through both pipeline slots (chunk = one 128-row band), on one writer each.
TEST_F(CalibrateCudaTest, SmallChunksGiveTheSameBytes) {
  const FixtureTensor w = testing::RandomTensor("layers.0.mlp.up_proj.weight", DType::BF16, {1000, 336}, 11);
  const fs::path in = root_ / "in.safetensors";
  testing::WriteSingleShard(in.string(), {w});
  auto reader = safetensors::Reader::Open(in.string());
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  const safetensors::TensorInfo& info = reader->tensors()[0];
  WeightOptions opts;
  const std::vector<int64_t> scale_shape = ScaleShape(opts.granularity, 1000, 336);

  std::string bytes[2];
  const auto cuda = MakeCudaWeightConverter(/*chunk_bytes=*/1);
  const auto cpu = MakeCpuWeightConverter();
  WeightConverter* converters[2] = {cpu.get(), cuda.get()};
  for (int i = 0; i < 2; ++i) {
    const fs::path out = root_ / ("out" + std::to_string(i) + ".safetensors");
    auto writer = safetensors::Writer::Create(out.string(), {{info.name, DType::F8_E4M3, info.shape},
                                                             {"scale", DType::F32, scale_shape}});
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    auto rep = converters[i]->Quantize(*reader, info, opts, "scale", *writer);
    ASSERT_TRUE(rep.ok()) << rep.status().message();
    ASSERT_TRUE(writer->Commit().ok());
    bytes[i] = Slurp(out);
  }
  EXPECT_TRUE(bytes[0] == bytes[1]);
}

}  // namespace
}  // namespace fp8::calibrate
