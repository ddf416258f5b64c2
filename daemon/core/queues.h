// SPDX-License-Identifier: Apache-2.0
// The scheduler's queues as fp8d's config gives them (`queues:` in --config): each a guaranteed
// quota of GPU and CPU slots that other queues may borrow while it is idle, a weight for its
// share of what is borrowed, and the principals that may submit to it. No queues configured:
// one queue `default` whose quota is the whole cluster, open to every principal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8d::core {

inline constexpr const char* kDefaultQueueName = "default";

struct QueueConfig {
  std::string name;
  int64_t quota_gpus = 0;
  int64_t quota_cpu_slots = 0;
  double weight = 1;                    // > 0
  std::vector<std::string> principals;  // who may submit; empty: everyone
};

}  // namespace fp8d::core
