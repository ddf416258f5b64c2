// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/op_timer.h"

#include <map>

#include "kernels/cuda/sm90_cuda_check.h"

namespace fp8::train::cuda {

StatusOr<std::unique_ptr<OpTimer>> OpTimer::Create(int max_marks) {
  std::unique_ptr<OpTimer> t(new OpTimer());
  t->events_.resize(static_cast<size_t>(max_marks + 1), nullptr);
  for (cudaEvent_t& e : t->events_) FP8_RETURN_IF_CUDA_ERROR(cudaEventCreate(&e));
  t->labels_.resize(static_cast<size_t>(max_marks));
  return t;
}

OpTimer::~OpTimer() {
  for (cudaEvent_t e : events_)
    if (e) cudaEventDestroy(e);
}

Status OpTimer::Start(cudaStream_t s) {
  used_ = 0;
  dropped_ = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaEventRecord(events_[0], s));
  return OkStatus();
}

void OpTimer::Mark(std::string_view label, cudaStream_t s) {
  if (used_ + 1 >= static_cast<int>(events_.size())) {
    ++dropped_;
    return;
  }
  labels_[static_cast<size_t>(used_)] = label;
  cudaEventRecord(events_[static_cast<size_t>(++used_)], s);
}

StatusOr<std::vector<OpTimer::Total>> OpTimer::Finish(int* dropped) {
  if (dropped) *dropped = dropped_;
  std::vector<Total> out;
  if (used_ == 0) return out;
  FP8_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(events_[static_cast<size_t>(used_)]));
  std::map<std::string, size_t> index;
  for (int i = 0; i < used_; ++i) {
    float ms = 0;
    FP8_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, events_[static_cast<size_t>(i)], events_[static_cast<size_t>(i + 1)]));
    const std::string& label = labels_[static_cast<size_t>(i)];
    auto [it, fresh] = index.emplace(label, out.size());
    if (fresh) out.push_back({label, 0, 0});
    out[it->second].ms += ms;
    out[it->second].count += 1;
  }
  used_ = 0;
  return out;
}

}  // namespace fp8::train::cuda
