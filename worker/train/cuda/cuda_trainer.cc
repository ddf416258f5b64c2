// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/cuda_trainer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/cuda/sm90_cuda_check.h"
#include "worker/train/causal_lm.h"
#include "worker/train/cuda/cuda_causal_lm.h"
#include "worker/train/cuda/device_buffer.h"
#include "worker/train/cuda/nccl_comm.h"
#include "worker/train/train_backend.h"

namespace fp8::train::cuda {
namespace {

// TrainBackend on one GPU per rank: the family's CUDA model (MakeCudaCausalLm), FP32 AdamW
// moments on the device, NCCL for the gradient, amax and scalar reductions. Checkpoints go
// through the host model/AdamW of the same family and layout (SyncHost downloads into them), so
// a CUDA checkpoint resumes on the CPU backend and vice versa.
class CudaTrainBackend final : public TrainBackend {
 public:
  CudaTrainBackend(const TrainSpec& spec, const Distributed& dist)
      : spec_(spec), dist_(dist), host_(MakeCausalLm(spec.model, spec.precision)),
        host_adam_(spec.training, spec.precision.bf16_moments, host_->tensors(), host_->num_params()) {}
  ~CudaTrainBackend() override {
    model_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return dist_.rank; }
  int world_size() const override { return dist_.world_size; }
  CausalLm& host() override { return *host_; }
  AdamW& host_adam() override { return host_adam_; }
  Status Init() override;
  Status Start(bool resumed, const nlohmann::json& fp8_scaling) override;
  Status BeginStep(bool fp8_stats) override {
    FP8_RETURN_IF_ERROR(model_->CollectFp8Stats(fp8_stats));
    return model_->ZeroGrad();
  }
  StatusOr<double> MicroStep(const int32_t* inputs, const int32_t* targets, int batch, float loss_scale) override {
    FP8_ASSIGN_OR_RETURN(const double loss, model_->Forward(inputs, targets, batch, /*training=*/true, loss_scale));
    FP8_RETURN_IF_ERROR(model_->Backward());
    return loss;
  }
  Status ReduceStep(double* loss, bool* stop) override;
  StatusOr<double> Update(double lr, int64_t step) override;
  Fp8CastStats TakeFp8CastStats() override { return model_->TakeFp8Stats(); }
  StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int batch) override {
    return model_->Forward(inputs, targets, batch, /*training=*/false, 1.0f);
  }
  Status AllReduceSum(double* v, int n) override;
  Status SyncHost() override;
  nlohmann::json PrecisionState() const override { return model_->PrecisionState(); }
  nlohmann::json Labels() const override { return {{"backend", "cuda"}}; }
  void AddResultFields(nlohmann::json* result) const override {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    (*result)["device_memory_used_bytes"] = static_cast<int64_t>(total_b - free_b);
  }
  double PeakFlops() const override { return kH200DenseBf16Flops; }

 private:
  const TrainSpec& spec_;
  const Distributed& dist_;
  std::unique_ptr<CausalLm> host_;
  train::AdamW host_adam_;
  std::unique_ptr<NcclComm> comm_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaCausalLm> model_;
  DeviceBuffer<float> m_, v_;
  DeviceBuffer<double> norm_partial_, norm_, host_sums_;
};

Status CudaTrainBackend::Init() {
  int count = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&count));
  if (count < 1) return UnavailableError("no CUDA device");
  FP8_RETURN_IF_CUDA_ERROR(cudaSetDevice(dist_.rank % count));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FP8_ASSIGN_OR_RETURN(comm_, NcclComm::Create(dist_.rank, dist_.world_size, dist_.rendezvous_dir, dist_.timeout));
  FP8_ASSIGN_OR_RETURN(model_, MakeCudaCausalLm(spec_.model, spec_.precision, host_->tensors(),
                                                spec_.training.per_device_train_batch_size, stream_));
  if (dist_.world_size > 1)
    model_->SetAmaxReduce([comm = comm_.get()](float* amax, size_t n, cudaStream_t s) { return comm->AllReduceMax(amax, n, s); });
  const size_t n = static_cast<size_t>(host_->num_params());
  FP8_RETURN_IF_ERROR(m_.Allocate(n, "adam m"));
  FP8_RETURN_IF_ERROR(v_.Allocate(n, "adam v"));
  FP8_RETURN_IF_ERROR(norm_partial_.Allocate(1024, "norm partials"));
  FP8_RETURN_IF_ERROR(host_sums_.Allocate(2, "all-reduced scalars"));
  FP8_RETURN_IF_ERROR(norm_.Allocate(1, "norm"));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemset(m_.get(), 0, n * sizeof(float)));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemset(v_.get(), 0, n * sizeof(float)));
  return OkStatus();
}

Status CudaTrainBackend::Start(bool resumed, const nlohmann::json& fp8_scaling) {
  if (resumed) {
    if (!fp8_scaling.is_null()) FP8_RETURN_IF_ERROR(model_->RestorePrecisionState(fp8_scaling));
    const std::vector<float> mm = host_adam_.m(), vv = host_adam_.v();
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(m_.get(), mm.data(), mm.size() * sizeof(float), cudaMemcpyHostToDevice));
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(v_.get(), vv.data(), vv.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  return model_->UploadParams(host_->params().data());
}

Status CudaTrainBackend::ReduceStep(double* loss, bool* stop) {
  if (dist_.world_size == 1) return OkStatus();
  FP8_RETURN_IF_ERROR(comm_->AllReduceSum(model_->grads(), static_cast<size_t>(model_->num_params()), stream_));
  double sc[2] = {*loss, *stop ? 1.0 : 0.0};
  FP8_RETURN_IF_ERROR(AllReduceSum(sc, 2));
  *loss = sc[0] / dist_.world_size;
  *stop = sc[1] > 0;
  return OkStatus();
}

StatusOr<double> CudaTrainBackend::Update(double lr, int64_t step) {
  const auto& t = spec_.training;
  FP8_RETURN_IF_ERROR(SumSquares(model_->grads(), model_->num_params(), norm_partial_.get(), norm_.get(), stream_));
  double sq = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(&sq, norm_.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  const double grad_norm = std::sqrt(sq);
  float clip = 1.0f;
  if (t.max_grad_norm > 0 && grad_norm > t.max_grad_norm) clip = static_cast<float>(t.max_grad_norm / (grad_norm + 1e-6));
  AdamWArgs a{static_cast<float>(lr), static_cast<float>(t.adam_beta1), static_cast<float>(t.adam_beta2),
              static_cast<float>(t.adam_epsilon), static_cast<float>(t.weight_decay),
              static_cast<float>(1.0 - std::pow(t.adam_beta1, static_cast<double>(step))),
              static_cast<float>(1.0 - std::pow(t.adam_beta2, static_cast<double>(step))), clip};
  FP8_RETURN_IF_ERROR(model_->OptimizerStep(a, m_.get(), v_.get()));
  return grad_norm;
}

Status CudaTrainBackend::AllReduceSum(double* v, int n) {
  if (dist_.world_size == 1) return OkStatus();
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host_sums_.get(), v, n * sizeof(double), cudaMemcpyHostToDevice, stream_));
  FP8_RETURN_IF_ERROR(comm_->AllReduceSum(host_sums_.get(), static_cast<size_t>(n), stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(v, host_sums_.get(), n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  FP8_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_));
  return OkStatus();
}

Status CudaTrainBackend::SyncHost() {
  FP8_RETURN_IF_ERROR(model_->DownloadParams(host_->params().data()));
  const size_t n = static_cast<size_t>(host_->num_params());
  std::vector<float> mm(n), vv(n);
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(mm.data(), m_.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(vv.data(), v_.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  host_adam_.Restore(mm, vv);
  return OkStatus();
}

}  // namespace

bool CudaDeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TrainResult RunCudaTraining(const TrainSpec& spec, const TrainOptions& options, const Distributed& dist,
                            worker::EventWriter& events) {
  return RunTraining(spec, options, [&](const TrainSpec& resolved) { return std::make_unique<CudaTrainBackend>(resolved, dist); },
                     events);
}

}  // namespace fp8::train::cuda
