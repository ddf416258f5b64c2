// SPDX-License-Identifier: Apache-2.0
#include "worker/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "worker/data/shards.h"
#include "worker/data/tokenizer_files.h"
#include "worker/train/checkpoint.h"
#include "worker/train/hf_model.h"
#include "worker/train/tensorboard_writer.h"

namespace fp8::train {
namespace {

using fp8::worker::EventWriter;
using fp8::worker::WorkerEvent;
using Clock = std::chrono::steady_clock;

constexpr size_t kLossHistoryCap = 100000;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Fail(EventWriter& ev, WorkerEvent::ErrorClass cls, const std::string& msg, int code, TrainResult* r) {
  std::fprintf(stderr, "fp8-worker: %s: %s\n", WorkerEvent::ErrorClass_Name(cls).c_str(), msg.c_str());
  ev.Emit(worker::ErrorEvent(cls, msg));
  r->exit_code = code;
  return code;
}

class Loop {
 public:
  Loop(const TrainSpec& spec, const TrainOptions& opt, TrainBackend& backend, EventWriter& ev, const ModelSource* init)
      : spec_(spec), opt_(opt), be_(backend), ev_(ev), init_(init) {}

  TrainResult Run();

 private:
  int Fail(WorkerEvent::ErrorClass cls, const std::string& msg, int code) { return train::Fail(ev_, cls, msg, code, &result_); }
  // Unless `s` is ok: an INTERNAL_ERROR event, exit `code`, and true.
  bool Failed(const Status& s, int code = worker::kExitTemporary, const std::string& prefix = "") {
    if (!s.ok()) Fail(WorkerEvent::INTERNAL_ERROR, prefix + s.message(), code);
    return !s.ok();
  }
  int Setup();
  Status Step(double* loss, bool* stop, bool report);
  StatusOr<double> Evaluate();
  nlohmann::json State(int64_t step) const;
  Status Save(int64_t step);
  void ReportProgress(int64_t step, double loss, double lr, double grad_norm);
  int OpenTensorBoard();
  // training.report_to tensorboard (rank 0); a write that fails stops the curves, not the run.
  void WriteTensorBoard(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  bool ReportsAt(int64_t step) const {
    return step % spec_.training.logging_steps == 0 || step == spec_.training.max_steps;
  }

  const TrainSpec& spec_;
  const TrainOptions& opt_;
  TrainBackend& be_;
  EventWriter& ev_;
  const ModelSource* init_;  // train.init_from, resolved; null: random init
  std::optional<data::TokenDataset> train_, val_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<std::pair<int64_t, double>> loss_history_;
  TrainResult result_;
  int64_t step_ = 0;
  std::string checkpoint_dir_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0 with training.report_to tensorboard
  Clock::time_point t_start_, t_window_;
  int64_t window_start_step_ = 0;
};

int Loop::Setup() {
  const auto& m = spec_.model;
  // With init_from the vocabulary is the loaded model's: say so when the data does not fit it.
  const std::string vocab_origin =
      init_ ? " (vocab_size " + std::to_string(m.vocab_size) + " is init_from's, " + init_->config_path + ")" : "";
  auto train = data::TokenDataset::Load(spec_.data.train, m.seq_len, m.vocab_size);
  if (!train.ok()) return Fail(WorkerEvent::DATA_ERROR, "data.train: " + train.status().message() + vocab_origin, worker::kExitBadData);
  train_ = std::move(train).value();
  if (!spec_.data.val.empty()) {
    auto val = data::TokenDataset::Load(spec_.data.val, m.seq_len, m.vocab_size);
    if (!val.ok()) return Fail(WorkerEvent::DATA_ERROR, "data.val: " + val.status().message() + vocab_origin, worker::kExitBadData);
    val_ = std::move(val).value();
  }
  checkpoint_dir_ = opt_.checkpoint_dir.empty()
                        ? (std::filesystem::path(spec_.output_dir) / "checkpoints").string()
                        : opt_.checkpoint_dir;
  if (Status s = be_.Init(); !s.ok()) {
    const bool spec_error = s.code() == StatusCode::kInvalidArgument;
    return Fail(spec_error ? WorkerEvent::INVALID_SPEC : WorkerEvent::INTERNAL_ERROR, s.message(),
                spec_error ? worker::kExitInvalidSpec : worker::kExitTemporary);
  }
  be_.host().InitWeights(static_cast<uint64_t>(spec_.training.seed));
  nlohmann::json fp8_scaling;  // null: the checkpoint has none
  std::string resumed_dir;  // empty: a fresh start
  if (!opt_.resume_from.empty()) {
    auto dir = FindCheckpoint(opt_.resume_from);
    if (!dir.ok()) {
      // A retry whose predecessor never saved: nothing to resume, start from scratch.
      std::fprintf(stderr, "fp8-worker: no checkpoint to resume from (%s); starting at step 0\n",
                   dir.status().message().c_str());
    } else {
      auto state = LoadCheckpoint(*dir, &be_.host(), &be_.host_adam());
      if (!state.ok())
        return Fail(WorkerEvent::DATA_ERROR, "resume from " + *dir + ": " + state.status().message(), worker::kExitBadData);
      step_ = (*state)["step"].get<int64_t>();
      if (state->contains("loss_history"))
        for (const auto& e : (*state)["loss_history"]) loss_history_.emplace_back(e[0].get<int64_t>(), e[1].get<double>());
      if (state->contains("fp8_scaling")) fp8_scaling = (*state)["fp8_scaling"];
      std::fprintf(stderr, "fp8-worker: resumed from %s at step %lld\n", dir->c_str(), static_cast<long long>(step_));
      resumed_dir = *dir;
    }
  }
  // A retry resumes from its own checkpoint; init_from is only where a fresh run starts. The
  // FP8 scaling state starts empty, so the first step's casts are scaled by the loaded
  // weights' own amaxes (the first cast of a delayed scaling).
  if (resumed_dir.empty() && init_) {
    if (Status s = LoadModelWeights(*init_, &be_.host()); !s.ok())
      return Fail(WorkerEvent::DATA_ERROR, "init_from: " + s.message(), worker::kExitBadData);
    std::fprintf(stderr, "fp8-worker: initialized from %s\n", init_->dir.c_str());
  }
  if (be_.rank() == 0) {
    // An output dir that cannot be written fails now, as a bad spec, not after the first
    // save_steps steps of work and then again on every retry. It comes after the inputs are
    // checked, so a bad input writes nothing.
    if (Status st = PrepareCheckpointDir(checkpoint_dir_); !st.ok()) {
      const bool permanent = st.code() == StatusCode::kInvalidArgument;
      return Fail(permanent ? WorkerEvent::INVALID_SPEC : WorkerEvent::INTERNAL_ERROR, "output_dir: " + st.message(),
                  permanent ? worker::kExitInvalidSpec : worker::kExitTemporary);
    }
  }
  if (Status s = be_.Start(!resumed_dir.empty(), fp8_scaling); !s.ok()) {
    // The checkpoint's scaling state did not fit the model; anything else is the device's.
    if (!resumed_dir.empty() && (s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument))
      return Fail(WorkerEvent::DATA_ERROR, "resume from " + resumed_dir + ": " + s.message(), worker::kExitBadData);
    return Fail(WorkerEvent::INTERNAL_ERROR, s.message(), worker::kExitTemporary);
  }
  result_.start_step = step_;
  return OpenTensorBoard();
}

int Loop::OpenTensorBoard() {
  if (!spec_.training.report_to_tensorboard || be_.rank() != 0) return 0;
  char host[256] = "localhost";
  if (::gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "localhost");
  std::map<std::string, std::string> env;
  if (const char* job = std::getenv("FP8D_JOB")) env["FP8D_JOB"] = job;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  auto w = TensorBoardWriter::Open(TensorBoardRunDir(spec_.output_dir, env, host, now), host, now, step_ + 1);
  if (!w.ok()) return Fail(WorkerEvent::INTERNAL_ERROR, "training.report_to: " + w.status().message(), worker::kExitTemporary);
  tensorboard_ = std::move(w).value();
  std::fprintf(stderr, "fp8-worker: TensorBoard events → %s\n", tensorboard_->path().c_str());
  return 0;
}

void Loop::WriteTensorBoard(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  if (!tensorboard_) return;
  if (Status s = tensorboard_->WriteScalars(step, scalars); !s.ok()) {
    std::fprintf(stderr, "fp8-worker: training.report_to: %s; no more TensorBoard events this attempt\n",
                 s.message().c_str());
    tensorboard_.reset();
  }
}

Status Loop::Step(double* loss, bool* stop, bool report) {
  const auto& t = spec_.training;
  const int rank = be_.rank(), world = be_.world_size();
  const int b = t.per_device_train_batch_size, accum = t.gradient_accumulation_steps, seq = spec_.model.seq_len;
  const uint64_t global_batch = static_cast<uint64_t>(world) * b * accum;
  const float loss_scale = 1.0f / static_cast<float>(accum * world);
  FP8_RETURN_IF_ERROR(be_.BeginStep(report));
  double loss_sum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    // Global sample indices: a function of the step and the rank's slice, not of the layout,
    // so 1 rank × 2B sees exactly the sequences of 2 ranks × B.
    const uint64_t first = static_cast<uint64_t>(step_) * global_batch + static_cast<uint64_t>(rank) * b * accum +
                           static_cast<uint64_t>(micro) * b;
    inputs_.resize(static_cast<size_t>(b) * seq);
    targets_.resize(inputs_.size());
    for (int j = 0; j < b; ++j)
      train_->Sample(static_cast<uint64_t>(t.seed), first + static_cast<uint64_t>(j), inputs_.data() + j * seq, targets_.data() + j * seq);
    FP8_ASSIGN_OR_RETURN(const double l, be_.MicroStep(inputs_.data(), targets_.data(), b, loss_scale));
    loss_sum += l;
  }
  // Ranks agree on the loss and on stopping through the same all-reduce.
  *stop = worker::StopRequested().load() || (opt_.stop_after_step > 0 && step_ + 1 >= opt_.stop_after_step);
  *loss = loss_sum / accum;
  return be_.ReduceStep(loss, stop);
}

StatusOr<double> Loop::Evaluate() {
  // Sequences i ≡ rank (mod world) of a fixed eval set; sums all-reduced, so every rank agrees.
  const int b = spec_.training.per_device_train_batch_size, t = spec_.model.seq_len;
  double sum = 0;
  int count = 0;
  std::vector<int> mine;
  for (int i = be_.rank(); i < kEvalSequences; i += be_.world_size()) mine.push_back(i);
  // Experts spread over ranks exchange rows in every forward: then each rank runs as many
  // batches as rank 0 (which has the most sequences), a rank with fewer repeating its first
  // sequence in a batch whose loss it leaves out.
  const size_t per_batch = static_cast<size_t>(b);
  const size_t batches = (mine.size() + per_batch - 1) / per_batch;
  const size_t most = static_cast<size_t>((kEvalSequences + be_.world_size() - 1) / be_.world_size());
  const size_t lockstep_batches = opt_.expert_parallel > 1 ? (most + per_batch - 1) / per_batch : batches;
  for (size_t pad = batches; pad < lockstep_batches; ++pad) {
    inputs_.resize(static_cast<size_t>(t));
    targets_.resize(inputs_.size());
    val_->Sample(static_cast<uint64_t>(spec_.training.seed) ^ kEvalStream, static_cast<uint64_t>(mine.empty() ? 0 : mine[0]),
                 inputs_.data(), targets_.data());
    FP8_RETURN_IF_ERROR(be_.EvalLoss(inputs_.data(), targets_.data(), 1).status());
  }
  for (size_t i = 0; i < mine.size(); i += static_cast<size_t>(b)) {
    const int n = static_cast<int>(std::min(mine.size() - i, static_cast<size_t>(b)));
    // Consecutive in `mine` are `world` apart; sample them one at a time into the batch.
    inputs_.resize(static_cast<size_t>(n) * t);
    targets_.resize(inputs_.size());
    for (int j = 0; j < n; ++j)
      val_->Sample(static_cast<uint64_t>(spec_.training.seed) ^ kEvalStream, static_cast<uint64_t>(mine[i + static_cast<size_t>(j)]),
                   inputs_.data() + j * t, targets_.data() + j * t);
    FP8_ASSIGN_OR_RETURN(const double loss, be_.EvalLoss(inputs_.data(), targets_.data(), n));
    sum += loss * n;
    count += n;
  }
  double buf[2] = {sum, static_cast<double>(count)};
  FP8_RETURN_IF_ERROR(be_.AllReduceSum(buf, 2));
  return buf[0] / buf[1];
}

nlohmann::json Loop::State(int64_t step) const {
  const int64_t global_batch = static_cast<int64_t>(be_.world_size()) *
                               spec_.training.per_device_train_batch_size * spec_.training.gradient_accumulation_steps;
  nlohmann::json hist = nlohmann::json::array();
  for (const auto& [s, l] : loss_history_) hist.push_back({s, l});
  nlohmann::json state = {
      {"step", step},
      {"rng", {{"seed", spec_.training.seed}, {"sampler", "splitmix64(seed, global sample index)"}}},
      {"data", {{"samples_seen", step * global_batch}, {"global_batch", global_batch},
                {"world_size", be_.world_size()}}},
      {"fp8_scaling", be_.PrecisionState()},
      {"loss_history", hist},
      {"spec", SpecToJson(spec_)},
  };
  state.update(be_.Labels());
  return state;
}

Status Loop::Save(int64_t step) {
  if (be_.rank() != 0) return OkStatus();
  FP8_RETURN_IF_ERROR(be_.SyncHost());
  FP8_ASSIGN_OR_RETURN(SavedCheckpoint saved, SaveCheckpoint(checkpoint_dir_, step, be_.host(), be_.host_adam(), State(step),
                                                             spec_.training.save_total_limit));
  ev_.Emit(worker::CheckpointEvent(step, saved.path, saved.checksum));
  std::fprintf(stderr, "fp8-worker: checkpoint step %lld → %s\n", static_cast<long long>(step), saved.path.c_str());
  result_.last_checkpoint = saved.path;
  return OkStatus();
}

void Loop::ReportProgress(int64_t step, double loss, double lr, double grad_norm) {
  // This rank's casts of the step just done (rank 0 reports; the amaxes are reduced anyway).
  // Taken first: a device backend finishes the step's work there, so the window's time is real.
  const Fp8CastStats fp8 = be_.TakeFp8CastStats();
  const auto now = Clock::now();
  const auto& t = spec_.training;
  const double tokens = static_cast<double>(step - window_start_step_) * be_.world_size() *
                        t.per_device_train_batch_size * t.gradient_accumulation_steps * spec_.model.seq_len;
  const double secs = std::max(1e-9, Seconds(t_window_, now));
  const double tps = tokens / secs;
  const double eta = static_cast<double>(t.max_steps - step) * secs / std::max<int64_t>(1, step - window_start_step_);
  WorkerEvent event;
  WorkerEvent::Progress& progress = *event.mutable_progress();
  progress.set_step(step);
  progress.set_total_steps(t.max_steps);
  progress.set_loss(loss);
  progress.set_lr(lr);
  progress.set_grad_norm(grad_norm);
  progress.set_tokens_per_sec(tps);
  progress.set_eta_seconds(eta);
  if (fp8.elements > 0) {
    progress.set_fp8_amax_max(fp8.amax_max);
    progress.set_fp8_saturation_fraction(static_cast<double>(fp8.saturated) / static_cast<double>(fp8.elements));
  }
  if (const MoeRoutingStats moe = be_.RoutingStats(); moe.present) {
    progress.set_moe_load_min(moe.load_min);
    progress.set_moe_load_max(moe.load_max);
    progress.set_moe_load_cv(moe.load_cv);
    progress.set_moe_dropped_fraction(moe.dropped_fraction);
    progress.set_moe_aux_loss(moe.aux_loss);
  }
  char mfu_text[32] = "";
  if (be_.PeakFlops() > 0) {
    const double mfu = tps * TrainFlopsPerToken(spec_.model, be_.host().num_params()) / be_.world_size() / be_.PeakFlops();
    progress.set_mfu(mfu);
    std::snprintf(mfu_text, sizeof(mfu_text), "  mfu %.1f%%", 100 * mfu);
  }
  WriteTensorBoard(step, ProgressScalars(progress));
  ev_.Emit(std::move(event));
  std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.3g  grad_norm %.3f  %.0f tok/s%s  eta %.0fs%s",
               opt_.tty_progress ? "\r\033[K" : "", static_cast<long long>(step), static_cast<long long>(t.max_steps),
               loss, lr, grad_norm, tps, mfu_text, eta, opt_.tty_progress ? "" : "\n");
  t_window_ = now;
  window_start_step_ = step;
}

TrainResult Loop::Run() {
  if (Setup() != 0) return result_;
  const auto& t = spec_.training;
  const int rank = be_.rank(), world = be_.world_size();
  const int64_t num_params = be_.host().num_params();
  WorkerEvent started = worker::StartedEvent(rank, world, ::getpid(), step_);
  started.mutable_started()->set_recipe(RecipeName(spec_.precision.recipe));
  started.mutable_started()->set_num_params(num_params);
  started.mutable_started()->set_backend(be_.Labels().value("backend", ""));
  ev_.Emit(std::move(started));
  std::fprintf(stderr, "fp8-worker: %s rank %d/%d, %lld parameters, recipe %s, steps %lld..%lld\n",
               be_.Labels().value("backend", "cpu").c_str(), rank, world, static_cast<long long>(num_params),
               RecipeName(spec_.precision.recipe), static_cast<long long>(step_), static_cast<long long>(t.max_steps));
  if (opt_.heartbeat_ms > 0) ev_.StartHeartbeat(opt_.heartbeat_ms);
  t_start_ = t_window_ = Clock::now();
  window_start_step_ = step_;

  const uint64_t global_batch = static_cast<uint64_t>(world) * t.per_device_train_batch_size * t.gradient_accumulation_steps;
  double last_loss = NAN;
  bool stop = false;
  while (step_ < t.max_steps && !stop) {
    double loss = NAN;
    if (Failed(Step(&loss, &stop, ReportsAt(step_ + 1)))) return result_;
    if (!std::isfinite(loss)) {
      Fail(WorkerEvent::NUMERIC, "loss is " + std::to_string(loss) + " at step " + std::to_string(step_ + 1), worker::kExitTemporary);
      return result_;
    }
    const double lr = LearningRateAt(t, step_);
    auto grad_norm = be_.Update(lr, step_ + 1);
    if (Failed(grad_norm.status())) return result_;
    ++step_;
    last_loss = loss;
    result_.losses.push_back(loss);
    loss_history_.emplace_back(step_, loss);
    if (loss_history_.size() > kLossHistoryCap) loss_history_.erase(loss_history_.begin());

    if (ReportsAt(step_) || stop) ReportProgress(step_, loss, lr, *grad_norm);
    if (val_ && (step_ % t.eval_steps == 0 || step_ == t.max_steps)) {
      auto ev = Evaluate();
      if (Failed(ev.status())) return result_;
      result_.eval_loss = *ev;
      WriteTensorBoard(step_, {{"eval/loss", *ev}});
      ev_.Emit(worker::MetricEvent("eval_loss", *ev, step_));
      std::fprintf(stderr, "%seval_loss %.4f at step %lld\n", opt_.tty_progress ? "\n" : "", *ev,
                   static_cast<long long>(step_));
    }
    if ((step_ % t.save_steps == 0 || step_ == t.max_steps || stop) && Failed(Save(step_), worker::kExitInternal, "checkpoint: "))
      return result_;
  }
  if (opt_.tty_progress) std::fputc('\n', stderr);
  result_.steps_done = step_;
  result_.interrupted = stop && step_ < t.max_steps;
  const double secs = Seconds(t_start_, Clock::now());
  nlohmann::json res = {{"final_loss", last_loss}, {"steps", step_},
                        {"tokens", static_cast<int64_t>(global_batch) * spec_.model.seq_len * (step_ - result_.start_step)},
                        {"seconds", secs}, {"interrupted", result_.interrupted}};
  res.update(be_.Labels());
  be_.AddResultFields(&res);
  if (result_.eval_loss >= 0) res["eval_loss"] = result_.eval_loss;
  if (!result_.last_checkpoint.empty()) res["checkpoint"] = result_.last_checkpoint;
  if (spec_.precision.recipe == Recipe::kFp8Tensorwise) res["fp8_scaling_digest"] = ScalingStateDigest(be_.PrecisionState());
  if (spec_.training.export_hf && !result_.interrupted && rank == 0) {
    // The final step's Save (rank 0) left the trained weights in the host model.
    const std::string hf_dir = (std::filesystem::path(spec_.output_dir) / "hf").string();
    // The tokenizer recorded beside data.train's shards (prepare-data --tokenizer), if they share one.
    HfExportOptions export_options;
    std::string no_tokenizer;
    auto tokenizer = data::FindShardTokenizer(spec_.data.train, be_.host().config().vocab_size);
    if (!tokenizer.ok()) no_tokenizer = tokenizer.status().message();
    else if (tokenizer->files) export_options.tokenizer = std::move(tokenizer->files);
    else no_tokenizer = tokenizer->note;
    if (Failed(ExportHf(be_.host(), hf_dir, export_options), worker::kExitInternal, "training.export: ")) return result_;
    res["export"] = std::filesystem::absolute(hf_dir).string();
    std::fprintf(stderr, "fp8-worker: exported the model (Hugging Face %s) to %s\n",
                 HfLayoutOf(be_.host().config()).family.c_str(), hf_dir.c_str());
    if (export_options.tokenizer) {
      res["export_tokenizer"] = std::filesystem::absolute(export_options.tokenizer->dir).string();
      std::fprintf(stderr, "fp8-worker: with the tokenizer files of %s\n", export_options.tokenizer->dir.c_str());
    } else if (!no_tokenizer.empty()) {
      res["export_tokenizer_skipped"] = "data.train: " + no_tokenizer;
      std::fprintf(stderr, "fp8-worker: training.export: no tokenizer files: data.train: %s\n", no_tokenizer.c_str());
    }
  }
  // Stopped by a signal (not by the stop_after_step test knob): the step's checkpoint is
  // written (rank 0), so the daemon may resume the next attempt from it.
  const bool by_signal = result_.interrupted && !(opt_.stop_after_step > 0 && step_ >= opt_.stop_after_step);
  if (by_signal) ev_.Emit(worker::PreemptedEvent(step_, result_.last_checkpoint));
  ev_.StopHeartbeat();
  ev_.Emit(worker::DoneEvent(res));
  result_.exit_code = by_signal ? worker::kExitPreempted : result_.interrupted ? worker::kExitTemporary : worker::kExitOk;
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

double TrainFlopsPerToken(const ModelConfig& m, int64_t num_params) {
  double matmul_params = static_cast<double>(num_params);
  double attention_width = m.d_model;
  if (m.architecture == Architecture::kLlama) {
    attention_width = static_cast<double>(m.n_head) * m.head_dim;
    if (!m.tie_word_embeddings) matmul_params -= static_cast<double>(m.vocab_size) * m.d_model;
  }
  return 6.0 * matmul_params + 12.0 * m.n_layer * attention_width * m.seq_len;
}

TrainResult RunTraining(const TrainSpec& spec, const TrainOptions& options, const BackendFactory& make_backend,
                        EventWriter& events) {
  // init_from decides the model's shape before the model exists; its weights load in Setup.
  TrainResult r;
  auto bad_data = [&](const std::string& msg) {
    Fail(events, WorkerEvent::DATA_ERROR, msg, worker::kExitBadData, &r);
    return r;
  };
  std::optional<ModelSource> init;
  TrainSpec resolved = spec;
  if (!spec.init_from.empty()) {
    // A retry takes the shape from the checkpoint it resumes (init_from need not exist anymore).
    const bool resuming = !options.resume_from.empty() && FindCheckpoint(options.resume_from).ok();
    auto src = OpenModelSource(resuming ? options.resume_from : spec.init_from);
    if (!src.ok()) return bad_data((resuming ? "resume from: " : "init_from: ") + src.status().message());
    resolved.model = src->config;
    if (resolved.model.vocab_size > 262144)
      return bad_data("init_from: " + src->config_path + ": vocab_size " + std::to_string(resolved.model.vocab_size) +
                      " is more than 262144, the largest model.vocab_size a job may name");
    if (!resuming) init = std::move(src).value();
  }
  // The backend (a device, its memory) is released at the end of this statement.
  r = Loop(resolved, options, *make_backend(resolved), events, init ? &*init : nullptr).Run();
  events.StopHeartbeat();
  return r;
}

}  // namespace fp8::train
