#include "worker/calibrate/calibrate.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "worker/calibrate/activation_calib.h"
#include "worker/calibrate/eval_loss.h"
#include "worker/calibrate/eval_model.h"
#include "worker/calibrate/model_input.h"
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
constexpr const char* kScaleSuffix = "_scale_inv";
constexpr std::string_view kHfPrefix = "transformer.";  // transformers' GPT2LMHeadModel

// What happens to one input tensor.
struct Action {
  enum Kind { kCopy, kQuantize, kDequantize, kDrop } kind = kCopy;
  const TensorInfo* tensor = nullptr;
  std::string scale_name;         // kQuantize: the scale written; kDequantize: the scale read
  const TensorInfo* scale = nullptr;  // kDequantize
  size_t scale_shard = 0;             // kDequantize: shard holding the scale
  std::string input_scale_name;       // kQuantize with static activation scales
  float input_scale = 0;
};

struct Plan {
  std::vector<std::vector<Action>> shards;  // per input shard, in its data order
  std::vector<std::string> not_converted;   // modules of 2-D *.weight left in high precision
  // Selected tensors whose shape is not a whole number of 128x128 blocks (block granularity).
  std::vector<json> unaligned;
  int64_t total_tensors = 0;
};

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

// transformers' FP8Linear requires both dimensions of a block-scaled weight to be multiples of
// the block size; vLLM requires it of every dimension it splits (the q/k/v parts of a fused
// layer, and tensor-parallel shards).
json UnalignedWarning(const TensorInfo& t, bool skipped) {
  std::vector<int> dims;
  for (int d = 0; d < 2; ++d)
    if (t.shape[static_cast<size_t>(d)] % kernels::kTile != 0) dims.push_back(d);
  std::string what;
  for (int d : dims)
    what += (what.empty() ? "" : " and ") + std::string("dimension ") + std::to_string(d) + " (" +
            std::to_string(t.shape[static_cast<size_t>(d)]) + ")";
  const std::string message =
      "tensor \"" + t.name + "\": " + what + (dims.size() > 1 ? " are" : " is") + " not a multiple of the block size " +
      std::to_string(kernels::kTile) + ": transformers' FP8 loader refuses it, and vLLM refuses it where it " +
      "splits that dimension (fused q/k/v parts, tensor parallelism)" +
      (skipped ? "; left unquantized (weights.skip_unaligned)" : "; set weights.skip_unaligned to leave it in BF16");
  return {{"tensor", t.name}, {"shape", t.shape}, {"dims", dims}, {"engines", {"transformers", "vllm"}},
          {"skipped", skipped}, {"message", message}};
}

std::string ModuleOf(const std::string& tensor) {
  return tensor.ends_with(".weight") ? tensor.substr(0, tensor.size() - 7) : tensor;
}

StatusOr<Plan> PlanQuantize(const ModelInput& in, const CalibrateOptions& opts) {
  Plan plan;
  TensorSelector selector(opts.weights);
  int64_t selected = 0;
  for (size_t s = 0; s < in.readers.size(); ++s) {
    const auto& r = in.readers[s];
    auto& actions = plan.shards.emplace_back();
    for (const auto& t : r.tensors()) {
      Action a;
      a.tensor = &t;
      bool selected_here = selector.Selected(t.name, t.shape.size());
      if (selected_here && opts.weights.granularity == WeightGranularity::kBlock &&
          (t.shape[0] % kernels::kTile != 0 || t.shape[1] % kernels::kTile != 0)) {
        plan.unaligned.push_back(UnalignedWarning(t, opts.weights.skip_unaligned));
        if (opts.weights.skip_unaligned) selected_here = false;
      }
      if (selected_here) {
        if (!IsQuantizableDType(t.dtype))
          return InvalidArgumentError(r.path() + ": tensor \"" + t.name + "\" has unsupported dtype " +
                                      safetensors::DTypeName(t.dtype) + " (quantize reads F32, BF16, F16)");
        a.kind = Action::kQuantize;
        a.scale_name = t.name + kScaleSuffix;
        if (in.tensor_shard.count(a.scale_name))
          return InvalidArgumentError(r.path() + ": tensor \"" + a.scale_name +
                                      "\" already exists (is the model already quantized?)");
        ++selected;
      } else if (t.shape.size() == 2 && t.name.ends_with(".weight")) {
        plan.not_converted.push_back(ModuleOf(t.name));
      }
      actions.push_back(a);
      ++plan.total_tensors;
    }
  }
  if (Status st = selector.CheckEveryPatternMatched(); !st.ok())
    return InvalidArgumentError(opts.input + ": " + st.message());
  std::sort(plan.not_converted.begin(), plan.not_converted.end());
  if (selected == 0 && !plan.unaligned.empty() && opts.weights.skip_unaligned)
    return InvalidArgumentError(opts.input + ": weights.skip_unaligned leaves nothing to quantize: every selected tensor (" +
                                std::to_string(plan.unaligned.size()) + ") has a dimension that is not a multiple of " +
                                std::to_string(kernels::kTile));
  if (selected == 0)
    return InvalidArgumentError(opts.input + ": no tensor matches the weight patterns (2-D, include, not exclude)");
  return plan;
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

// Every quantized linear weight whose layer was calibrated gets `<layer>.input_scale`.
Status AddInputScales(const ModelInput& in, const ActivationCalibration& cal, Plan* plan) {
  for (auto& actions : plan->shards) {
    for (auto& a : actions) {
      if (a.kind != Action::kQuantize) continue;
      // fp8d's layer names are GPT2Model's; an export's tensors carry transformers' prefix.
      const std::string module = ModuleOf(a.tensor->name);
      const ActivationLayerStats* l = cal.Find(module.starts_with(kHfPrefix) ? module.substr(kHfPrefix.size()) : module);
      if (!l) continue;
      a.input_scale_name = module + kInputScaleSuffix;
      a.input_scale = l->scale;
      if (in.tensor_shard.count(a.input_scale_name))
        return InvalidArgumentError(in.dir + ": tensor \"" + a.input_scale_name +
                                    "\" already exists (is the model already quantized?)");
    }
  }
  return OkStatus();
}

StatusOr<Plan> PlanDequantize(const ModelInput& in, const std::string& input) {
  if (in.config && in.config->contains("quantization_config")) {
    const json& qc = (*in.config)["quantization_config"];
    if (qc.is_object() && qc.contains("weight_block_size") && qc["weight_block_size"] != json::array({128, 128}))
      return InvalidArgumentError(in.dir + "/" + kConfigFile + ": weight_block_size " +
                                  qc["weight_block_size"].dump() + " is not supported (only [128, 128])");
  }
  Plan plan;
  std::set<std::string> scales_used;
  for (size_t s = 0; s < in.readers.size(); ++s) {
    for (const auto& t : in.readers[s].tensors()) {
      if (t.dtype != DType::F8_E4M3 && t.dtype != DType::F8_E5M2) continue;
      const std::string scale = t.name + kScaleSuffix;
      auto it = in.tensor_shard.find(scale);
      if (it == in.tensor_shard.end())
        return InvalidArgumentError(in.readers[s].path() + ": FP8 tensor \"" + t.name + "\" has no \"" + scale + "\"");
      scales_used.insert(scale);
    }
  }
  if (scales_used.empty()) return InvalidArgumentError(input + ": no FP8 tensor to dequantize");
  for (size_t s = 0; s < in.readers.size(); ++s) {
    auto& actions = plan.shards.emplace_back();
    for (const auto& t : in.readers[s].tensors()) {
      Action a;
      a.tensor = &t;
      const bool static_input_scale =
          t.name.ends_with(kInputScaleSuffix) &&
          scales_used.count(t.name.substr(0, t.name.size() - std::string(kInputScaleSuffix).size()) + ".weight" +
                            kScaleSuffix);
      if (scales_used.count(t.name) || static_input_scale) {
        // Scales of FP8 layers mean nothing next to BF16 weights.
        a.kind = Action::kDrop;
      } else if (t.dtype == DType::F8_E4M3 || t.dtype == DType::F8_E5M2) {
        a.kind = Action::kDequantize;
        a.scale_name = t.name + kScaleSuffix;
        a.scale_shard = in.tensor_shard.at(a.scale_name);
        a.scale = in.readers[a.scale_shard].Find(a.scale_name);
      }
      actions.push_back(a);
      ++plan.total_tensors;
    }
  }
  return plan;
}

json QuantizationConfig(const CalibrateOptions& opts, const Plan& plan, bool static_activations) {
  json qc = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", static_activations ? "static" : "dynamic"}};
  if (opts.weights.granularity == WeightGranularity::kBlock) {
    qc["weight_block_size"] = {kernels::kTile, kernels::kTile};
  } else {
    qc["weight_granularity"] = GranularityName(opts.weights.granularity);  // fp8d's own key
  }
  if (opts.weights.scale_format == kernels::ScaleFormat::kUe8m0) qc["scale_fmt"] = "ue8m0";
  if (!plan.not_converted.empty()) {
    qc["ignored_layers"] = plan.not_converted;           // vLLM's name
    qc["modules_to_not_convert"] = plan.not_converted;   // transformers' name
  }
  return qc;
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

}  // namespace

StatusOr<json> RunCalibration(const CalibrateOptions& opts, const RunControls& controls) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  FP8_ASSIGN_OR_RETURN(ModelInput in, OpenModelInput(opts.input));

  const fs::path out(opts.output_dir);
  const fs::path staging(opts.output_dir + ".partial");
  const fs::path state_dir = staging / kStateDir;
  const json fingerprint = {{"spec", opts.canonical}, {"input", in.Fingerprint()}};

  std::error_code ec;
  if (fs::exists(out, ec)) {
    // A retry of an attempt that finished but died before reporting `done`: nothing to do.
    FP8_ASSIGN_OR_RETURN(auto done, ReadJsonIfExists(out / kReportJson));
    if (done && done->value("fingerprint", json()) == fingerprint) {
      json summary = (*done)["summary"];
      summary["already_complete"] = true;
      return summary;
    }
    if (!fs::is_directory(out) || !fs::is_empty(out))
      return FailedPreconditionError("output_dir: " + opts.output_dir +
                                     " already exists and is not empty; refusing to overwrite it");
  }
  const fs::path in_dir = fs::weakly_canonical(in.dir, ec);
  const fs::path out_abs = fs::weakly_canonical(out, ec);
  if (in_dir == out_abs) return FailedPreconditionError("output_dir: the same directory as the input");

  FP8_ASSIGN_OR_RETURN(Plan plan, opts.direction == Direction::kQuantize ? PlanQuantize(in, opts) : PlanDequantize(in, opts.input));
  for (const json& w : plan.unaligned)
    std::fprintf(stderr, "fp8-worker calibrate: warning: %s\n", w["message"].get<std::string>().c_str());
  // CUDA when this build has it and a GPU is visible (spec field backend), the CPU otherwise.
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<WeightConverter> converter, MakeWeightConverter(opts.backend));
  std::unique_ptr<GptCalibration> gpt;
  double activation_seconds = 0;  // forward passes, not weight conversion: reported apart
  if (!opts.activations.data.empty()) {
    const double t0 = elapsed();
    FP8_ASSIGN_OR_RETURN(gpt, StartGptCalibration(in, opts.activations));
    FP8_RETURN_IF_ERROR(AddInputScales(in, gpt->activations, &plan));
    activation_seconds = elapsed() - t0;
  }

  // Staging: resume only when the spec and the input are exactly those of the earlier attempt.
  FP8_ASSIGN_OR_RETURN(auto state, ReadJsonIfExists(state_dir / kStateFile));
  const bool resume = state && *state == fingerprint;
  if (!resume) {
    fs::remove_all(staging, ec);
    if (ec) return UnavailableError(staging.string() + ": cannot remove stale staging dir: " + ec.message());
    fs::create_directories(state_dir, ec);
    if (ec) return UnavailableError(state_dir.string() + ": cannot create: " + ec.message());
    FP8_RETURN_IF_ERROR(WriteJson(state_dir / kStateFile, fingerprint));
  }

  // Everything below writes only into the staging dir. A permanent (data) error removes it:
  // a restart could not get further, and nothing half-done should linger next to the output.
  auto result = [&]() -> StatusOr<json> {
    std::vector<TensorReport> reports;
    json weight_map = json::object();
    uint64_t total_size = 0, bytes_this_run = 0, bytes_done = 0;
    int64_t tensors_done = 0, shards_skipped = 0, shards_processed = 0, converted = 0;
    for (size_t s = 0; s < in.shards.size(); ++s) {
      const std::string& shard = in.shards[s];
      const auto& reader = in.readers[s];
      const auto& actions = plan.shards[s];
      const fs::path dst = staging / shard;
      const fs::path marker = state_dir / (shard + ".json");

      ProgressUpdate pu;
      pu.total_steps = plan.total_tensors;
      pu.shard = shard;
      pu.bytes_total = in.total_bytes;
      if (resume && fs::exists(dst)) {
        FP8_ASSIGN_OR_RETURN(auto done, ReadJsonIfExists(marker));
        if (done && done->value("shard", "") == shard) {
          for (const auto& j : (*done)["tensors"]) reports.push_back(TensorReport::FromJson(j));
          for (auto it = (*done)["weight_map"].begin(); it != (*done)["weight_map"].end(); ++it) weight_map[it.key()] = shard;
          total_size += (*done)["data_bytes"].get<uint64_t>();
          converted += (*done)["converted"].get<int64_t>();
          tensors_done += static_cast<int64_t>(actions.size());
          bytes_done += reader.file_size();
          ++shards_skipped;
          pu.step = tensors_done;
          pu.skipped = true;
          pu.bytes_done = bytes_done;
          pu.elapsed_seconds = elapsed();
          if (controls.on_progress) controls.on_progress(pu);
          continue;
        }
      }

      std::vector<TensorInfo> infos;
      for (const auto& a : actions) {
        const TensorInfo& t = *a.tensor;
        switch (a.kind) {
          case Action::kCopy: infos.push_back({t.name, t.dtype, t.shape}); break;
          case Action::kQuantize:
            infos.push_back({t.name, DType::F8_E4M3, t.shape});
            infos.push_back({a.scale_name, DType::F32, ScaleShape(opts.weights.granularity, t.shape[0], t.shape[1], IsConv1DInOut(t.name))});
            if (!a.input_scale_name.empty()) infos.push_back({a.input_scale_name, DType::F32, {}});  // a scalar
            break;
          case Action::kDequantize: infos.push_back({t.name, DType::BF16, t.shape}); break;
          case Action::kDrop: break;
        }
      }
      FP8_ASSIGN_OR_RETURN(safetensors::Writer writer, safetensors::Writer::Create(dst.string(), infos, reader.metadata()));
      std::vector<TensorReport> shard_reports;
      int64_t shard_converted = 0;
      for (const auto& a : actions) {
        if (controls.stop_requested && controls.stop_requested())
          return AbortedError("stopped on request before tensor \"" + a.tensor->name + "\" of " + shard + "; " +
                              std::to_string(s) + " of " + std::to_string(in.shards.size()) +
                              " shards are complete and will be kept by a restart");
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
            FP8_ASSIGN_OR_RETURN(rep, converter->Quantize(reader, t, opts.weights, a.scale_name, writer));
            if (!a.input_scale_name.empty())
              FP8_RETURN_IF_ERROR(writer.Write(a.input_scale_name, &a.input_scale, sizeof(float)));
            ++shard_converted;
            break;
          }
          case Action::kDequantize:
            FP8_RETURN_IF_ERROR(converter->Dequantize(reader, t, *a.scale, in.readers[a.scale_shard], writer));
            rep.name = t.name;
            rep.dtype = safetensors::DTypeName(t.dtype);
            rep.shape = t.shape;
            rep.bytes_in = t.nbytes();
            rep.bytes_out = t.nbytes() * 2;
            ++shard_converted;
            break;
          case Action::kDrop:
            break;
        }
        bytes_done += t.nbytes();
        bytes_this_run += t.nbytes();
        ++tensors_done;
        if (a.kind != Action::kDrop) {
          rep.shard = shard;
          shard_reports.push_back(rep);
        }
        pu.step = tensors_done;
        pu.tensor = t.name;
        pu.bytes_done = bytes_done;
        pu.elapsed_seconds = elapsed();
        if (controls.on_progress) controls.on_progress(pu);
      }
      FP8_RETURN_IF_ERROR(writer.Commit());

      json shard_map = json::object();
      uint64_t data_bytes = 0;
      for (const auto& t : writer.tensors()) {
        shard_map[t.name] = shard;
        data_bytes += t.nbytes();
      }
      json reps = json::array();
      for (const auto& r : shard_reports) reps.push_back(r.ToJson());
      FP8_RETURN_IF_ERROR(WriteJson(marker, {{"shard", shard}, {"tensors", reps}, {"weight_map", shard_map},
                                             {"data_bytes", data_bytes}, {"converted", shard_converted}}));
      for (auto& r : shard_reports) reports.push_back(std::move(r));
      for (auto it = shard_map.begin(); it != shard_map.end(); ++it) weight_map[it.key()] = shard;
      total_size += data_bytes;
      converted += shard_converted;
      ++shards_processed;
      if (controls.max_shards >= 0 && shards_processed >= controls.max_shards && s + 1 < in.shards.size())
        return AbortedError("stopped after " + std::to_string(shards_processed) + " shard(s) (--max-shards); " +
                            "finished shards are kept for the restart");
    }

    // Index, config, other files, reports: then the directory becomes visible in one rename.
    json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    FP8_RETURN_IF_ERROR(WriteJson(staging / kIndexFile, index));
    json config = in.config.value_or(json::object());
    if (opts.direction == Direction::kQuantize) {
      config["quantization_config"] = QuantizationConfig(opts, plan, gpt != nullptr);
    } else {
      config.erase("quantization_config");
    }
    FP8_RETURN_IF_ERROR(WriteJson(staging / kConfigFile, config));
    for (const auto& name : in.other_files) FP8_RETURN_IF_ERROR(CopyFileDurably(fs::path(in.dir) / name, staging / name));

    const double seconds = elapsed();
    double min_snr = std::numeric_limits<double>::infinity(), max_rel = 0, max_sat = 0;
    int64_t quantized = 0, copied = 0;
    for (const auto& r : reports) {
      if (r.quantized) {
        ++quantized;
        min_snr = std::min(min_snr, r.snr_db);
        max_rel = std::max(max_rel, r.rel_error);
        max_sat = std::max(max_sat, r.frac_saturated);
      } else {
        ++copied;
      }
    }
    json summary = {
        {"direction", opts.direction == Direction::kQuantize ? "quantize" : "dequantize"},
        {"output_dir", opts.output_dir},
        {"shards", in.shards.size()},
        {"shards_skipped", shards_skipped},
        {"tensors_converted", converted},
        {"tensors_copied", opts.direction == Direction::kQuantize ? copied : static_cast<int64_t>(reports.size()) - converted},
        {"bytes_in", in.total_bytes},
        {"bytes_out", total_size},
        {"seconds", seconds},
        // Weight conversion only: the activation forward passes are activation_calibration_seconds.
        {"input_gb_per_sec", seconds - activation_seconds > 0 ? bytes_this_run / (seconds - activation_seconds) / 1e9 : 0.0},
        {"backend", converter->backend()},
    };
    if (opts.direction == Direction::kQuantize) {
      summary["granularity"] = GranularityName(opts.weights.granularity);
      summary["scale_format"] = opts.weights.scale_format == kernels::ScaleFormat::kUe8m0 ? "ue8m0" : "fp32";
      summary["min_snr_db"] = std::isfinite(min_snr) ? json(min_snr) : json(nullptr);
      summary["max_rel_error"] = max_rel;
      summary["max_frac_saturated"] = max_sat;
    }
    if (opts.direction == Direction::kQuantize) summary["unaligned_tensors"] = plan.unaligned.size();
    json report = {{"fingerprint", fingerprint}, {"summary", summary}, {"tensors", json::array()}};
    if (!plan.unaligned.empty()) report["warnings"] = plan.unaligned;
    for (const auto& r : reports) report["tensors"].push_back(r.ToJson());
    std::string warnings;
    for (const json& w : plan.unaligned) warnings += "warning: " + w["message"].get<std::string>() + "\n";
    std::string table = FormatReportTable(reports, summary) + warnings;
    if (gpt) {
      // Only the layers that got an input_scale (a user's exclude may have kept some in BF16).
      ActivationCalibration written = gpt->activations;
      std::erase_if(written.layers, [&](const ActivationLayerStats& l) {
        return !weight_map.contains(l.layer + kInputScaleSuffix) &&
               !weight_map.contains(std::string(kHfPrefix) + l.layer + kInputScaleSuffix);
      });
      const double t0 = elapsed();
      FP8_ASSIGN_OR_RETURN(EvalLossReport eval,
                           EvaluateLossBeforeAfter(*gpt->model, gpt->data, gpt->activations.num_samples,
                                                   staging.string(), weight_map, &written));
      summary["activation_calibration_seconds"] = activation_seconds;
      summary["eval_seconds"] = elapsed() - t0;
      summary["activation_scheme"] = "static";
      summary["activation_method"] = written.method;
      summary["eval_loss_bf16"] = eval.loss_bf16;
      summary["eval_loss_fp8_weights"] = eval.loss_fp8_weights;
      summary["eval_rel_diff_fp8_weights"] = eval.rel_diff_fp8_weights;
      summary["eval_loss_fp8_static"] = eval.loss_fp8_static;
      summary["eval_rel_diff_fp8_static"] = eval.rel_diff_fp8_static;
      report["summary"] = summary;
      report["activations"] = written.ToJson();
      report["eval"] = eval.ToJson();
      table = FormatReportTable(reports, summary) + warnings + FormatActivationTable(written) + FormatEvalTable(eval);
    }
    FP8_RETURN_IF_ERROR(WriteJson(staging / kReportJson, report));
    FP8_RETURN_IF_ERROR(safetensors::WriteFileAtomically((staging / kReportText).string(), table));

    fs::remove_all(state_dir, ec);
    if (ec) return UnavailableError(state_dir.string() + ": cannot remove: " + ec.message());
    FP8_RETURN_IF_ERROR(safetensors::FsyncParentDir((staging / kReportJson).string()));
    if (fs::exists(out)) fs::remove(out, ec);  // an empty directory the caller created
    fs::rename(staging, out, ec);
    if (ec) return UnavailableError(out.string() + ": cannot rename the staging dir into place: " + ec.message());
    FP8_RETURN_IF_ERROR(safetensors::FsyncParentDir(out.string()));
    return summary;
  }();
  if (!result.ok()) {
    const StatusCode c = result.status().code();
    if (c == StatusCode::kInvalidArgument || c == StatusCode::kDataLoss || c == StatusCode::kNotFound ||
        c == StatusCode::kOutOfRange)
      fs::remove_all(staging, ec);
  }
  return result;
}

}  // namespace fp8::calibrate
