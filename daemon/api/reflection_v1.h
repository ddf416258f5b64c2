// SPDX-License-Identifier: Apache-2.0
// grpc.reflection.v1.ServerReflection, beside the v1alpha service gRPC's plugin registers.
// Answers from the generated descriptor pool, which holds every service fp8d serves.
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace fp8d::api {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `services`: full names to list (e.g. "fp8d.v1.JobService").
  explicit ReflectionV1Service(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // One answer; public for tests.
  grpc::reflection::v1::ServerReflectionResponse Answer(
      const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  std::vector<std::string> services_;
};

}  // namespace fp8d::api
