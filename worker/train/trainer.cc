#include "worker/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "worker/data/shards.h"
#include "worker/train/checkpoint.h"
#include "worker/train/hf_gpt2.h"
#include "worker/train/model.h"
#include "worker/train/optimizer.h"

namespace fp8::train {
namespace {

using fp8::worker::EventWriter;
using Clock = std::chrono::steady_clock;

constexpr size_t kLossHistoryCap = 100000;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Fail(EventWriter& ev, const char* cls, const std::string& msg, int code, TrainResult* r) {
  std::fprintf(stderr, "fp8-worker: %s: %s\n", cls, msg.c_str());
  ev.Emit("error", {{"class", cls}, {"message", msg}});
  r->exit_code = code;
  return code;
}

class Loop {
 public:
  Loop(const TrainSpec& spec, const TrainOptions& opt, Collective& coll, EventWriter& ev,
       const ModelSource* init)
      : spec_(spec), opt_(opt), coll_(coll), ev_(ev), init_(init), model_(spec.model, spec.precision),
        adam_(spec.training, spec.precision.bf16_moments, model_.tensors(), model_.num_params()) {}

  TrainResult Run();

 private:
  int Setup();
  void FillBatch(uint64_t seed, uint64_t first_sample, int count, const data::TokenDataset& ds);
  StatusOr<double> Evaluate();
  nlohmann::json State(int64_t step) const;
  Status Save(int64_t step);
  void ReportProgress(int64_t step, double loss, double lr, double grad_norm);

  const TrainSpec& spec_;
  const TrainOptions& opt_;
  Collective& coll_;
  EventWriter& ev_;
  const ModelSource* init_;  // train.init_from, resolved; null: random init
  GptModel model_;
  AdamW adam_;
  std::optional<data::TokenDataset> train_, val_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<std::pair<int64_t, double>> loss_history_;
  TrainResult result_;
  int64_t step_ = 0;
  std::string checkpoint_dir_;
  Clock::time_point t_start_, t_window_;
  int64_t window_start_step_ = 0;
};

void Loop::FillBatch(uint64_t seed, uint64_t first_sample, int count, const data::TokenDataset& ds) {
  const int t = spec_.model.seq_len;
  inputs_.resize(static_cast<size_t>(count) * t);
  targets_.resize(inputs_.size());
  for (int j = 0; j < count; ++j)
    ds.Sample(seed, first_sample + static_cast<uint64_t>(j), inputs_.data() + j * t, targets_.data() + j * t);
}

int Loop::Setup() {
  const auto& m = spec_.model;
  // With init_from the vocabulary is the loaded model's: say so when the data does not fit it.
  const std::string vocab_origin =
      init_ ? " (vocab_size " + std::to_string(m.vocab_size) + " is init_from's, " + init_->config_path + ")" : "";
  auto train = data::TokenDataset::Load(spec_.data.train, m.seq_len, m.vocab_size);
  if (!train.ok())
    return Fail(ev_, "DATA_ERROR", "data.train: " + train.status().message() + vocab_origin, worker::kExitBadData, &result_);
  train_ = std::move(train).value();
  if (!spec_.data.val.empty()) {
    auto val = data::TokenDataset::Load(spec_.data.val, m.seq_len, m.vocab_size);
    if (!val.ok())
      return Fail(ev_, "DATA_ERROR", "data.val: " + val.status().message() + vocab_origin, worker::kExitBadData, &result_);
    val_ = std::move(val).value();
  }
  checkpoint_dir_ = opt_.checkpoint_dir.empty()
                        ? (std::filesystem::path(spec_.output_dir) / "checkpoints").string()
                        : opt_.checkpoint_dir;
  model_.InitWeights(static_cast<uint64_t>(spec_.training.seed));
  bool resumed = false;
  if (!opt_.resume_from.empty()) {
    auto dir = FindCheckpoint(opt_.resume_from);
    if (!dir.ok()) {
      // A retry whose predecessor never saved: nothing to resume, start from scratch.
      std::fprintf(stderr, "fp8-worker: no checkpoint to resume from (%s); starting at step 0\n",
                   dir.status().message().c_str());
    } else {
      auto state = LoadCheckpoint(*dir, &model_, &adam_);
      if (!state.ok())
        return Fail(ev_, "DATA_ERROR", "resume from " + *dir + ": " + state.status().message(), worker::kExitBadData, &result_);
      step_ = (*state)["step"].get<int64_t>();
      if (state->contains("loss_history"))
        for (const auto& e : (*state)["loss_history"]) loss_history_.emplace_back(e[0].get<int64_t>(), e[1].get<double>());
      std::fprintf(stderr, "fp8-worker: resumed from %s at step %lld\n", dir->c_str(), static_cast<long long>(step_));
      resumed = true;
    }
  }
  // A retry resumes from its own checkpoint; init_from is only where a fresh run starts. The
  // FP8 scaling state starts empty, so the first step's casts are scaled by the loaded
  // weights' own amaxes (LinearPrecision's first cast).
  if (!resumed && init_) {
    if (Status s = LoadModelWeights(*init_, &model_); !s.ok())
      return Fail(ev_, "DATA_ERROR", "init_from: " + s.message(), worker::kExitBadData, &result_);
    std::fprintf(stderr, "fp8-worker: initialized from %s\n", init_->dir.c_str());
  }
  if (coll_.rank() == 0) {
    // An output dir that cannot be written fails now, as a bad spec, not after the first
    // save_steps steps of work and then again on every retry. It comes after the inputs are
    // checked, so a bad input writes nothing.
    if (Status st = PrepareCheckpointDir(checkpoint_dir_); !st.ok()) {
      const bool permanent = st.code() == StatusCode::kInvalidArgument;
      return Fail(ev_, permanent ? "INVALID_SPEC" : "INTERNAL_ERROR", "output_dir: " + st.message(),
                  permanent ? worker::kExitInvalidSpec : worker::kExitTemporary, &result_);
    }
  }
  result_.start_step = step_;
  return 0;
}

StatusOr<double> Loop::Evaluate() {
  // Sequences i ≡ rank (mod world) of a fixed eval set; sums all-reduced, so every rank agrees.
  const int b = spec_.training.per_device_train_batch_size;
  double sum = 0;
  int count = 0;
  std::vector<int> mine;
  for (int i = coll_.rank(); i < kEvalSequences; i += coll_.world_size()) mine.push_back(i);
  for (size_t i = 0; i < mine.size(); i += static_cast<size_t>(b)) {
    const int n = static_cast<int>(std::min(mine.size() - i, static_cast<size_t>(b)));
    // Consecutive in `mine` are `world` apart; sample them one at a time into the batch.
    const int t = spec_.model.seq_len;
    inputs_.resize(static_cast<size_t>(n) * t);
    targets_.resize(inputs_.size());
    for (int j = 0; j < n; ++j)
      val_->Sample(static_cast<uint64_t>(spec_.training.seed) ^ kEvalStream, static_cast<uint64_t>(mine[i + static_cast<size_t>(j)]),
                   inputs_.data() + j * t, targets_.data() + j * t);
    sum += model_.Forward(inputs_.data(), targets_.data(), n, /*training=*/false) * n;
    count += n;
  }
  float buf[2] = {static_cast<float>(sum), static_cast<float>(count)};
  FP8_RETURN_IF_ERROR(coll_.AllReduceSum(buf, 2));
  return static_cast<double>(buf[0]) / static_cast<double>(buf[1]);
}

nlohmann::json Loop::State(int64_t step) const {
  const int64_t global_batch = static_cast<int64_t>(coll_.world_size()) *
                               spec_.training.per_device_train_batch_size * spec_.training.gradient_accumulation_steps;
  nlohmann::json hist = nlohmann::json::array();
  for (const auto& [s, l] : loss_history_) hist.push_back({s, l});
  return {
      {"step", step},
      {"rng", {{"seed", spec_.training.seed}, {"sampler", "splitmix64(seed, global sample index)"}}},
      {"data", {{"samples_seen", step * global_batch}, {"global_batch", global_batch},
                {"world_size", coll_.world_size()}}},
      {"fp8_scaling", model_.PrecisionState()},
      {"loss_history", hist},
      {"spec", SpecToJson(spec_)},
  };
}

Status Loop::Save(int64_t step) {
  if (coll_.rank() != 0) return OkStatus();
  FP8_ASSIGN_OR_RETURN(SavedCheckpoint saved,
                       SaveCheckpoint(checkpoint_dir_, step, model_, adam_, State(step), spec_.training.save_total_limit));
  ev_.Emit("checkpoint", {{"step", step}, {"path", saved.path}, {"checksum", saved.checksum}});
  std::fprintf(stderr, "fp8-worker: checkpoint step %lld → %s\n", static_cast<long long>(step), saved.path.c_str());
  result_.last_checkpoint = saved.path;
  return OkStatus();
}

void Loop::ReportProgress(int64_t step, double loss, double lr, double grad_norm) {
  const auto now = Clock::now();
  const auto& t = spec_.training;
  const double tokens = static_cast<double>(step - window_start_step_) * coll_.world_size() *
                        t.per_device_train_batch_size * t.gradient_accumulation_steps * spec_.model.seq_len;
  const double secs = std::max(1e-9, Seconds(t_window_, now));
  const double tps = tokens / secs;
  const double eta = static_cast<double>(t.max_steps - step) * secs / std::max<int64_t>(1, step - window_start_step_);
  nlohmann::json fields = {{"step", step}, {"total_steps", t.max_steps}, {"loss", loss}, {"lr", lr},
                           {"grad_norm", grad_norm}, {"tokens_per_sec", tps}, {"eta_seconds", eta}};
  // This rank's casts of the step just done (rank 0 reports; the amaxes are reduced anyway).
  if (const Fp8CastStats fp8 = model_.TakeFp8CastStats(); fp8.elements > 0) {
    fields["fp8_amax_max"] = fp8.amax_max;
    fields["fp8_saturation_fraction"] = static_cast<double>(fp8.saturated) / static_cast<double>(fp8.elements);
  }
  ev_.Emit("progress", fields);
  std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.3g  grad_norm %.3f  %.0f tok/s  eta %.0fs%s",
               opt_.tty_progress ? "\r\033[K" : "", static_cast<long long>(step), static_cast<long long>(t.max_steps),
               loss, lr, grad_norm, tps, eta, opt_.tty_progress ? "" : "\n");
  t_window_ = now;
  window_start_step_ = step;
}

TrainResult Loop::Run() {
  if (Setup() != 0) return result_;
  const auto& t = spec_.training;
  const int rank = coll_.rank(), world = coll_.world_size();
  ev_.Emit("started", {{"rank", rank}, {"world_size", world}, {"pid", static_cast<int64_t>(::getpid())}, {"step", step_},
                       {"recipe", RecipeName(spec_.precision.recipe)}, {"num_params", model_.num_params()}});
  std::fprintf(stderr, "fp8-worker: rank %d/%d, %lld parameters, recipe %s, steps %lld..%lld\n", rank, world,
               static_cast<long long>(model_.num_params()), RecipeName(spec_.precision.recipe),
               static_cast<long long>(step_), static_cast<long long>(t.max_steps));
  if (opt_.heartbeat_ms > 0) ev_.StartHeartbeat(opt_.heartbeat_ms);
  t_start_ = t_window_ = Clock::now();
  window_start_step_ = step_;

  const int b = t.per_device_train_batch_size, accum = t.gradient_accumulation_steps;
  const uint64_t global_batch = static_cast<uint64_t>(world) * b * accum;
  const float loss_scale = 1.0f / static_cast<float>(accum * world);
  model_.DeferScalingUpdates(world > 1);
  double last_loss = NAN;
  bool stop = false;
  while (step_ < t.max_steps && !stop) {
    // Progress reports the FP8 casts of its own step only.
    model_.TakeFp8CastStats();
    model_.ZeroGrad();
    double loss_sum = 0;
    for (int micro = 0; micro < accum; ++micro) {
      // Global sample indices: a function of the step and the rank's slice, not of the layout,
      // so 1 rank × 2B sees exactly the sequences of 2 ranks × B.
      const uint64_t first = static_cast<uint64_t>(step_) * global_batch + static_cast<uint64_t>(rank) * b * accum +
                             static_cast<uint64_t>(micro) * b;
      FillBatch(static_cast<uint64_t>(t.seed), first, b, *train_);
      loss_sum += model_.Forward(inputs_.data(), targets_.data(), b);
      model_.Backward(loss_scale);
      // fp8-tensorwise: every rank's histories take the same (max-reduced) amaxes. (One rank:
      // Backward has already fed them in.)
      if (std::vector<float> amax = world > 1 ? model_.PendingAmaxes() : std::vector<float>(); !amax.empty()) {
        if (Status s = coll_.AllReduceMax(amax.data(), amax.size()); !s.ok()) {
          Fail(ev_, "INTERNAL_ERROR", s.message(), worker::kExitTemporary, &result_);
          return result_;
        }
        model_.ApplyPendingAmaxes(amax);
      }
    }
    // Ranks agree on the loss and on stopping through the same all-reduce.
    const bool stop_here = worker::StopRequested().load() || (opt_.stop_after_step > 0 && step_ + 1 >= opt_.stop_after_step);
    float scalars[2] = {static_cast<float>(loss_sum / accum), stop_here ? 1.0f : 0.0f};
    double loss = loss_sum / accum;
    if (world > 1) {
      Status s = coll_.AllReduceSum(model_.grads().data(), model_.grads().size());
      if (s.ok()) s = coll_.AllReduceSum(scalars, 2);
      if (!s.ok()) {
        Fail(ev_, "INTERNAL_ERROR", s.message(), worker::kExitTemporary, &result_);
        return result_;
      }
      loss = static_cast<double>(scalars[0]) / world;
    }
    stop = scalars[1] > 0;
    if (!std::isfinite(loss)) {
      Fail(ev_, "NUMERIC", "loss is " + std::to_string(loss) + " at step " + std::to_string(step_ + 1),
           worker::kExitTemporary, &result_);
      return result_;
    }
    const double grad_norm = GlobalNorm(model_.grads().data(), static_cast<int64_t>(model_.grads().size()));
    if (t.max_grad_norm > 0 && grad_norm > t.max_grad_norm) {
      const float c = static_cast<float>(t.max_grad_norm / (grad_norm + 1e-6));
      for (float& g : model_.grads()) g *= c;
    }
    const double lr = LearningRateAt(t, step_);
    adam_.Step(model_.params().data(), model_.grads().data(), lr, step_ + 1);
    ++step_;
    last_loss = loss;
    result_.losses.push_back(loss);
    loss_history_.emplace_back(step_, loss);
    if (loss_history_.size() > kLossHistoryCap) loss_history_.erase(loss_history_.begin());

    if (step_ % t.logging_steps == 0 || step_ == t.max_steps || stop) ReportProgress(step_, loss, lr, grad_norm);
    if (val_ && (step_ % t.eval_steps == 0 || step_ == t.max_steps)) {
      auto ev = Evaluate();
      if (!ev.ok()) {
        Fail(ev_, "INTERNAL_ERROR", ev.status().message(), worker::kExitTemporary, &result_);
        return result_;
      }
      result_.eval_loss = *ev;
      ev_.Emit("metric", {{"name", "eval_loss"}, {"value", *ev}, {"step", step_}});
      std::fprintf(stderr, "%seval_loss %.4f at step %lld\n", opt_.tty_progress ? "\n" : "", *ev,
                   static_cast<long long>(step_));
    }
    if (step_ % t.save_steps == 0 || step_ == t.max_steps || stop) {
      if (Status s = Save(step_); !s.ok()) {
        Fail(ev_, "INTERNAL_ERROR", "checkpoint: " + s.message(), worker::kExitInternal, &result_);
        return result_;
      }
    }
  }
  if (opt_.tty_progress) std::fputc('\n', stderr);
  result_.steps_done = step_;
  result_.interrupted = stop && step_ < t.max_steps;
  const double secs = Seconds(t_start_, Clock::now());
  nlohmann::json res = {{"final_loss", last_loss}, {"steps", step_},
                        {"tokens", static_cast<int64_t>(global_batch) * spec_.model.seq_len * (step_ - result_.start_step)},
                        {"seconds", secs}, {"interrupted", result_.interrupted}};
  if (result_.eval_loss >= 0) res["eval_loss"] = result_.eval_loss;
  if (!result_.last_checkpoint.empty()) res["checkpoint"] = result_.last_checkpoint;
  if (spec_.precision.recipe == Recipe::kFp8Tensorwise) res["fp8_scaling_digest"] = ScalingStateDigest(model_.PrecisionState());
  if (spec_.training.export_hf && !result_.interrupted && rank == 0) {
    const std::string hf_dir = (std::filesystem::path(spec_.output_dir) / "hf").string();
    if (Status s = ExportHfGpt2(model_, hf_dir); !s.ok()) {
      Fail(ev_, "INTERNAL_ERROR", "training.export: " + s.message(), worker::kExitInternal, &result_);
      return result_;
    }
    res["export"] = std::filesystem::absolute(hf_dir).string();
    std::fprintf(stderr, "fp8-worker: exported the model (Hugging Face GPT-2) to %s\n", hf_dir.c_str());
  }
  ev_.StopHeartbeat();
  ev_.Emit("done", {{"result", res}});
  result_.exit_code = result_.interrupted ? worker::kExitTemporary : worker::kExitOk;
  std::fprintf(stderr, "fp8-worker: %s at step %lld, loss %.4f, %.1fs\n",
               result_.interrupted ? "interrupted" : "done", static_cast<long long>(step_), last_loss, secs);
  return result_;
}

}  // namespace

std::string ScalingStateDigest(const nlohmann::json& precision_state) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char ch : precision_state.dump()) h = (h ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

TrainResult RunTraining(const TrainSpec& spec, const TrainOptions& options, Collective& collective,
                        EventWriter& events) {
  // init_from decides the model's shape before the model exists; its weights load in Setup.
  std::optional<ModelSource> init;
  TrainSpec resolved = spec;
  if (!spec.init_from.empty()) {
    // A retry takes the shape from the checkpoint it resumes (init_from need not exist anymore).
    const bool resuming = !options.resume_from.empty() && FindCheckpoint(options.resume_from).ok();
    auto src = OpenModelSource(resuming ? options.resume_from : spec.init_from);
    if (!src.ok()) {
      TrainResult r;
      Fail(events, "DATA_ERROR", (resuming ? "resume from: " : "init_from: ") + src.status().message(),
           worker::kExitBadData, &r);
      return r;
    }
    resolved.model = src->config;
    if (!resuming) init = std::move(src).value();
    if (resolved.model.vocab_size > 65536) {
      TrainResult r;
      Fail(events, "DATA_ERROR", "init_from: " + init->config_path + ": vocab_size " +
           std::to_string(resolved.model.vocab_size) + " is more than llm.c shards' uint16 tokens hold", worker::kExitBadData, &r);
      return r;
    }
  }
  Loop loop(resolved, options, collective, events, init ? &*init : nullptr);
  TrainResult r = loop.Run();
  events.StopHeartbeat();
  return r;
}

}  // namespace fp8::train
