// The seam where authentication and authorization will go. Every JobService handler asks the
// policy before it does anything else, so adding mTLS or token auth later is one class here and
// one flag in the server, not a change to each handler. Until then fp8d only listens on
// loopback (daemon/server refuses anything else), and the only policy is AllowLocal.
#pragma once

#include <memory>
#include <string_view>

#include <grpcpp/server_context.h>

#include "common/status.h"

namespace fp8d::api {

class AuthPolicy {
 public:
  virtual ~AuthPolicy() = default;
  // OK to proceed, or UNAUTHENTICATED / PERMISSION_DENIED. `method` is e.g. "CreateJob".
  virtual fp8::Status Authorize(const grpc::CallbackServerContext& context,
                                std::string_view method) const = 0;
};

// Admits every caller: correct only because the server binds loopback addresses only.
class AllowLocalAuthPolicy final : public AuthPolicy {
 public:
  fp8::Status Authorize(const grpc::CallbackServerContext&, std::string_view) const override {
    return fp8::OkStatus();
  }
};

}  // namespace fp8d::api
