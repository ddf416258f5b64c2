// SPDX-License-Identifier: Apache-2.0
// Where a training step's device time goes, operation by operation, without a profiler (the GPU
// machine's image has none that reads a whole step's kernels): the model records a CUDA event
// after each operation it enqueues, and Finish sums the times between consecutive events by
// label. All events sit on the model's one stream, in order, so an interval is the device time
// of the work queued between two marks, plus any idle time before it (after a host
// synchronisation, say). For bench_trainer_cuda --profile; a model without a timer records nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fp8::train::cuda {

class OpTimer {
 public:
  struct Total {
    std::string label;
    double ms = 0;
    int count = 0;
  };
  // Up to `max_marks` marks between Start and Finish (events made once, here).
  static StatusOr<std::unique_ptr<OpTimer>> Create(int max_marks);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // The interval before the first Mark starts here.
  Status Start(cudaStream_t s);
  // The work queued on `s` since the previous mark is `label`'s. Marks past max_marks are dropped
  // (Finish reports how many).
  void Mark(std::string_view label, cudaStream_t s);
  // Waits for the last mark; the totals by label in the order each first appeared, and the
  // number of marks dropped.
  StatusOr<std::vector<Total>> Finish(int* dropped = nullptr);

 private:
  OpTimer() = default;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> labels_;  // labels_[i]: the interval ending at events_[i + 1]
  int used_ = 0, dropped_ = 0;
};

}  // namespace fp8::train::cuda
