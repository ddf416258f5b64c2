// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/calibrate.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "worker/calibrate/activation_calib.h"
#include "worker/calibrate/conversion_plan.h"
#include "worker/calibrate/eval_loss.h"
#include "worker/calibrate/eval_model.h"
#include "worker/calibrate/model_input.h"
#include "worker/calibrate/moe_tensors.h"
#include "worker/calibrate/report.h"
#include "worker/calibrate/selection.h"
#include "worker/calibrate/tensor_convert.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::calibrate {

namespace fs = std::filesystem;
using json = nlohmann::json;
using safetensors::DType;
using safetensors::TensorInfo;

namespace {

constexpr const char* kStateDir = ".fp8-calibrate";
constexpr const char* kStateFile = "state.json";

// Static activation scales and the eval loss, for fp8d's GPT models (activations.data set):
// the model on the CPU backend with its original weights, and the calibration shards.
struct GptCalibration {
  std::unique_ptr<train::GptModel> model;
  data::TokenDataset data;
  ActivationCalibration activations;
};

StatusOr<std::optional<json>> ReadJsonIfExists(const fs::path& p) {
  if (!fs::exists(p)) return std::optional<json>();
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return std::optional<json>(json::parse(ss.str()));
  } catch (const json::exception&) {
    return std::optional<json>();  // a torn marker from a crash: treat as absent
  }
}

// Runs before any output is written, so a model or data the calibration cannot use fails fast.
StatusOr<std::unique_ptr<GptCalibration>> StartGptCalibration(const ModelInput& in, const ActivationOptions& opts) {
  auto g = std::make_unique<GptCalibration>();
  FP8_ASSIGN_OR_RETURN(g->model, LoadGptModel(in));
  const train::ModelConfig& cfg = g->model->config();
  auto data = data::TokenDataset::Load(opts.data, cfg.seq_len, cfg.vocab_size);
  if (!data.ok()) {
    if (data.status().code() == StatusCode::kNotFound)  // the glob names nothing: a spec error
      return FailedPreconditionError("activations.data: " + data.status().message());
    return DataLossError("activations.data: " + data.status().message());
  }
  g->data = std::move(*data);
  FP8_ASSIGN_OR_RETURN(g->activations, CalibrateActivations(*g->model, g->data, opts));
  return g;
}

// DeepSeek-V3's quantization_config, as vLLM's and SGLang's Fp8Config.from_config read it
// (quant_method, activation_scheme, weight_block_size, ignored_layers:
// vllm/model_executor/layers/quantization/fp8.py, python/sglang/srt/layers/quantization/fp8.py)
// and transformers' FineGrainedFP8Config (modules_to_not_convert). Block weights with dynamic
// activations only (jobspec: output_format.granularity, output_format.activations).
json DeepSeekQuantizationConfig(const CalibrateOptions& opts, const Plan& plan) {
  json qc = {{"quant_method", "fp8"},
             {"fmt", "e4m3"},
             {"activation_scheme", "dynamic"},
             {"weight_block_size", {kernels::kTile, kernels::kTile}}};
  if (opts.weights.scale_format == kernels::ScaleFormat::kUe8m0) qc["scale_fmt"] = "ue8m0";
  if (!plan.not_converted.empty()) {
    qc["ignored_layers"] = plan.not_converted;           // vLLM's name
    qc["modules_to_not_convert"] = plan.not_converted;   // transformers' name
  }
  return qc;
}

// llm-compressor's quantization_config for FP8 (compressed-tensors'
// src/compressed_tensors/quantization/quant_config.py QuantizationConfig, quant_scheme.py
// QuantizationScheme, quant_args.py QuantizationArgs; the last two forbid unknown keys, so only
// their fields are written). The activation arguments are those of compressed-tensors' presets:
// FP8 (static per-tensor), FP8_DYNAMIC (dynamic per-token) and FP8_BLOCK (dynamic per group of
// 128), which vLLM's CompressedTensorsConfig._is_fp8_w8a8 maps onto CompressedTensorsW8A8Fp8
// (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py).
json CompressedTensorsQuantizationConfig(const CalibrateOptions& opts, const Plan& plan, bool static_activations) {
  const WeightGranularity g = opts.weights.granularity;
  json weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", GranularityName(g)},
                  {"dynamic", false}};
  if (g == WeightGranularity::kBlock) weights["block_structure"] = {kernels::kTile, kernels::kTile};
  json input = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}};
  if (static_activations) {
    input["strategy"] = "tensor";
    input["dynamic"] = false;
  } else if (g == WeightGranularity::kBlock) {
    input["strategy"] = "group";
    input["group_size"] = kernels::kTile;
    input["dynamic"] = true;
  } else {
    input["strategy"] = "token";
    input["dynamic"] = true;
  }
  // The linears left in high precision, by module name (vLLM's should_ignore_layer matches
  // them exactly). Not the embeddings, as llm-compressor lists only modules of a targeted type:
  // vLLM's CompressedTensorsConfig.get_quant_method answers an ignored layer, an embedding too,
  // with UnquantizedLinearMethod. lm_head always, unless quantized: transformers'
  // compressed-tensors targets every nn.Linear, a tied head included, which has no weight of its
  // own in the checkpoint.
  bool head_quantized = false;
  for (const auto& actions : plan.shards)
    for (const Action& a : actions) head_quantized |= a.kind == Action::kQuantize && a.tensor->name == "lm_head.weight";
  std::vector<std::string> ignore;
  std::copy_if(plan.not_converted.begin(), plan.not_converted.end(), std::back_inserter(ignore),
               [](const std::string& m) { return !IsEmbeddingModule(m); });
  if (!head_quantized && std::find(ignore.begin(), ignore.end(), "lm_head") == ignore.end()) ignore.push_back("lm_head");
  std::sort(ignore.begin(), ignore.end());
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input},
              {"output_activations", nullptr}}}}},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr}};
}

json QuantizationConfig(const CalibrateOptions& opts, const Plan& plan, bool static_activations) {
  switch (opts.output_format) {
    case OutputFormat::kDeepSeek: return DeepSeekQuantizationConfig(opts, plan);
    case OutputFormat::kCompressedTensors: return CompressedTensorsQuantizationConfig(opts, plan, static_activations);
  }
  return json::object();
}

Status WriteJson(const fs::path& p, const json& j) {
  return safetensors::WriteFileAtomically(p.string(), j.dump(2) + "\n");
}

Status CopyFileDurably(const fs::path& from, const fs::path& to) {
  std::ifstream f(from, std::ios::binary);
  if (!f) return DataLossError(from.string() + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return safetensors::WriteFileAtomically(to.string(), ss.str());
}

// Where a run writes: the output dir appears in one rename of its staging twin, which holds the
// resume state while the run goes on (calibrate.h, "Output protocol").
struct OutputPaths {
  explicit OutputPaths(const std::string& output_dir)
      : out(output_dir), staging(output_dir + ".partial"), state_dir(staging / kStateDir) {}
  fs::path out, staging, state_dir;
};

// A retry of an attempt that finished but died before reporting `done` finds its own result in
// output_dir: that result's summary, marked already_complete. Otherwise nullopt when the run may
// write output_dir, FailedPrecondition when output_dir is taken or is the input.
StatusOr<std::optional<json>> CheckOutputDir(const CalibrateOptions& opts, const ModelInput& in,
                                             const OutputPaths& paths, const json& fingerprint) {
  std::error_code ec;
  if (fs::exists(paths.out, ec)) {
    FP8_ASSIGN_OR_RETURN(auto done, ReadJsonIfExists(paths.out / kReportJson));
    if (done && done->value("fingerprint", json()) == fingerprint) {
      json summary = (*done)["summary"];
      summary["already_complete"] = true;
      return std::optional<json>(std::move(summary));
    }
    if (!fs::is_directory(paths.out) || !fs::is_empty(paths.out))
      return FailedPreconditionError("output_dir: " + opts.output_dir +
                                     " already exists and is not empty; refusing to overwrite it");
  }
  const fs::path in_dir = fs::weakly_canonical(in.dir, ec);
  const fs::path out_abs = fs::weakly_canonical(paths.out, ec);
  if (in_dir == out_abs) return FailedPreconditionError("output_dir: the same directory as the input");
  return std::optional<json>();
}

// The plan of the spec's direction; its unaligned-tensor warnings go to the log now.
StatusOr<Plan> PlanConversion(const ModelInput& in, const CalibrateOptions& opts) {
  FP8_ASSIGN_OR_RETURN(Plan plan, opts.direction == Direction::kQuantize ? PlanQuantize(in, opts) : PlanDequantize(in, opts.input));
  for (const auto* list : {&plan.unaligned, &plan.layout_warnings})
    for (const json& w : *list)
      std::fprintf(stderr, "fp8-worker calibrate: warning: %s\n", w["message"].get<std::string>().c_str());
  return plan;
}

// Static activation scales when the spec names activations.data (null otherwise), added to the
// plan's quantized weights.
StatusOr<std::unique_ptr<GptCalibration>> CalibrateStaticActivations(const ModelInput& in, const CalibrateOptions& opts,
                                                                     Plan* plan) {
  if (opts.activations.data.empty()) return std::unique_ptr<GptCalibration>();
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<GptCalibration> gpt, StartGptCalibration(in, opts.activations));
  FP8_RETURN_IF_ERROR(AddInputScales(in, gpt->activations, plan));
  return gpt;
}

// Resume only when the spec and the input are exactly those of the earlier attempt; otherwise
// start a fresh staging dir holding this run's fingerprint. Returns whether the run resumes.
StatusOr<bool> PrepareStaging(const OutputPaths& paths, const json& fingerprint) {
  FP8_ASSIGN_OR_RETURN(auto state, ReadJsonIfExists(paths.state_dir / kStateFile));
  if (state && *state == fingerprint) return true;
  std::error_code ec;
  fs::remove_all(paths.staging, ec);
  if (ec) return UnavailableError(paths.staging.string() + ": cannot remove stale staging dir: " + ec.message());
  fs::create_directories(paths.state_dir, ec);
  if (ec) return UnavailableError(paths.state_dir.string() + ": cannot create: " + ec.message());
  FP8_RETURN_IF_ERROR(WriteJson(paths.state_dir / kStateFile, fingerprint));
  return false;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// What every step after the checks reads. Set up by RunCalibration before anything is written.
struct Run {
  const CalibrateOptions& opts;
  const RunControls& controls;
  const ModelInput& in;
  const Plan& plan;
  WeightConverter& converter;
  GptCalibration* gpt;  // static activation calibration, or null
  const OutputPaths& paths;
  const json& fingerprint;
  std::chrono::steady_clock::time_point start;
  double activation_seconds;  // forward passes, not weight conversion: reported apart
  bool resume;

  double Elapsed() const { return SecondsSince(start); }
  void Report(ProgressUpdate& pu) const {
    pu.elapsed_seconds = Elapsed();
    if (controls.on_progress) controls.on_progress(pu);
  }
};

// What one finished shard contributes, the same whether converted now or read back from its
// marker.
struct ShardResult {
  std::vector<TensorReport> reports;
  json weight_map = json::object();  // output tensor → shard
  uint64_t data_bytes = 0;
  int64_t converted = 0;
};

// Sums over the shards, finished shards of an earlier attempt included.
struct ConversionTotals {
  std::vector<TensorReport> reports;
  json weight_map = json::object();
  uint64_t total_size = 0;      // data bytes written: the index's total_size
  uint64_t bytes_this_run = 0;  // input bytes converted by this attempt
  uint64_t bytes_done = 0;      // input bytes done, skipped shards included
  int64_t tensors_done = 0, shards_skipped = 0, shards_processed = 0, converted = 0;

  void Add(ShardResult&& shard, const std::string& name) {
    for (auto& r : shard.reports) reports.push_back(std::move(r));
    for (auto it = shard.weight_map.begin(); it != shard.weight_map.end(); ++it) weight_map[it.key()] = name;
    total_size += shard.data_bytes;
    converted += shard.converted;
  }
};

json MarkerJson(const std::string& shard, const ShardResult& r) {
  json reps = json::array();
  for (const auto& rep : r.reports) reps.push_back(rep.ToJson());
  return {{"shard", shard}, {"tensors", reps}, {"weight_map", r.weight_map}, {"data_bytes", r.data_bytes},
          {"converted", r.converted}};
}

ShardResult ShardResultFromMarker(json& marker) {
  ShardResult r;
  for (const auto& j : marker["tensors"]) r.reports.push_back(TensorReport::FromJson(j));
  r.weight_map = marker["weight_map"];
  r.data_bytes = marker["data_bytes"].get<uint64_t>();
  r.converted = marker["converted"].get<int64_t>();
  return r;
}

// On a resumed run, a shard whose output and marker an earlier attempt finished is taken from the
// marker and reported as skipped. Returns whether it was.
StatusOr<bool> SkipFinishedShard(const Run& run, size_t s, ProgressUpdate& pu, ConversionTotals& totals) {
  const std::string& shard = run.in.shards[s];
  if (!run.resume || !fs::exists(run.paths.staging / shard)) return false;
  FP8_ASSIGN_OR_RETURN(auto done, ReadJsonIfExists(run.paths.state_dir / (shard + ".json")));
  if (!done || done->value("shard", "") != shard) return false;
  totals.Add(ShardResultFromMarker(*done), shard);
  totals.tensors_done += static_cast<int64_t>(run.plan.shards[s].size());
  totals.bytes_done += run.in.readers[s].file_size();
  ++totals.shards_skipped;
  pu.step = totals.tensors_done;
  pu.skipped = true;
  pu.bytes_done = totals.bytes_done;
  run.Report(pu);
  return true;
}

// The output shard's header: each action's tensors, in the input's order.
std::vector<TensorInfo> OutputTensors(const std::vector<Action>& actions, WeightGranularity granularity) {
  std::vector<TensorInfo> infos;
  for (const auto& a : actions) {
    const TensorInfo& t = *a.tensor;
    switch (a.kind) {
      case Action::kCopy: infos.push_back({t.name, t.dtype, t.shape}); break;
      case Action::kQuantize:
        infos.push_back({t.name, DType::F8_E4M3, t.shape});
        infos.push_back({a.scale_name, DType::F32, ScaleShape(granularity, t.shape[0], t.shape[1], IsConv1DInOut(t.name))});
        // [1], as compressed-tensors' initialize.py makes a per-tensor scale.
        if (!a.input_scale_name.empty()) infos.push_back({a.input_scale_name, DType::F32, {1}});
        break;
      case Action::kDequantize: infos.push_back({t.name, DType::BF16, t.shape}); break;
      case Action::kDrop: break;
    }
  }
  return infos;
}

// Writes one action's output tensors; the report is empty for kDrop.
StatusOr<TensorReport> ConvertTensor(const Run& run, const Action& a, const safetensors::Reader& reader,
                                     safetensors::Writer& writer) {
  const TensorInfo& t = *a.tensor;
  TensorReport rep;
  switch (a.kind) {
    case Action::kCopy:
      FP8_RETURN_IF_ERROR(writer.CopyFrom(reader, t.name, t.name));
      rep.name = t.name;
      rep.dtype = safetensors::DTypeName(t.dtype);
      rep.shape = t.shape;
      rep.bytes_in = rep.bytes_out = t.nbytes();
      break;
    case Action::kQuantize: {
      FP8_ASSIGN_OR_RETURN(rep, run.converter.Quantize(reader, t, run.opts.weights, a.scale_name, writer));
      if (!a.input_scale_name.empty()) FP8_RETURN_IF_ERROR(writer.Write(a.input_scale_name, &a.input_scale, sizeof(float)));
      break;
    }
    case Action::kDequantize:
      FP8_RETURN_IF_ERROR(run.converter.Dequantize(reader, t, *a.scale, run.in.readers[a.scale_shard], writer));
      rep.name = t.name;
      rep.dtype = safetensors::DTypeName(t.dtype);
      rep.shape = t.shape;
      rep.bytes_in = t.nbytes();
      rep.bytes_out = t.nbytes() * 2;
      break;
    case Action::kDrop:
      break;
  }
  return rep;
}

// Converts shard `s` into the staging dir tensor by tensor (a stop request is honoured between
// tensors), commits it, then writes its marker.
Status ConvertShard(const Run& run, size_t s, ProgressUpdate& pu, ConversionTotals& totals) {
  const std::string& shard = run.in.shards[s];
  const auto& reader = run.in.readers[s];
  const auto& actions = run.plan.shards[s];
  FP8_ASSIGN_OR_RETURN(safetensors::Writer writer,
                       safetensors::Writer::Create((run.paths.staging / shard).string(),
                                                   OutputTensors(actions, run.opts.weights.granularity), reader.metadata()));
  ShardResult result;
  for (const auto& a : actions) {
    if (run.controls.stop_requested && run.controls.stop_requested())
      return AbortedError("stopped on request before tensor \"" + a.tensor->name + "\" of " + shard + "; " +
                          std::to_string(s) + " of " + std::to_string(run.in.shards.size()) +
                          " shards are complete and will be kept by a restart");
    FP8_ASSIGN_OR_RETURN(TensorReport rep, ConvertTensor(run, a, reader, writer));
    if (a.kind == Action::kQuantize || a.kind == Action::kDequantize) ++result.converted;
    const uint64_t nbytes = a.tensor->nbytes();
    totals.bytes_done += nbytes;
    totals.bytes_this_run += nbytes;
    ++totals.tensors_done;
    if (a.kind != Action::kDrop) {
      rep.shard = shard;
      result.reports.push_back(std::move(rep));
    }
    pu.step = totals.tensors_done;
    pu.tensor = a.tensor->name;
    pu.bytes_done = totals.bytes_done;
    run.Report(pu);
  }
  FP8_RETURN_IF_ERROR(writer.Commit());
  for (const auto& t : writer.tensors()) {
    result.weight_map[t.name] = shard;
    result.data_bytes += t.nbytes();
  }
  FP8_RETURN_IF_ERROR(WriteJson(run.paths.state_dir / (shard + ".json"), MarkerJson(shard, result)));
  totals.Add(std::move(result), shard);
  return OkStatus();
}

Status ConvertShards(const Run& run, ConversionTotals& totals) {
  const size_t shards = run.in.shards.size();
  for (size_t s = 0; s < shards; ++s) {
    ProgressUpdate pu;
    pu.total_steps = run.plan.total_tensors;
    pu.shard = run.in.shards[s];
    pu.bytes_total = run.in.total_bytes;
    FP8_ASSIGN_OR_RETURN(const bool skipped, SkipFinishedShard(run, s, pu, totals));
    if (skipped) continue;
    FP8_RETURN_IF_ERROR(ConvertShard(run, s, pu, totals));
    ++totals.shards_processed;
    if (run.controls.max_shards >= 0 && totals.shards_processed >= run.controls.max_shards && s + 1 < shards)
      return AbortedError("stopped after " + std::to_string(totals.shards_processed) + " shard(s) (--max-shards); " +
                          "finished shards are kept for the restart");
  }
  return OkStatus();
}

// The index, config.json (its quantization_config set or removed) and the input's other files.
Status WriteModelFiles(const Run& run, const ConversionTotals& totals) {
  json index = {{"metadata", {{"total_size", totals.total_size}}}, {"weight_map", totals.weight_map}};
  FP8_RETURN_IF_ERROR(WriteJson(run.paths.staging / kIndexFile, index));
  json config = run.in.config.value_or(json::object());
  if (run.opts.direction == Direction::kQuantize) {
    config["quantization_config"] = QuantizationConfig(run.opts, run.plan, run.gpt != nullptr);
  } else {
    config.erase("quantization_config");
  }
  FP8_RETURN_IF_ERROR(WriteJson(run.paths.staging / kConfigFile, config));
  for (const auto& name : run.in.other_files)
    FP8_RETURN_IF_ERROR(CopyFileDurably(fs::path(run.in.dir) / name, run.paths.staging / name));
  return OkStatus();
}

json Summary(const Run& run, const ConversionTotals& totals) {
  const CalibrateOptions& opts = run.opts;
  const bool quantize = opts.direction == Direction::kQuantize;
  const double seconds = run.Elapsed();
  double min_snr = std::numeric_limits<double>::infinity(), max_rel = 0, max_sat = 0;
  int64_t copied = 0;
  for (const auto& r : totals.reports) {
    if (r.quantized) {
      min_snr = std::min(min_snr, r.snr_db);
      max_rel = std::max(max_rel, r.rel_error);
      max_sat = std::max(max_sat, r.frac_saturated);
    } else {
      ++copied;
    }
  }
  const double conversion_seconds = seconds - run.activation_seconds;
  json summary = {
      {"direction", quantize ? "quantize" : "dequantize"},
      {"output_dir", opts.output_dir},
      {"shards", run.in.shards.size()},
      {"shards_skipped", totals.shards_skipped},
      {"tensors_converted", totals.converted},
      {"tensors_copied", quantize ? copied : static_cast<int64_t>(totals.reports.size()) - totals.converted},
      {"bytes_in", run.in.total_bytes},
      {"bytes_out", totals.total_size},
      {"seconds", seconds},
      // Weight conversion only: the activation forward passes are activation_calibration_seconds.
      {"input_gb_per_sec", conversion_seconds > 0 ? totals.bytes_this_run / conversion_seconds / 1e9 : 0.0},
      {"backend", run.converter.backend()},
  };
  if (quantize) {
    summary["granularity"] = GranularityName(opts.weights.granularity);
    summary["scale_format"] = opts.weights.scale_format == kernels::ScaleFormat::kUe8m0 ? "ue8m0" : "fp32";
    summary["min_snr_db"] = std::isfinite(min_snr) ? json(min_snr) : json(nullptr);
    summary["max_rel_error"] = max_rel;
    summary["max_frac_saturated"] = max_sat;
    summary["unaligned_tensors"] = run.plan.unaligned.size();
    summary["output_format"] = OutputFormatName(opts.output_format);
  }
  return summary;
}

struct StaticActivationReport {
  ActivationCalibration written;  // the layers that got an input_scale
  EvalLossReport eval;
};

// The eval loss before and after with the static scales written, and its fields in `summary`.
StatusOr<StaticActivationReport> EvaluateStaticActivations(const Run& run, const json& weight_map, json& summary) {
  // Only the layers that got an input_scale (a user's exclude may have kept some in BF16).
  StaticActivationReport r{run.gpt->activations, {}};
  std::erase_if(r.written.layers, [&](const ActivationLayerStats& l) {
    return !weight_map.contains(l.layer + kInputScaleSuffix) &&
           !weight_map.contains(std::string(kHfPrefix) + l.layer + kInputScaleSuffix);
  });
  const double t0 = run.Elapsed();
  FP8_ASSIGN_OR_RETURN(r.eval, EvaluateLossBeforeAfter(*run.gpt->model, run.gpt->data, run.gpt->activations.num_samples,
                                                       run.paths.staging.string(), weight_map, &r.written));
  summary["activation_calibration_seconds"] = run.activation_seconds;
  summary["eval_seconds"] = run.Elapsed() - t0;
  summary["activation_scheme"] = "static";
  summary["activation_method"] = r.written.method;
  summary["eval_loss_bf16"] = r.eval.loss_bf16;
  summary["eval_loss_fp8_weights"] = r.eval.loss_fp8_weights;
  summary["eval_rel_diff_fp8_weights"] = r.eval.rel_diff_fp8_weights;
  summary["eval_loss_fp8_static"] = r.eval.loss_fp8_static;
  summary["eval_rel_diff_fp8_static"] = r.eval.rel_diff_fp8_static;
  return r;
}

// report.json and report.txt; with static activations the eval runs first and adds to `summary`.
Status WriteReports(const Run& run, const ConversionTotals& totals, json& summary) {
  std::optional<StaticActivationReport> activations;
  if (run.gpt) {
    FP8_ASSIGN_OR_RETURN(activations, EvaluateStaticActivations(run, totals.weight_map, summary));
  }
  json report = {{"fingerprint", run.fingerprint}, {"summary", summary}, {"tensors", json::array()}};
  std::vector<json> warnings = run.plan.unaligned;
  warnings.insert(warnings.end(), run.plan.layout_warnings.begin(), run.plan.layout_warnings.end());
  if (!warnings.empty()) report["warnings"] = warnings;
  for (const auto& r : totals.reports) report["tensors"].push_back(r.ToJson());
  std::string table = FormatReportTable(totals.reports, summary);
  for (const json& w : warnings) table += "warning: " + w["message"].get<std::string>() + "\n";
  if (activations) {
    report["activations"] = activations->written.ToJson();
    report["eval"] = activations->eval.ToJson();
    table += FormatActivationTable(activations->written) + FormatEvalTable(activations->eval);
  }
  FP8_RETURN_IF_ERROR(WriteJson(run.paths.staging / kReportJson, report));
  return safetensors::WriteFileAtomically((run.paths.staging / kReportText).string(), table);
}

// The markers go, then the staging dir becomes output_dir in one rename.
Status PublishStaging(const OutputPaths& paths) {
  std::error_code ec;
  fs::remove_all(paths.state_dir, ec);
  if (ec) return UnavailableError(paths.state_dir.string() + ": cannot remove: " + ec.message());
  FP8_RETURN_IF_ERROR(safetensors::FsyncParentDir((paths.staging / kReportJson).string()));
  if (fs::exists(paths.out)) fs::remove(paths.out, ec);  // an empty directory the caller created
  fs::rename(paths.staging, paths.out, ec);
  if (ec) return UnavailableError(paths.out.string() + ": cannot rename the staging dir into place: " + ec.message());
  return safetensors::FsyncParentDir(paths.out.string());
}

// Everything here writes only into the staging dir until the final rename.
StatusOr<json> ConvertIntoStaging(const Run& run) {
  ConversionTotals totals;
  FP8_RETURN_IF_ERROR(ConvertShards(run, totals));
  FP8_RETURN_IF_ERROR(WriteModelFiles(run, totals));
  json summary = Summary(run, totals);
  FP8_RETURN_IF_ERROR(WriteReports(run, totals, summary));
  FP8_RETURN_IF_ERROR(PublishStaging(run.paths));
  return summary;
}

// A permanent (spec or data) error: a restart could not get further, and nothing half-done
// should linger next to the output.
bool RemovesStaging(StatusCode c) {
  return c == StatusCode::kInvalidArgument || c == StatusCode::kDataLoss || c == StatusCode::kNotFound ||
         c == StatusCode::kOutOfRange;
}

}  // namespace

StatusOr<json> RunCalibration(const CalibrateOptions& opts, const RunControls& controls) {
  const auto start = std::chrono::steady_clock::now();
  FP8_ASSIGN_OR_RETURN(ModelInput in, OpenModelInput(opts.input));
  const OutputPaths paths(opts.output_dir);
  const json fingerprint = {{"spec", opts.canonical}, {"input", in.Fingerprint()}};
  FP8_ASSIGN_OR_RETURN(std::optional<json> finished, CheckOutputDir(opts, in, paths, fingerprint));
  if (finished) return *finished;

  FP8_RETURN_IF_ERROR(CheckMoeTensors(in));
  FP8_ASSIGN_OR_RETURN(Plan plan, PlanConversion(in, opts));
  // CUDA when this build has it and a GPU is visible (spec field backend), the CPU otherwise.
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<WeightConverter> converter, MakeWeightConverter(opts.backend));
  const auto activations_start = std::chrono::steady_clock::now();
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<GptCalibration> gpt, CalibrateStaticActivations(in, opts, &plan));
  const double activation_seconds = gpt ? SecondsSince(activations_start) : 0;
  FP8_ASSIGN_OR_RETURN(const bool resume, PrepareStaging(paths, fingerprint));

  const Run run{opts, controls, in, plan, *converter, gpt.get(), paths, fingerprint, start, activation_seconds, resume};
  auto result = ConvertIntoStaging(run);
  if (!result.ok() && RemovesStaging(result.status().code())) {
    std::error_code ec;
    fs::remove_all(paths.staging, ec);
  }
  return result;
}

}  // namespace fp8::calibrate
