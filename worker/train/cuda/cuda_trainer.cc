#include "worker/train/cuda/cuda_trainer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/data/shards.h"
#include "worker/train/checkpoint.h"
#include "worker/train/hf_gpt2.h"
#include "worker/train/cuda/cuda_model.h"
#include "worker/train/cuda/nccl_comm.h"
#include "worker/train/model.h"
#include "worker/train/optimizer.h"

namespace fp8::train::cuda {
namespace {

using fp8::worker::EventWriter;
using Clock = std::chrono::steady_clock;

// The same constants as trainer.cc, so eval sets and histories match the CPU backend.
constexpr uint64_t kEvalStream = 0xe7a1e7a1e7a1ULL;
constexpr int kEvalSequences = 32;
constexpr size_t kLossHistoryCap = 100000;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

class CudaLoop {
 public:
  CudaLoop(const TrainSpec& spec, const TrainOptions& opt, const CudaDistributed& dist, EventWriter& ev)
      : spec_(spec), opt_(opt), dist_(dist), ev_(ev), host_(spec.model, spec.precision) {}
  ~CudaLoop() {
    model_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }
  TrainResult Run();

 private:
  int Fail(const char* cls, const std::string& msg, int code) {
    std::fprintf(stderr, "fp8-worker: %s: %s\n", cls, msg.c_str());
    ev_.Emit("error", {{"class", cls}, {"message", msg}});
    result_.exit_code = code;
    return code;
  }
  int Setup();
  Status InitDevice();
  StatusOr<double> Evaluate();
  Status Save(int64_t step);
  Status Step(double* loss, double* grad_norm, double* lr, bool* stop);
  // Sums v[0..n) (n ≤ 2) over the ranks in place, through a device buffer allocated once.
  Status AllReduceHost(double* v, int n);
  nlohmann::json State(int64_t step) const;

  const TrainSpec& spec_;
  const TrainOptions& opt_;
  const CudaDistributed& dist_;
  EventWriter& ev_;
  GptModel host_;  // layout, initialisation and the checkpoint format
  std::unique_ptr<train::AdamW> host_adam_;
  std::unique_ptr<NcclComm> comm_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaGptModel> model_;
  DeviceBuffer<float> m_, v_;
  DeviceBuffer<double> norm_partial_, norm_, host_sums_;
  std::optional<data::TokenDataset> train_, val_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<std::pair<int64_t, double>> loss_history_;
  TrainResult result_;
  int64_t step_ = 0;
  std::string checkpoint_dir_;
};

Status CudaLoop::InitDevice() {
  int count = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&count));
  if (count < 1) return UnavailableError("no CUDA device");
  FP8_RETURN_IF_CUDA_ERROR(cudaSetDevice(dist_.rank % count));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FP8_ASSIGN_OR_RETURN(comm_, NcclComm::Create(dist_.rank, dist_.world_size, dist_.rendezvous_dir, dist_.timeout));
  FP8_ASSIGN_OR_RETURN(model_, CudaGptModel::Create(spec_.model, spec_.precision, host_.tensors(),
                                                    spec_.training.per_device_train_batch_size, stream_));
  if (dist_.world_size > 1)
    model_->SetAmaxReduce([comm = comm_.get()](float* amax, size_t n, cudaStream_t s) { return comm->AllReduceMax(amax, n, s); });
  const size_t n = static_cast<size_t>(host_.num_params());
  FP8_RETURN_IF_ERROR(m_.Allocate(n, "adam m"));
  FP8_RETURN_IF_ERROR(v_.Allocate(n, "adam v"));
  FP8_RETURN_IF_ERROR(norm_partial_.Allocate(1024, "norm partials"));
  FP8_RETURN_IF_ERROR(host_sums_.Allocate(2, "all-reduced scalars"));
  FP8_RETURN_IF_ERROR(norm_.Allocate(1, "norm"));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemset(m_.get(), 0, n * sizeof(float)));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemset(v_.get(), 0, n * sizeof(float)));
  return OkStatus();
}

int CudaLoop::Setup() {
  const auto& m = spec_.model;
  auto train = data::TokenDataset::Load(spec_.data.train, m.seq_len, m.vocab_size);
  if (!train.ok()) return Fail("DATA_ERROR", "data.train: " + train.status().message(), worker::kExitBadData);
  train_ = std::move(train).value();
  if (!spec_.data.val.empty()) {
    auto val = data::TokenDataset::Load(spec_.data.val, m.seq_len, m.vocab_size);
    if (!val.ok()) return Fail("DATA_ERROR", "data.val: " + val.status().message(), worker::kExitBadData);
    val_ = std::move(val).value();
  }
  checkpoint_dir_ = opt_.checkpoint_dir.empty() ? (std::filesystem::path(spec_.output_dir) / "checkpoints").string()
                                                : opt_.checkpoint_dir;
  if (Status s = InitDevice(); !s.ok()) {
    const bool spec_error = s.code() == StatusCode::kInvalidArgument;
    return Fail(spec_error ? "INVALID_SPEC" : "INTERNAL_ERROR", s.message(),
                spec_error ? worker::kExitInvalidSpec : worker::kExitTemporary);
  }
  host_adam_ = std::make_unique<train::AdamW>(spec_.training, spec_.precision.bf16_moments, host_.tensors(), host_.num_params());
  host_.InitWeights(static_cast<uint64_t>(spec_.training.seed));
  bool resumed = false;
  if (!opt_.resume_from.empty()) {
    auto dir = FindCheckpoint(opt_.resume_from);
    if (!dir.ok()) {
      std::fprintf(stderr, "fp8-worker: no checkpoint to resume from (%s); starting at step 0\n", dir.status().message().c_str());
    } else {
      resumed = true;
      auto state = LoadCheckpoint(*dir, &host_, host_adam_.get());
      if (!state.ok()) return Fail("DATA_ERROR", "resume from " + *dir + ": " + state.status().message(), worker::kExitBadData);
      step_ = (*state)["step"].get<int64_t>();
      if (state->contains("loss_history"))
        for (const auto& e : (*state)["loss_history"]) loss_history_.emplace_back(e[0].get<int64_t>(), e[1].get<double>());
      Status s = state->contains("fp8_scaling") ? model_->RestorePrecisionState((*state)["fp8_scaling"]) : OkStatus();
      const std::vector<float> mm = host_adam_->m(), vv = host_adam_->v();
      if (s.ok() && cudaMemcpy(m_.get(), mm.data(), mm.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        s = InternalError("upload of adam m failed");
      if (s.ok() && cudaMemcpy(v_.get(), vv.data(), vv.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        s = InternalError("upload of adam v failed");
      if (!s.ok()) return Fail("DATA_ERROR", "resume from " + *dir + ": " + s.message(), worker::kExitBadData);
      std::fprintf(stderr, "fp8-worker: resumed from %s at step %lld\n", dir->c_str(), static_cast<long long>(step_));
    }
  }
  // As on the CPU: a retry resumes from its checkpoint; init_from only starts a fresh run (the
  // spec's model shape was taken from it by TrainMain).
  if (!resumed && !spec_.init_from.empty()) {
    auto src = OpenModelSource(spec_.init_from);
    Status s = src.ok() ? LoadModelWeights(*src, &host_) : src.status();
    if (!s.ok()) return Fail("DATA_ERROR", "init_from: " + s.message(), worker::kExitBadData);
    std::fprintf(stderr, "fp8-worker: initialized from %s\n", src->dir.c_str());
  }
  // As the CPU trainer: an output dir that cannot be written is a bad spec, caught at start,
  // after the inputs are checked, so a bad input writes nothing.
  if (Status s = dist_.rank == 0 ? PrepareCheckpointDir(checkpoint_dir_) : OkStatus(); !s.ok()) {
    const bool permanent = s.code() == StatusCode::kInvalidArgument;
    return Fail(permanent ? "INVALID_SPEC" : "INTERNAL_ERROR", "output_dir: " + s.message(),
                permanent ? worker::kExitInvalidSpec : worker::kExitTemporary);
  }
  if (Status s = model_->UploadParams(host_.params().data()); !s.ok()) return Fail("INTERNAL_ERROR", s.message(), worker::kExitTemporary);
  result_.start_step = step_;
  return 0;
}

StatusOr<double> CudaLoop::Evaluate() {
  const int b = spec_.training.per_device_train_batch_size, t = spec_.model.seq_len;
  double sum = 0;
  int count = 0;
  std::vector<int> mine;
  for (int i = dist_.rank; i < kEvalSequences; i += dist_.world_size) mine.push_back(i);
  for (size_t i = 0; i < mine.size(); i += static_cast<size_t>(b)) {
    const int n = static_cast<int>(std::min(mine.size() - i, static_cast<size_t>(b)));
    inputs_.resize(static_cast<size_t>(n) * t);
    targets_.resize(inputs_.size());
    for (int j = 0; j < n; ++j)
      val_->Sample(static_cast<uint64_t>(spec_.training.seed) ^ kEvalStream, static_cast<uint64_t>(mine[i + static_cast<size_t>(j)]),
                   inputs_.data() + j * t, targets_.data() + j * t);
    FP8_ASSIGN_OR_RETURN(double loss, model_->Forward(inputs_.data(), targets_.data(), n, /*training=*/false, 1.0f));
    sum += loss * n;
    count += n;
  }
  double buf[2] = {sum, static_cast<double>(count)};
  if (dist_.world_size > 1) FP8_RETURN_IF_ERROR(AllReduceHost(buf, 2));
  return buf[0] / buf[1];
}

nlohmann::json CudaLoop::State(int64_t step) const {
  const int64_t global_batch = static_cast<int64_t>(dist_.world_size) * spec_.training.per_device_train_batch_size *
                               spec_.training.gradient_accumulation_steps;
  nlohmann::json hist = nlohmann::json::array();
  for (const auto& [s, l] : loss_history_) hist.push_back({s, l});
  return {
      {"step", step},
      {"rng", {{"seed", spec_.training.seed}, {"sampler", "splitmix64(seed, global sample index)"}}},
      {"data", {{"samples_seen", step * global_batch}, {"global_batch", global_batch}, {"world_size", dist_.world_size}}},
      {"fp8_scaling", model_->PrecisionState()},
      {"loss_history", hist},
      {"spec", SpecToJson(spec_)},
      {"backend", "cuda"},
  };
}

Status CudaLoop::Save(int64_t step) {
  if (dist_.rank != 0) return OkStatus();
  FP8_RETURN_IF_ERROR(model_->DownloadParams(host_.params().data()));
  const size_t n = static_cast<size_t>(host_.num_params());
  std::vector<float> mm(n), vv(n);
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(mm.data(), m_.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(vv.data(), v_.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  host_adam_->Restore(mm, vv);
  FP8_ASSIGN_OR_RETURN(SavedCheckpoint saved,
                       SaveCheckpoint(checkpoint_dir_, step, host_, *host_adam_, State(step), spec_.training.save_total_limit));
  ev_.Emit("checkpoint", {{"step", step}, {"path", saved.path}, {"checksum", saved.checksum}});
  std::fprintf(stderr, "fp8-worker: checkpoint step %lld → %s\n", static_cast<long long>(step), saved.path.c_str());
  result_.last_checkpoint = saved.path;
  return OkStatus();
}

Status CudaLoop::Step(double* loss_out, double* grad_norm_out, double* lr_out, bool* stop) {
  const auto& t = spec_.training;
  const int rank = dist_.rank, world = dist_.world_size;
  const int b = t.per_device_train_batch_size, accum = t.gradient_accumulation_steps, seq = spec_.model.seq_len;
  const uint64_t global_batch = static_cast<uint64_t>(world) * b * accum;
  const float loss_scale = 1.0f / static_cast<float>(accum * world);
  FP8_RETURN_IF_ERROR(model_->ZeroGrad());
  double loss_sum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    const uint64_t first = static_cast<uint64_t>(step_) * global_batch + static_cast<uint64_t>(rank) * b * accum +
                           static_cast<uint64_t>(micro) * b;
    inputs_.resize(static_cast<size_t>(b) * seq);
    targets_.resize(inputs_.size());
    for (int j = 0; j < b; ++j)
      train_->Sample(static_cast<uint64_t>(t.seed), first + static_cast<uint64_t>(j), inputs_.data() + j * seq, targets_.data() + j * seq);
    FP8_ASSIGN_OR_RETURN(double l, model_->Forward(inputs_.data(), targets_.data(), b, true, loss_scale));
    loss_sum += l;
    FP8_RETURN_IF_ERROR(model_->Backward());
  }
  const bool stop_here = worker::StopRequested().load() || (opt_.stop_after_step > 0 && step_ + 1 >= opt_.stop_after_step);
  double loss = loss_sum / accum;
  *stop = stop_here;
  if (world > 1) {
    FP8_RETURN_IF_ERROR(comm_->AllReduceSum(model_->grads(), static_cast<size_t>(model_->num_params()), stream_));
    double sc[2] = {loss, stop_here ? 1.0 : 0.0};
    FP8_RETURN_IF_ERROR(AllReduceHost(sc, 2));
    loss = sc[0] / world;
    *stop = sc[1] > 0;
  }
  *loss_out = loss;
  if (!std::isfinite(loss)) return OkStatus();
  FP8_RETURN_IF_ERROR(SumSquares(model_->grads(), model_->num_params(), norm_partial_.get(), norm_.get(), stream_));
  double sq = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(&sq, norm_.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  const double grad_norm = std::sqrt(sq);
  float clip = 1.0f;
  if (t.max_grad_norm > 0 && grad_norm > t.max_grad_norm) clip = static_cast<float>(t.max_grad_norm / (grad_norm + 1e-6));
  const double lr = LearningRateAt(t, step_);
  const int64_t s1 = step_ + 1;
  AdamWArgs a{static_cast<float>(lr), static_cast<float>(t.adam_beta1), static_cast<float>(t.adam_beta2),
              static_cast<float>(t.adam_epsilon), static_cast<float>(t.weight_decay),
              static_cast<float>(1.0 - std::pow(t.adam_beta1, static_cast<double>(s1))),
              static_cast<float>(1.0 - std::pow(t.adam_beta2, static_cast<double>(s1))), clip};
  FP8_RETURN_IF_ERROR(model_->OptimizerStep(a, m_.get(), v_.get()));
  *grad_norm_out = grad_norm;
  *lr_out = lr;
  return OkStatus();
}

Status CudaLoop::AllReduceHost(double* v, int n) {
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host_sums_.get(), v, n * sizeof(double), cudaMemcpyHostToDevice, stream_));
  FP8_RETURN_IF_ERROR(comm_->AllReduceSum(host_sums_.get(), static_cast<size_t>(n), stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(v, host_sums_.get(), n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  return OkStatus();
}

TrainResult CudaLoop::Run() {
  if (Setup() != 0) return result_;
  const auto& t = spec_.training;
  const int rank = dist_.rank, world = dist_.world_size;
  ev_.Emit("started", {{"rank", rank}, {"world_size", world}, {"pid", static_cast<int64_t>(::getpid())}, {"step", step_},
                       {"recipe", RecipeName(spec_.precision.recipe)}, {"num_params", host_.num_params()}, {"backend", "cuda"}});
  std::fprintf(stderr, "fp8-worker: cuda rank %d/%d, %lld parameters, recipe %s, steps %lld..%lld\n", rank, world,
               static_cast<long long>(host_.num_params()), RecipeName(spec_.precision.recipe), static_cast<long long>(step_),
               static_cast<long long>(t.max_steps));
  if (opt_.heartbeat_ms > 0) ev_.StartHeartbeat(opt_.heartbeat_ms);
  const auto t_start = Clock::now();
  auto t_window = t_start;
  int64_t window_start = step_;
  const uint64_t global_batch = static_cast<uint64_t>(world) * t.per_device_train_batch_size * t.gradient_accumulation_steps;
  const double flops_per_token = TrainFlopsPerToken(spec_.model, host_.num_params());
  double last_loss = NAN;
  bool stop = false;
  while (step_ < t.max_steps && !stop) {
    double loss = NAN, grad_norm = 0, lr = 0;
    if (Status s = Step(&loss, &grad_norm, &lr, &stop); !s.ok()) {
      Fail("INTERNAL_ERROR", s.message(), worker::kExitTemporary);
      return result_;
    }
    if (!std::isfinite(loss)) {
      Fail("NUMERIC", "loss is " + std::to_string(loss) + " at step " + std::to_string(step_ + 1), worker::kExitTemporary);
      return result_;
    }
    ++step_;
    last_loss = loss;
    result_.losses.push_back(loss);
    loss_history_.emplace_back(step_, loss);
    if (loss_history_.size() > kLossHistoryCap) loss_history_.erase(loss_history_.begin());
    if (step_ % t.logging_steps == 0 || step_ == t.max_steps || stop) {
      cudaStreamSynchronize(stream_);
      const auto now = Clock::now();
      const double secs = std::max(1e-9, Seconds(t_window, now));
      const double tokens = static_cast<double>(step_ - window_start) * static_cast<double>(global_batch) * spec_.model.seq_len;
      const double tps = tokens / secs;
      const double mfu = tps * flops_per_token / world / kH200DenseBf16Flops;
      const double eta = static_cast<double>(t.max_steps - step_) * secs / std::max<int64_t>(1, step_ - window_start);
      ev_.Emit("progress", {{"step", step_}, {"total_steps", t.max_steps}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                            {"tokens_per_sec", tps}, {"mfu", mfu}, {"eta_seconds", eta}});
      std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.3g  grad_norm %.3f  %.0f tok/s  mfu %.1f%%  eta %.0fs%s",
                   opt_.tty_progress ? "\r\033[K" : "", static_cast<long long>(step_), static_cast<long long>(t.max_steps), loss,
                   lr, grad_norm, tps, 100 * mfu, eta, opt_.tty_progress ? "" : "\n");
      t_window = now;
      window_start = step_;
    }
    if (val_ && (step_ % t.eval_steps == 0 || step_ == t.max_steps)) {
      auto ev = Evaluate();
      if (!ev.ok()) {
        Fail("INTERNAL_ERROR", ev.status().message(), worker::kExitTemporary);
        return result_;
      }
      result_.eval_loss = *ev;
      ev_.Emit("metric", {{"name", "eval_loss"}, {"value", *ev}, {"step", step_}});
      std::fprintf(stderr, "%seval_loss %.4f at step %lld\n", opt_.tty_progress ? "\n" : "", *ev, static_cast<long long>(step_));
    }
    if (step_ % t.save_steps == 0 || step_ == t.max_steps || stop) {
      if (Status s = Save(step_); !s.ok()) {
        Fail("INTERNAL_ERROR", "checkpoint: " + s.message(), worker::kExitInternal);
        return result_;
      }
    }
  }
  if (opt_.tty_progress) std::fputc('\n', stderr);
  result_.steps_done = step_;
  result_.interrupted = stop && step_ < t.max_steps;
  const double secs = Seconds(t_start, Clock::now());
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  nlohmann::json res = {{"final_loss", last_loss}, {"steps", step_},
                        {"tokens", static_cast<int64_t>(global_batch) * spec_.model.seq_len * (step_ - result_.start_step)},
                        {"seconds", secs}, {"interrupted", result_.interrupted}, {"backend", "cuda"},
                        {"device_memory_used_bytes", static_cast<int64_t>(total_b - free_b)}};
  if (result_.eval_loss >= 0) res["eval_loss"] = result_.eval_loss;
  if (!result_.last_checkpoint.empty()) res["checkpoint"] = result_.last_checkpoint;
  if (spec_.precision.recipe == Recipe::kFp8Tensorwise) res["fp8_scaling_digest"] = ScalingStateDigest(model_->PrecisionState());
  if (spec_.training.export_hf && !result_.interrupted && dist_.rank == 0) {
    // The final step's Save (rank 0) left the trained weights in host_.
    const std::string hf_dir = (std::filesystem::path(spec_.output_dir) / "hf").string();
    if (Status s = ExportHfGpt2(host_, hf_dir); !s.ok()) {
      Fail("INTERNAL_ERROR", "training.export: " + s.message(), worker::kExitInternal);
      return result_;
    }
    res["export"] = std::filesystem::absolute(hf_dir).string();
  }
  ev_.StopHeartbeat();
  ev_.Emit("done", {{"result", res}});
  result_.exit_code = result_.interrupted ? worker::kExitTemporary : worker::kExitOk;
  std::fprintf(stderr, "fp8-worker: %s at step %lld, loss %.4f, %.1fs\n", result_.interrupted ? "interrupted" : "done",
               static_cast<long long>(step_), last_loss, secs);
  return result_;
}

}  // namespace

bool CudaDeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

double TrainFlopsPerToken(const ModelConfig& m, int64_t num_params) {
  return 6.0 * static_cast<double>(num_params) + 12.0 * m.n_layer * static_cast<double>(m.d_model) * m.seq_len;
}

TrainResult RunCudaTraining(const TrainSpec& spec, const TrainOptions& options, const CudaDistributed& dist,
                            EventWriter& events) {
  TrainResult r;
  {
    CudaLoop loop(spec, options, dist, events);
    r = loop.Run();
  }
  events.StopHeartbeat();
  return r;
}

}  // namespace fp8::train::cuda
