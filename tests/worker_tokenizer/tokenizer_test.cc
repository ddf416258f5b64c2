// SPDX-License-Identifier: Apache-2.0
// prepare-data's tokenizer path: UTF-8 handling, BPE merging rules, what tokenizer.json forms
// are refused (naming the field, exit 65, no shard written), the uint32 shards and the tokenizer
// files recorded beside them (tokenizer_files.h; their way into exports is
// tests/worker_llama/tokenizer_export_test.py's). The ids against the Hugging Face library
// itself are compare_hf.mjs's.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/common/events.h"
#include "worker/data/pre_tokenizer.h"
#include "worker/data/prepare_data_main.h"
#include "worker/data/shards.h"
#include "worker/data/tokenizer.h"
#include "worker/data/tokenizer_files.h"
#include "worker/data/utf8.h"

namespace fp8::data {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "fp8-tokenizer-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

// A byte-level BPE: the 256 byte characters (ids in byte order), then `extra` tokens, then
// `merges`; the GPT-2 ByteLevel pre-tokenizer.
json ByteLevelBpe(const std::vector<std::string>& extra, const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode()[b]] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}}}};
}

std::string Write(const json& j, const std::string& dir, const std::string& name = "tokenizer.json") {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << j.dump();
  return path;
}

std::vector<uint32_t> Encode(const json& j, const std::string& text) {
  auto t = BpeTokenizer::Load(Write(j, TempDir()));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  std::vector<uint32_t> ids;
  if (t.ok()) (*t)->Encode(text, &ids);
  return ids;
}

std::string LoadError(const json& j) {
  auto t = BpeTokenizer::Load(Write(j, TempDir()));
  return t.ok() ? "loaded" : t.status().message();
}

TEST(Utf8, IllFormedSequencesBecomeOneReplacementPerMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8("héllo 👍"), "héllo 👍");
  EXPECT_EQ(SanitizeUtf8("a\x80z"), "a" + r + "z");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82z"), r + "z");                   // truncated: one
  EXPECT_EQ(SanitizeUtf8("\xE0\x80\x41"), r + r + "A");            // overlong: lead, then the byte
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), r + r + r);              // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), r + r + r + r);      // past U+10FFFF
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"), r);                      // truncated at the end
}

TEST(Utf8, ByteToUnicodeIsGpt2s) {
  EXPECT_EQ(ByteToUnicode()[' '], "Ġ");
  EXPECT_EQ(ByteToUnicode()['\n'], "Ċ");
  EXPECT_EQ(ByteToUnicode()['A'], "A");
  EXPECT_EQ(ByteToUnicode()[0xFF], "ÿ");
}

TEST(Bpe, MergesApplyLowestRankFirstAndIgnoreMergesEmitsAVocabularyWordWhole) {
  json j = ByteLevelBpe({"ab", "bc", "abc"}, {"b c", "a b"});
  EXPECT_EQ(Encode(j, "abc"), (std::vector<uint32_t>{'a', 257}));  // "b c" ranks first
  j["model"]["merges"] = {"a b", "b c", "ab c"};
  EXPECT_EQ(Encode(j, "abc"), (std::vector<uint32_t>{258}));
  j["model"]["merges"] = json::array({json::array({"a", "b"})});  // the pair form
  EXPECT_EQ(Encode(j, "abc"), (std::vector<uint32_t>{256, 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Encode(j, "abc"), (std::vector<uint32_t>{258}));
}

TEST(Bpe, AddedTokensSplitOutLongestFirstAndPrefixSpaceIsPerSegment) {
  json j = ByteLevelBpe({}, {});
  j["added_tokens"] = {{{"id", 256}, {"content", "<|a|>"}, {"special", true}, {"normalized", false}},
                       {{"id", 257}, {"content", "<|a|>x"}, {"special", true}, {"normalized", false}}};
  EXPECT_EQ(Encode(j, "q<|a|>xy<|a|>"), (std::vector<uint32_t>{'q', 257, 'y', 256}));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(Encode(j, "q<|a|>y"), (std::vector<uint32_t>{' ', 'q', 256, ' ', 'y'}));
}

TEST(Bpe, AByteMissingFromTheVocabularyIsDroppedOrUnk) {
  json j = ByteLevelBpe({}, {});
  j["model"]["vocab"].erase(ByteToUnicode()['b']);
  j["model"]["vocab"]["<unk>"] = 300;
  EXPECT_EQ(Encode(j, "abba"), (std::vector<uint32_t>{'a', 'a'}));
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(Encode(j, "abba"), (std::vector<uint32_t>{'a', 300, 300, 'a'}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(Encode(j, "abba"), (std::vector<uint32_t>{'a', 300, 'a'}));
}

TEST(PreTokenizer, TheLookaheadAlternativeLeavesTheLastSpaceToTheNextWord) {
  auto re = SplitRegex::Compile(kGpt2SplitPattern, "p");
  ASSERT_TRUE(re.ok()) << re.status().ToString();
  std::vector<std::string_view> pieces;
  (*re)->Split("a   b \u3000c  ", &pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"a", "  ", " b", " ", "\u3000", "c", "  "}));
}

TEST(LoadErrors, NameTheFileAndTheField) {
  json j = ByteLevelBpe({"ab"}, {"a b"});
  for (const char* type : {"WordPiece", "Unigram"}) {
    json other = j;
    other["model"]["type"] = type;
    EXPECT_THAT(LoadError(other), HasSubstr("tokenizer.json: model.type: \"" + std::string(type) + "\""));
  }
  json missing = j;
  missing["model"].erase("merges");
  EXPECT_THAT(LoadError(missing), HasSubstr("model.merges: missing"));
  missing = j;
  missing.erase("model");
  EXPECT_THAT(LoadError(missing), HasSubstr("model: missing"));
  json big = j;
  big["model"]["vocab"]["ab"] = 1ll << 40;
  EXPECT_THAT(LoadError(big), HasSubstr("model.vocab[\"ab\"]: id 1099511627776 does not fit"));
  big["model"]["vocab"]["ab"] = -1;
  EXPECT_THAT(LoadError(big), HasSubstr("model.vocab[\"ab\"]: id -1 does not fit"));
  json merge = j;
  merge["model"]["merges"] = {"a q"};
  merge["model"]["vocab"].erase("q");
  EXPECT_THAT(LoadError(merge), HasSubstr("model.merges[0]: \"q\" is not in model.vocab"));
  json norm = j;
  norm["normalizer"] = {{"type", "NFC"}};
  EXPECT_THAT(LoadError(norm), HasSubstr("normalizer: NFC is not supported"));
  json meta = j;
  meta["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_THAT(LoadError(meta), HasSubstr("pre_tokenizer.type: \"Metaspace\" is not supported"));
  json look = j;
  look["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "a(?=b)|\\s+"}}},
                                               {"behavior", "Isolated"}},
                                              {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_THAT(LoadError(look), HasSubstr("pre_tokenizer.pretokenizers[0].pattern: RE2 cannot compile"));
  json order = look;
  std::swap(order["pre_tokenizer"]["pretokenizers"][0], order["pre_tokenizer"]["pretokenizers"][1]);
  EXPECT_THAT(LoadError(order), HasSubstr("pre_tokenizer.pretokenizers[0]: ByteLevel must be the last"));
  json added = j;
  added["added_tokens"] = {{{"id", 9000}, {"content", "<|x|>"}}};
  EXPECT_THAT(LoadError(added), HasSubstr("added_tokens[0].id: 9000 for \"<|x|>\", but the library gives it 257"));
  EXPECT_THAT(LoadError(json::array()), HasSubstr("not a JSON object"));
}

int RunPrepare(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return PrepareDataMain(static_cast<int>(argv.size()), argv.data());
}

TEST(PrepareData, BadTokenizerOrTooLittleTextExits65AndWritesNothing) {
  const std::string dir = TempDir();
  json wordpiece = ByteLevelBpe({}, {});
  wordpiece["model"]["type"] = "WordPiece";
  const std::string text = dir + "/text.txt";
  std::ofstream(text) << std::string(5000, 'x');
  EXPECT_EQ(RunPrepare({"--text", text, "--out", dir + "/a", "--tokenizer", Write(wordpiece, dir, "wp.json")}),
            worker::kExitBadData);
  EXPECT_FALSE(std::filesystem::exists(dir + "/a"));
  EXPECT_EQ(RunPrepare({"--text", text, "--out", dir + "/b", "--tokenizer", dir + "/none.json"}), worker::kExitBadData);
  EXPECT_FALSE(std::filesystem::exists(dir + "/b"));
  // 5000 bytes merge into 2500 "xx" tokens, then into 1250 "xxxx": too few after one more.
  const std::string bpe = Write(ByteLevelBpe({"xx", "xxxx", "xxxxxxxx"}, {"x x", "xx xx", "xxxx xxxx"}), dir);
  EXPECT_EQ(RunPrepare({"--text", text, "--out", dir + "/c", "--tokenizer", bpe}), worker::kExitBadData);
  EXPECT_FALSE(std::filesystem::exists(dir + "/c"));
  EXPECT_EQ(RunPrepare({"--text", text, "--out", dir + "/d", "--tokenizer", bpe, "--doc-separator", "xxxxxxxxxx"}),
            worker::kExitBadData);  // no EOS token named, none in a tokenizer_config.json
  EXPECT_EQ(RunPrepare({"--text", text, "--out", dir + "/d", "--doc-separator", "\\n"}), worker::kExitInvalidSpec);
  EXPECT_FALSE(std::filesystem::exists(dir + "/d"));
}

TEST(PrepareData, DocumentsGetTheConfigsEosBetweenThem) {
  const std::string dir = TempDir();
  json j = ByteLevelBpe({}, {});
  j["added_tokens"] = {{{"id", 256}, {"content", "<|eos|>"}, {"special", true}}};
  const std::string tok = Write(j, dir);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": {"content": "<|eos|>"}})";
  std::ofstream(dir + "/text.txt") << std::string(700, 'a') << "\n\n" << std::string(700, 'b');
  ASSERT_EQ(RunPrepare({"--text", dir + "/text.txt", "--out", dir + "/out", "--tokenizer", dir, "--doc-separator",
                        "\\n\\n", "--val-fraction", "0.5"}),
            0);
  auto train = ReadAnyShard(dir + "/out/train_000.bin");
  auto val = ReadAnyShard(dir + "/out/val_000.bin");
  ASSERT_TRUE(train.ok() && val.ok());
  std::vector<uint32_t> all = *train;
  all.insert(all.end(), val->begin(), val->end());
  std::vector<uint32_t> want(700, 'a');
  want.push_back(256);
  want.insert(want.end(), 700, 'b');
  EXPECT_EQ(all, want);
  EXPECT_TRUE(ReadShard(dir + "/out/train_000.bin").ok());  // vocab 257: uint16
}

TEST(Shards, Uint32ShardsRoundTripAndTrainingReadsThem) {
  const std::string dir = TempDir();
  std::vector<uint32_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(128000 + i % 256);
  auto r = WriteTrainValShards(tokens, 128256, dir);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::ifstream in(r->train_path, std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], r->train_tokens);
  EXPECT_THAT(ReadShard(r->train_path).status().message(), HasSubstr("uint32"));
  auto back = ReadAnyShard(r->train_path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, std::vector<uint32_t>(tokens.begin(), tokens.begin() + r->train_tokens));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().extension(), ".bin") << e.path();  // no temporary left

  auto ds = TokenDataset::Load(dir + "/train_*.bin", 16, 128256);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  int32_t inputs[16], targets[16];
  ds->Sample(1, 2, inputs, targets);
  EXPECT_GE(inputs[0], 128000);
  EXPECT_EQ(TokenDataset::Load(dir + "/train_*.bin", 16, 128000).status().code(), StatusCode::kDataLoss);

  auto small = WriteTrainValShards(std::vector<uint32_t>(2000, 65535), 65536, dir + "/u16");
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(ReadShard(small->train_path).ok());
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(TokenizerFiles, RecordedBesideTheShardsAndReadBackWithTheirIds) {
  const std::string dir = TempDir();
  json j = ByteLevelBpe({}, {});
  j["added_tokens"] = {{{"id", 256}, {"content", "<s>"}}, {{"id", 257}, {"content", "</s>"}}};
  Write(j, dir);
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})";
  std::ofstream(dir + "/text.txt") << std::string(700, 'a') << "\n\n" << std::string(700, 'b');
  ASSERT_EQ(RunPrepare({"--text", dir + "/text.txt", "--out", dir + "/out", "--tokenizer", dir, "--doc-separator",
                        "\\n\\n"}),
            0);
  EXPECT_EQ(Slurp(dir + "/out/tokenizer.json"), Slurp(dir + "/tokenizer.json"));
  EXPECT_EQ(Slurp(dir + "/out/tokenizer_config.json"), Slurp(dir + "/tokenizer_config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/special_tokens_map.json"));
  auto files = ReadTokenizerFiles(dir + "/out");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_TRUE(files->has_value());
  EXPECT_EQ((*files)->names, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ((*files)->vocab_size, 258);
  EXPECT_EQ((*files)->bos_id, 256u);
  EXPECT_EQ((*files)->eos_id, 257u);
  auto found = FindShardTokenizer(dir + "/out/*.bin", 258);
  ASSERT_TRUE(found.ok() && found->files);
  EXPECT_EQ(found->files->dir, dir + "/out");
  found = FindShardTokenizer(dir + "/out/*.bin", 257);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->files);
  EXPECT_THAT(found->note, HasSubstr("258 ids, more than the model's vocab_size 257"));

  // A tokenizer_config.json naming a token the tokenizer lacks is named with the file.
  std::ofstream(dir + "/out/tokenizer_config.json") << R"({"eos_token": "<|none|>"})";
  EXPECT_THAT(ReadTokenizerFiles(dir + "/out").status().message(),
              HasSubstr("out/tokenizer_config.json: eos_token \"<|none|>\" is not a token"));
  found = FindShardTokenizer(dir + "/out/*.bin", 258);
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->files);
  EXPECT_THAT(found->note, HasSubstr("<|none|>"));
}

TEST(TokenizerFiles, ShardsWrittenIntoTheTokenizersOwnDirectoryLeaveItsFilesAlone) {
  const std::string dir = TempDir();
  json j = ByteLevelBpe({}, {});
  j["added_tokens"] = {{{"id", 256}, {"content", "<s>"}}, {{"id", 257}, {"content", "</s>"}}};
  Write(j, dir);
  const std::string config = R"({"eos_token": "</s>"})";
  std::ofstream(dir + "/tokenizer_config.json") << config;
  std::ofstream(dir + "/text.txt") << std::string(700, 'a') << "\n\n" << std::string(700, 'b');
  ASSERT_EQ(RunPrepare({"--text", dir + "/text.txt", "--out", dir, "--tokenizer", dir, "--doc-separator", "\\n\\n"}), 0);
  EXPECT_EQ(Slurp(dir + "/tokenizer_config.json"), config);
  // Another eos would have to rewrite the user's own config: refused, and no shard is left.
  EXPECT_EQ(RunPrepare({"--text", dir + "/text.txt", "--out", dir, "--tokenizer", dir, "--doc-separator", "\\n\\n",
                        "--eos", "<s>"}),
            worker::kExitInvalidSpec);
  EXPECT_EQ(Slurp(dir + "/tokenizer_config.json"), config);
  EXPECT_FALSE(std::filesystem::exists(dir + "/train_000.bin"));
}

}  // namespace
}  // namespace fp8::data
