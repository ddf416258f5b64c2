// SPDX-License-Identifier: Apache-2.0
// fp8::StatusCode values are the canonical gRPC codes (common/status.h), so the mapping is 1:1
// and the API never turns a named failure into UNKNOWN.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace fp8d::api {

inline grpc::Status ToGrpcStatus(const fp8::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())),
                      status.message());
}

}  // namespace fp8d::api
