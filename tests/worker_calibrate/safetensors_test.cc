// SPDX-License-Identifier: Apache-2.0
// worker/safetensors: round trips, layout compatible with the reference implementation, and
// every kind of damaged file refused with a message naming the file and the problem.
#include "worker/safetensors/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fp8::safetensors {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("st_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A raw file: 8-byte length, header text, data bytes.
  std::string WriteRaw(const std::string& name, const std::string& header, size_t data_bytes,
                       std::optional<uint64_t> claimed_len = std::nullopt) {
    std::string p = Path(name);
    std::ofstream f(p, std::ios::binary);
    uint64_t n = claimed_len.value_or(header.size());
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
    f << header;
    f << std::string(data_bytes, '\x01');
    return p;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, DTypeNamesRoundTrip) {
  for (DType d : {DType::BOOL, DType::U8, DType::I8, DType::I16, DType::U16, DType::F16,
                  DType::BF16, DType::I32, DType::U32, DType::F32, DType::F64, DType::I64,
                  DType::U64, DType::F8_E4M3, DType::F8_E5M2}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
    EXPECT_GT(DTypeSize(d), 0u);
  }
  EXPECT_EQ(DTypeSize(DType::BF16), 2u);
  EXPECT_EQ(DTypeSize(DType::F8_E4M3), 1u);
  EXPECT_FALSE(ParseDType("F4").ok());
}

TEST_F(SafetensorsTest, WriteThenReadRoundTrip) {
  std::vector<float> a = {1.f, -2.f, 3.5f, 0.f, 5.f, 6.f};
  std::vector<uint8_t> b = {1, 2, 3};
  std::vector<uint16_t> c = {0x3f80, 0x4000};
  std::vector<TensorData> ts = {
      {"z.bias", DType::F8_E4M3, {3}, b.data(), b.size()},
      {"a.weight", DType::F32, {2, 3}, a.data(), a.size() * 4},
      {"m.scale", DType::BF16, {2}, c.data(), c.size() * 2},
      {"empty", DType::F32, {0, 4}, nullptr, 0},
  };
  std::string p = Path("m.safetensors");
  ASSERT_TRUE(WriteFile(p, ts, {{"format", "pt"}}).ok());
  EXPECT_FALSE(fs::exists(p + ".tmp-" + std::to_string(::getpid())));

  auto r = Reader::Open(p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data_offset() % 8, 0u);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  ASSERT_EQ(r->tensors().size(), 4u);
  // Data order: 4-byte dtypes, then 2-byte, then 1-byte; ties by name.
  EXPECT_EQ(r->tensors()[0].name, "a.weight");
  EXPECT_EQ(r->tensors()[1].name, "empty");
  EXPECT_EQ(r->tensors()[2].name, "m.scale");
  EXPECT_EQ(r->tensors()[3].name, "z.bias");
  for (const auto& t : r->tensors()) EXPECT_EQ(t.begin % DTypeSize(t.dtype), 0u) << t.name;

  auto got = r->Read("a.weight");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), a.size() * 4);
  EXPECT_EQ(std::memcmp(got->data(), a.data(), got->size()), 0);
  const TensorInfo* zb = r->Find("z.bias");
  ASSERT_NE(zb, nullptr);
  EXPECT_EQ(zb->dtype, DType::F8_E4M3);
  EXPECT_EQ(zb->shape, std::vector<int64_t>{3});
  uint8_t mid = 0;
  ASSERT_TRUE(r->ReadRange("z.bias", 1, &mid, 1).ok());
  EXPECT_EQ(mid, 2);
  EXPECT_FALSE(r->ReadRange("z.bias", 2, &mid, 2).ok());
  EXPECT_EQ(r->Find("nope"), nullptr);
  EXPECT_EQ(r->Read("nope").status().code(), StatusCode::kNotFound);

  // The header is what the reference writes: __metadata__ first, data_offsets in order.
  std::ifstream f(p, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"a.weight\":", 0), 0u) << header;
}

TEST_F(SafetensorsTest, StreamingWriterWritesSlicesAndCopies) {
  std::vector<float> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f;
  std::string in = Path("in.safetensors");
  ASSERT_TRUE(WriteFile(in, {{"x", DType::F32, {10, 100}, src.data(), src.size() * 4}}).ok());
  auto r = Reader::Open(in);
  ASSERT_TRUE(r.ok());

  std::string out = Path("out.safetensors");
  {
    auto w = Writer::Create(out, {{"copy", DType::F32, {10, 100}}, {"sliced", DType::F32, {1000}}});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(w->CopyFrom(*r, "x", "copy").ok());
    // Slices in reverse order.
    ASSERT_TRUE(w->WriteAt("sliced", 2000, src.data() + 500, 2000).ok());
    // Missing half: Commit refuses.
    Status st = w->Commit();
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(st.message(), HasSubstr("sliced"));
    ASSERT_TRUE(w->WriteAt("sliced", 0, src.data(), 2000).ok());
    EXPECT_FALSE(fs::exists(out)) << "visible before Commit";
    ASSERT_TRUE(w->Commit().ok());
  }
  auto r2 = Reader::Open(out);
  ASSERT_TRUE(r2.ok());
  for (const char* name : {"copy", "sliced"}) {
    auto got = r2->Read(name);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(std::memcmp(got->data(), src.data(), 4000), 0) << name;
  }
}

TEST_F(SafetensorsTest, AbandonedWriterLeavesNothing) {
  std::string out = Path("abandoned.safetensors");
  {
    auto w = Writer::Create(out, {{"t", DType::U8, {4}}});
    ASSERT_TRUE(w.ok());
    uint8_t b[2] = {1, 2};
    ASSERT_TRUE(w->WriteAt("t", 0, b, 2).ok());
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsTest, WriterRejectsDuplicatesAndWrongSizes) {
  EXPECT_FALSE(Writer::Create(Path("d"), {{"t", DType::U8, {1}}, {"t", DType::U8, {1}}}).ok());
  uint8_t b[3] = {};
  Status st = WriteFile(Path("w"), {{"t", DType::U8, {4}, b, 3}});
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(fs::exists(Path("w")));
}

// Each damaged file: the status code, and a message naming the file and the problem.
struct BadCase {
  const char* name;
  std::string header;
  size_t data_bytes;
  std::optional<uint64_t> claimed_len;
  StatusCode code;
  const char* message;
};

TEST_F(SafetensorsTest, RejectsDamagedFiles) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<BadCase> cases = {
      {"absurd_len", "{}", 0, 1ull << 40, StatusCode::kInvalidArgument, "header length"},
      {"header_past_end", "{" + ok_entry + "}", 8, 4096, StatusCode::kDataLoss, "truncated"},
      {"not_json", "{\"t\": nope}", 0, std::nullopt, StatusCode::kInvalidArgument, "malformed JSON"},
      {"not_brace", "[1,2]", 0, std::nullopt, StatusCode::kInvalidArgument, "does not start with '{'"},
      {"bad_dtype", R"({"t":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1, std::nullopt,
       StatusCode::kInvalidArgument, "unknown safetensors dtype \"F4\""},
      {"size_mismatch", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, std::nullopt,
       StatusCode::kInvalidArgument, "shape"},
      {"truncated_data", "{" + ok_entry + "}", 5, std::nullopt, StatusCode::kDataLoss, "exceed the data section"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, std::nullopt, StatusCode::kInvalidArgument, "overlap"},
      {"gap",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, std::nullopt, StatusCode::kInvalidArgument, "gap"},
      {"trailing", "{" + ok_entry + "}", 12, std::nullopt, StatusCode::kInvalidArgument, "trailing"},
      {"reversed", R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4, std::nullopt,
       StatusCode::kInvalidArgument, "end before"},
      {"negative_dim", R"({"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0, std::nullopt,
       StatusCode::kInvalidArgument, "non-negative"},
      {"bad_metadata", R"({"__metadata__":{"k":1}})", 0, std::nullopt, StatusCode::kInvalidArgument,
       "__metadata__"},
  };
  for (const auto& c : cases) {
    std::string p = WriteRaw(std::string(c.name) + ".safetensors", c.header, c.data_bytes, c.claimed_len);
    auto r = Reader::Open(p);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(p)) << c.name;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.name;
  }
}

TEST_F(SafetensorsTest, RejectsTinyAndMissingAndTextFiles) {
  std::string tiny = Path("tiny");
  std::ofstream(tiny) << "abc";
  auto r = Reader::Open(tiny);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("shorter than"));

  EXPECT_EQ(Reader::Open(Path("missing")).status().code(), StatusCode::kNotFound);

  std::string text = Path("readme.md");
  std::ofstream(text) << "# This is a markdown file, not a tensor file\n";
  r = Reader::Open(text);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not a safetensors file"));

  EXPECT_THAT(Reader::Open(dir_.string()).status().message(), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, AtomicTextWrite) {
  std::string p = Path("config.json");
  ASSERT_TRUE(WriteFileAtomically(p, "{\"a\":1}").ok());
  ASSERT_TRUE(WriteFileAtomically(p, "{\"a\":2}").ok());
  std::ifstream f(p);
  std::string s((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(s, "{\"a\":2}");
}

}  // namespace
}  // namespace fp8::safetensors
