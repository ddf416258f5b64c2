// SPDX-License-Identifier: Apache-2.0
// Which queue a new job is charged to (daemon/core/queues.h): the one it names, or `default`.
// Pure, callable from any thread: the create path runs it before posting to the manager.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/core/queues.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::api {

// Sets job->queue to the effective queue (empty → `default`). INVALID_ARGUMENT naming job.queue
// when the queue is not configured (with no `queues:` config only `default` exists) or its
// principals do not include `principal`.
fp8::Status AdmitToQueue(const std::vector<core::QueueConfig>& queues, const std::string& principal,
                         fp8d::v1::Job* job);

}  // namespace fp8d::api
