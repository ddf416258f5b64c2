// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/reflection_v1.h"

#include <set>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

namespace fp8d::api {

namespace {

namespace v1 = grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// The file and everything it imports, dependencies first, each once.
void AddFile(const FileDescriptor* file, std::set<std::string>* seen, v1::FileDescriptorResponse* out) {
  if (file == nullptr || !seen->insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), seen, out);
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void Error(v1::ServerReflectionResponse* response, grpc::StatusCode code, const std::string& message) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

class Reactor final : public grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse> {
 public:
  explicit Reactor(const ReflectionV1Service* service) : service_(service) { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_->Answer(request_);
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  const ReflectionV1Service* service_;
  v1::ServerReflectionRequest request_;
  v1::ServerReflectionResponse response_;
};

}  // namespace

grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext*) {
  return new Reactor(this);
}

v1::ServerReflectionResponse ReflectionV1Service::Answer(const v1::ServerReflectionRequest& request) const {
  v1::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  std::set<std::string> seen;
  switch (request.message_request_case()) {
    case v1::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case v1::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* file = pool->FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        Error(&response, grpc::StatusCode::NOT_FOUND, "file not found: " + request.file_by_filename());
      } else {
        AddFile(file, &seen, response.mutable_file_descriptor_response());
      }
      break;
    }
    case v1::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* file = pool->FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        Error(&response, grpc::StatusCode::NOT_FOUND, "symbol not found: " + request.file_containing_symbol());
      } else {
        AddFile(file, &seen, response.mutable_file_descriptor_response());
      }
      break;
    }
    case v1::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(ext.containing_type());
      const auto* field = type == nullptr ? nullptr : pool->FindExtensionByNumber(type, ext.extension_number());
      if (field == nullptr) {
        Error(&response, grpc::StatusCode::NOT_FOUND, "extension not found");
      } else {
        AddFile(field->file(), &seen, response.mutable_file_descriptor_response());
      }
      break;
    }
    case v1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        Error(&response, grpc::StatusCode::NOT_FOUND, "type not found");
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* out = response.mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (const auto* e : extensions) out->add_extension_number(e->number());
      break;
    }
    case v1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      Error(&response, grpc::StatusCode::INVALID_ARGUMENT, "message_request: must be set");
      break;
  }
  return response;
}

}  // namespace fp8d::api
