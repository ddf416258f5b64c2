// SPDX-License-Identifier: Apache-2.0
#include "daemon/store/job_store.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace fp8d::store {

Status JobStore::ScanActiveJobs(size_t chunk,
                                const std::function<Status(std::vector<fp8d::v1::Job>)>& sink) {
  FP8_ASSIGN_OR_RETURN(std::vector<fp8d::v1::Job> all, ListActiveJobs());
  chunk = std::max<size_t>(chunk, 1);
  for (size_t begin = 0; begin < all.size(); begin += chunk) {
    const size_t end = std::min(all.size(), begin + chunk);
    std::vector<fp8d::v1::Job> part(std::make_move_iterator(all.begin() + begin),
                                    std::make_move_iterator(all.begin() + end));
    FP8_RETURN_IF_ERROR(sink(std::move(part)));
  }
  return fp8::OkStatus();
}

Status JobStore::PutAttempts(const std::vector<std::pair<std::string, AttemptRecord>>& records) {
  for (const auto& [job_name, record] : records) FP8_RETURN_IF_ERROR(PutAttempt(job_name, record));
  return fp8::OkStatus();
}

}  // namespace fp8d::store
