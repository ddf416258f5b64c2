// SPDX-License-Identifier: Apache-2.0
// PrepareNewJob: the one place a CreateJob's job becomes the job that is stored. The store
// stores what it is given (it only names the job after the id it allocates).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::core {

// Fills `job` (already validated by daemon/api/validation.h, with owner, run_as_uid,
// request_id and allowed_roots set by the API) in place, in this order:
//   1. the effective body: kind from the spec oneof; the spec's documented defaults
//      (jobspec::ApplySpecDefaults, so GetJob shows what runs); resources.ranks from nodes ×
//      ranks_per_node, else 1; every output-only field cleared;
//   2. the request hash of that body (returned; "" when job.request_id is empty): the same
//      request_id with a different body must be told apart (docs/design.md §3), and sending
//      the defaults explicitly is the same body;
//   3. the daemon's own fields: a relative output_dir made absolute against `cwd` (the
//      daemon's working directory, because the worker runs elsewhere); the effective retry
//      policy and timeouts (retry 3 attempts, 1 s .. 60 s backoff, x2, jitter 0.2; heartbeat
//      30 s, progress 300 s); state QUEUED, version 1, create and update time `now_ms`.
// INVALID_ARGUMENT naming job.spec when neither spec is set. Idempotent apart from the times.
fp8::StatusOr<std::string> PrepareNewJob(fp8d::v1::Job* job, const std::string& cwd, int64_t now_ms);

// Hash of the deterministic serialization of `job` (map fields in key order).
std::string RequestHash(const fp8d::v1::Job& job);

}  // namespace fp8d::core
