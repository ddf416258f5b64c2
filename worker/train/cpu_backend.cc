// SPDX-License-Identifier: Apache-2.0
// TrainBackend on the CPU: the spec's CausalLm (either family) + AdamW, gradients and scalars all-reduced in FP32 over a
// Collective in a fixed order (so a run is bit-reproducible across layouts and resumes).
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "worker/train/llama_model.h"
#include "worker/train/moe_dispatch.h"
#include "worker/train/trainer.h"

namespace fp8::train {
namespace {

class CpuBackend final : public TrainBackend {
 public:
  CpuBackend(const TrainSpec& spec, Collective& coll, int expert_parallel)
      : spec_(spec), coll_(coll), owned_(MakeCausalLm(spec.model, spec.precision)), model_(*owned_),
        adam_(spec.training, spec.precision.bf16_moments, model_.tensors(), model_.num_params()) {
    ep_.collective = &coll_;
    ep_.degree = expert_parallel;
    ep_.experts = spec.model.moe.num_experts;
  }

  int rank() const override { return coll_.rank(); }
  int world_size() const override { return coll_.world_size(); }
  CausalLm& host() override { return model_; }
  AdamW& host_adam() override { return adam_; }
  Status Init() override {
    // The resolved spec: a mixture of experts from init_from counts too.
    FP8_RETURN_IF_ERROR(moe::CheckExpertParallel(spec_, ep_.degree, world_size()));
    if (ep_.degree == 1) return OkStatus();
    auto* llama = dynamic_cast<LlamaModel*>(&model_);
    if (!llama) return InvalidArgumentError("resources.expert_parallel: the model has no mixture of experts");
    llama->SetExpertParallel(&ep_);
    std::fprintf(stderr, "fp8-worker: expert parallel %d: rank %d computes experts %d-%d of each MoE layer for ranks %d-%d\n",
                 ep_.degree, rank(), ep_.first_local_expert(), ep_.first_local_expert() + ep_.local_experts() - 1,
                 ep_.group_first(), ep_.group_first() + ep_.degree - 1);
    return OkStatus();
  }
  Status Start(bool, const nlohmann::json&) override {  // LoadCheckpoint restored the scaling state
    model_.DeferScalingUpdates(world_size() > 1);
    return OkStatus();
  }

  Status BeginStep(bool) override {
    model_.TakeFp8CastStats();  // every step counts (cheap here); progress reports its own step's
    model_.ZeroGrad();
    return OkStatus();
  }

  StatusOr<double> MicroStep(const int32_t* inputs, const int32_t* targets, int batch, float loss_scale) override {
    const double loss = model_.Forward(inputs, targets, batch);
    model_.Backward(loss_scale);
    FP8_RETURN_IF_ERROR(ep_.status);  // an expert-parallel exchange failed (a peer is gone)
    // fp8-tensorwise: every rank's histories take the same (max-reduced) amaxes. (One rank:
    // Backward has already fed them in.)
    if (std::vector<float> amax = world_size() > 1 ? model_.PendingAmaxes() : std::vector<float>(); !amax.empty()) {
      FP8_RETURN_IF_ERROR(coll_.AllReduceMax(amax.data(), amax.size()));
      model_.ApplyPendingAmaxes(amax);
    }
    return loss;
  }

  Status ReduceStep(double* loss, bool* stop) override {
    // Mixture of experts: the loads of every rank's tokens move the router bias (Update).
    routing_counts_ = model_.TakeRoutingCounts();
    if (world_size() == 1) return OkStatus();
    if (!routing_counts_.empty()) FP8_RETURN_IF_ERROR(coll_.AllReduceSum(routing_counts_.data(), routing_counts_.size()));
    float scalars[2] = {static_cast<float>(*loss), *stop ? 1.0f : 0.0f};
    FP8_RETURN_IF_ERROR(coll_.AllReduceSum(model_.grads().data(), model_.grads().size()));
    FP8_RETURN_IF_ERROR(coll_.AllReduceSum(scalars, 2));
    *loss = static_cast<double>(scalars[0]) / world_size();
    *stop = scalars[1] > 0;
    return OkStatus();
  }

  StatusOr<double> Update(double lr, int64_t step) override {
    const double max_norm = spec_.training.max_grad_norm;
    const double norm = GlobalNorm(model_.grads().data(), static_cast<int64_t>(model_.grads().size()));
    if (max_norm > 0 && norm > max_norm)
      for (float& g : model_.grads()) g *= static_cast<float>(max_norm / (norm + 1e-6));
    adam_.Step(model_.params().data(), model_.grads().data(), lr, step);
    model_.FinishRoutingStep(routing_counts_);
    return norm;
  }

  Fp8CastStats TakeFp8CastStats() override { return model_.TakeFp8CastStats(); }
  MoeRoutingStats RoutingStats() const override { return model_.routing_stats(); }
  StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int batch) override {
    const double loss = model_.Forward(inputs, targets, batch, /*training=*/false);
    FP8_RETURN_IF_ERROR(ep_.status);
    return loss;
  }

  Status AllReduceSum(double* v, int n) override {
    // FP32 on the wire, also for one rank, so a world of one rounds as a world of many.
    std::vector<float> buf(v, v + n);
    FP8_RETURN_IF_ERROR(coll_.AllReduceSum(buf.data(), buf.size()));
    for (int i = 0; i < n; ++i) v[i] = buf[static_cast<size_t>(i)];
    return OkStatus();
  }

  void AddResultFields(nlohmann::json* result) const override {
    if (spec_.model.moe.enabled()) (*result)["expert_parallel"] = ep_.degree;
  }

  Status SyncHost() override { return OkStatus(); }
  nlohmann::json PrecisionState() const override { return model_.PrecisionState(); }

 private:
  const TrainSpec& spec_;
  Collective& coll_;
  std::unique_ptr<CausalLm> owned_;
  CausalLm& model_;
  AdamW adam_;
  std::vector<float> routing_counts_;  // the step's, summed over the ranks
  moe::ExpertParallel ep_;             // degree 1: every expert on every rank
};

}  // namespace

TrainResult RunTraining(const TrainSpec& spec, const TrainOptions& options, Collective& collective,
                        worker::EventWriter& events) {
  return RunTraining(spec, options,
                     [&](const TrainSpec& s) { return std::make_unique<CpuBackend>(s, collective, options.expert_parallel); },
                     events);
}

}  // namespace fp8::train
