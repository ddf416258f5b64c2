// SPDX-License-Identifier: Apache-2.0
#include "worker/train/model_tools_main.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/common/events.h"
#include "worker/data/shards.h"
#include "worker/data/tokenizer_files.h"
#include "worker/train/causal_lm.h"
#include "worker/train/hf_model.h"
#include "worker/train/trainer.h"

namespace fp8::train {
namespace {

constexpr const char* kExportUsage =
    "usage: fp8-worker export --checkpoint DIR --out DIR --format hf [--max-shard-bytes N] [--tokenizer DIR]\n"
    "  --tokenizer: the directory of the tokenizer.json (and tokenizer_config.json, special_tokens_map.json)\n"
    "               the export carries; without it, the tokenizer prepare-data recorded beside the shards\n"
    "               of the checkpoint's data.train, if any\n";
constexpr const char* kEvaluateUsage =
    "usage: fp8-worker evaluate --model DIR [--recipe fp32|bf16|fp8-tensorwise|fp8-blockwise]\n"
    "                           (--tokens 1,2,3 | --data GLOB [--seed S] [--first-batch B])\n"
    "  --tokens: the logits of one sequence (JSON on stdout: {\"logits\": [[...], ...], \"loss\"})\n"
    "  --data: the trainer's eval loss (val stream of --seed), or with --first-batch B the loss of\n"
    "          the first training batch of B sequences (what step 1 of `train` reports)\n";

// --name VALUE pairs; false (and a message) for anything else.
bool ParseFlags(int argc, char** argv, const std::vector<std::string>& known, std::map<std::string, std::string>* out,
                const char* usage) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stderr);
      return false;
    }
    if (const auto eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "fp8-worker: %s: missing value\n%s", a.c_str(), usage);
      return false;
    }
    bool ok = false;
    for (const auto& k : known) ok = ok || a == "--" + k;
    if (!ok) {
      std::fprintf(stderr, "fp8-worker: unknown argument '%s'\n%s", a.c_str(), usage);
      return false;
    }
    (*out)[a.substr(2)] = v;
  }
  return true;
}

bool ParseInt(const std::string& s, int64_t lo, int64_t* out) {
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || x < lo) return false;
  *out = x;
  return true;
}

int BadData(const std::string& what, const Status& s) {
  std::fprintf(stderr, "fp8-worker: %s: %s\n", what.c_str(), s.message().c_str());
  // An output the command may not replace is a usage error; I/O failures are internal.
  if (s.code() == StatusCode::kFailedPrecondition) return worker::kExitInvalidSpec;
  return s.code() == StatusCode::kInternal ? worker::kExitInternal : worker::kExitBadData;
}

int Usage(const std::string& msg, const char* usage) {
  std::fprintf(stderr, "fp8-worker: %s\n%s", msg.c_str(), usage);
  return worker::kExitInvalidSpec;
}

}  // namespace

int ExportMain(int argc, char** argv) {
  std::map<std::string, std::string> f;
  if (!ParseFlags(argc, argv, {"checkpoint", "out", "format", "max-shard-bytes", "tokenizer"}, &f, kExportUsage))
    return worker::kExitInvalidSpec;
  if (f["checkpoint"].empty()) return Usage("--checkpoint: required", kExportUsage);
  if (f["out"].empty()) return Usage("--out: required", kExportUsage);
  if (f["format"] != "hf") return Usage("--format: must be hf, got '" + f["format"] + "'", kExportUsage);
  HfExportOptions opts;
  if (f.count("max-shard-bytes")) {
    int64_t n = 0;
    if (!ParseInt(f["max-shard-bytes"], 1, &n)) return Usage("--max-shard-bytes: must be a positive integer", kExportUsage);
    opts.max_shard_bytes = static_cast<uint64_t>(n);
  }
  auto src = OpenModelSource(f["checkpoint"]);
  if (!src.ok()) return BadData("--checkpoint", src.status());
  std::string no_tokenizer;
  if (f.count("tokenizer")) {
    auto t = data::ReadTokenizerFiles(f["tokenizer"]);
    if (!t.ok()) return BadData("--tokenizer", t.status());
    if (!*t) return BadData("--tokenizer", DataLossError(f["tokenizer"] + ": no " + data::kTokenizerJson));
    if (Status s = data::CheckTokenizerFitsVocab(**t, src->config.vocab_size); !s.ok())
      return BadData("--tokenizer", DataLossError(s.message()));
    opts.tokenizer = std::move(*t);
  } else if (src->kind == ModelSource::Kind::kFp8dCheckpoint) {
    // The data glob the checkpoint's run trained on, as its trainer_state.json keeps it.
    auto state = ReadJsonObject(src->config_path);
    if (!state.ok()) return BadData("--checkpoint", state.status());
    const nlohmann::json train =
        state->value("spec", nlohmann::json::object()).value("data", nlohmann::json::object()).value("train", nlohmann::json());
    if (train.is_string() && !train.get<std::string>().empty()) {
      auto found = data::FindShardTokenizer(train.get<std::string>(), src->config.vocab_size);
      if (!found.ok()) no_tokenizer = found.status().message();
      else if (found->files) opts.tokenizer = std::move(found->files);
      else no_tokenizer = found->note;
      if (!no_tokenizer.empty()) no_tokenizer = "data.train of " + src->config_path + ": " + no_tokenizer;
    }
  }
  PrecisionConfig precision;
  const std::unique_ptr<CausalLm> model = MakeCausalLm(src->config, precision);
  if (Status s = LoadModelWeights(*src, model.get()); !s.ok()) return BadData("--checkpoint", s);
  if (Status s = ExportHf(*model, f["out"], opts); !s.ok()) return BadData("--out", s);
  std::fprintf(stderr, "fp8-worker export: %s → %s (Hugging Face %s, %lld parameters)\n", src->dir.c_str(),
               f["out"].c_str(), HfLayoutOf(model->config()).family.c_str(), static_cast<long long>(model->num_params()));
  if (opts.tokenizer) std::fprintf(stderr, "fp8-worker export: with the tokenizer files of %s\n", opts.tokenizer->dir.c_str());
  else if (!no_tokenizer.empty()) std::fprintf(stderr, "fp8-worker export: no tokenizer files: %s\n", no_tokenizer.c_str());
  return worker::kExitOk;
}

int EvaluateMain(int argc, char** argv) {
  std::map<std::string, std::string> f;
  if (!ParseFlags(argc, argv, {"model", "recipe", "tokens", "data", "seed", "first-batch"}, &f, kEvaluateUsage))
    return worker::kExitInvalidSpec;
  if (f["model"].empty()) return Usage("--model: required", kEvaluateUsage);
  if (f["tokens"].empty() == f["data"].empty()) return Usage("exactly one of --tokens and --data", kEvaluateUsage);
  PrecisionConfig precision;
  const std::string recipe = f.count("recipe") ? f["recipe"] : "fp32";
  if (recipe == "fp32") precision.recipe = Recipe::kFp32;
  else if (recipe == "bf16") precision.recipe = Recipe::kBf16;
  else if (recipe == "fp8-tensorwise") precision.recipe = Recipe::kFp8Tensorwise;
  else if (recipe == "fp8-blockwise") precision.recipe = Recipe::kFp8Blockwise;
  else return Usage("--recipe: must be fp32, bf16, fp8-tensorwise or fp8-blockwise", kEvaluateUsage);
  int64_t seed = 42, first_batch = 0;
  if (f.count("seed") && !ParseInt(f["seed"], 0, &seed)) return Usage("--seed: must be >= 0", kEvaluateUsage);
  if (f.count("first-batch") && !ParseInt(f["first-batch"], 1, &first_batch))
    return Usage("--first-batch: must be >= 1", kEvaluateUsage);

  auto src = OpenModelSource(f["model"]);
  if (!src.ok()) return BadData("--model", src.status());
  const std::unique_ptr<CausalLm> owned = MakeCausalLm(src->config, precision);
  CausalLm& model = *owned;
  if (Status s = LoadModelWeights(*src, &model); !s.ok()) return BadData("--model", s);
  const ModelConfig& cfg = model.config();
  const int t = cfg.seq_len;
  nlohmann::json out = {{"recipe", recipe}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
                        {"n_embd", cfg.d_model}, {"n_positions", cfg.seq_len}, {"vocab_size", cfg.vocab_size},
                        {"architecture", ArchitectureName(cfg.architecture)}};

  if (!f["tokens"].empty()) {
    std::vector<int32_t> tokens;
    size_t pos = 0;
    const std::string& s = f["tokens"];
    while (pos <= s.size()) {
      const size_t comma = std::min(s.find(',', pos), s.size());
      int64_t id = 0;
      if (!ParseInt(s.substr(pos, comma - pos), 0, &id) || id >= cfg.vocab_size)
        return Usage("--tokens: '" + s.substr(pos, comma - pos) + "' is not a token id < vocab_size " +
                         std::to_string(cfg.vocab_size), kEvaluateUsage);
      tokens.push_back(static_cast<int32_t>(id));
      pos = comma + 1;
    }
    if (tokens.size() < 2 || static_cast<int>(tokens.size()) > t)
      return Usage("--tokens: need 2 to n_positions (" + std::to_string(t) + ") ids", kEvaluateUsage);
    const size_t n = tokens.size();
    // Causal: padding after the sequence changes none of its logits.
    std::vector<int32_t> inputs(static_cast<size_t>(t), 0), targets(static_cast<size_t>(t), 0);
    for (size_t i = 0; i < n; ++i) inputs[i] = tokens[i];
    for (size_t i = 0; i + 1 < n; ++i) targets[i] = tokens[i + 1];
    model.KeepLogits(true);
    model.Forward(inputs.data(), targets.data(), 1, /*training=*/false);
    nlohmann::json rows = nlohmann::json::array();
    const auto& logits = model.logits();
    double loss = 0;
    for (size_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * static_cast<size_t>(cfg.vocab_size);
      rows.push_back(std::vector<float>(row, row + cfg.vocab_size));
      if (i + 1 < n) {
        double mx = row[0], sum = 0;
        for (int v = 0; v < cfg.vocab_size; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        for (int v = 0; v < cfg.vocab_size; ++v) sum += std::exp(row[v] - mx);
        loss += mx + std::log(sum) - row[tokens[i + 1]];
      }
    }
    out["logits"] = rows;
    out["loss"] = loss / static_cast<double>(n - 1);
  } else {
    auto ds = data::TokenDataset::Load(f["data"], t, cfg.vocab_size);
    if (!ds.ok()) return BadData("--data", ds.status());
    const bool eval = first_batch == 0;
    const int count = eval ? kEvalSequences : static_cast<int>(first_batch);
    const uint64_t stream = eval ? static_cast<uint64_t>(seed) ^ kEvalStream : static_cast<uint64_t>(seed);
    // The trainer's eval runs in batches of per_device_train_batch_size; a sequence's loss does
    // not depend on its batch, so any grouping gives the same per-sequence numbers.
    std::vector<int32_t> inputs(static_cast<size_t>(count) * t), targets(inputs.size());
    for (int j = 0; j < count; ++j)
      ds->Sample(stream, static_cast<uint64_t>(j), inputs.data() + static_cast<size_t>(j) * t,
                 targets.data() + static_cast<size_t>(j) * t);
    out[eval ? "eval_loss" : "first_batch_loss"] = model.Forward(inputs.data(), targets.data(), count, false);
    out["sequences"] = count;
  }
  std::printf("%s\n", out.dump().c_str());
  return worker::kExitOk;
}

}  // namespace fp8::train
