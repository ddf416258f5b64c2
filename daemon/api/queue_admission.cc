// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/queue_admission.h"

#include <algorithm>

namespace fp8d::api {
namespace {

std::string QueueNames(const std::vector<core::QueueConfig>& queues) {
  std::string names;
  for (const core::QueueConfig& q : queues) names += (names.empty() ? "" : ", ") + q.name;
  return names;
}

}  // namespace

fp8::Status AdmitToQueue(const std::vector<core::QueueConfig>& queues, const std::string& principal,
                         fp8d::v1::Job* job) {
  const bool named = !job->queue().empty();
  if (!named) job->set_queue(core::kDefaultQueueName);
  const std::string& name = job->queue();
  if (queues.empty()) {
    if (name == core::kDefaultQueueName) return fp8::OkStatus();
    return fp8::InvalidArgumentError("job.queue: unknown queue " + name +
                                     "; this fp8d has no queues: config, so the only queue is default");
  }
  const auto it = std::find_if(queues.begin(), queues.end(),
                               [&](const core::QueueConfig& q) { return q.name == name; });
  if (it == queues.end() && !named) {
    return fp8::InvalidArgumentError("job.queue: required, as no queue is named default (the queues are " +
                                     QueueNames(queues) + ")");
  }
  if (it == queues.end()) {
    return fp8::InvalidArgumentError("job.queue: unknown queue " + name + " (the queues are " + QueueNames(queues) +
                                     ")");
  }
  if (!it->principals.empty() &&
      std::find(it->principals.begin(), it->principals.end(), principal) == it->principals.end()) {
    return fp8::InvalidArgumentError("job.queue: principal " + principal + " may not submit to queue " + name);
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::api
