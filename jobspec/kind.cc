// SPDX-License-Identifier: Apache-2.0
#include "jobspec/kind.h"

namespace fp8::jobspec {
namespace {

struct SpecRef {
  fp8d::v1::JobKind kind;
  const char* path;
  const std::string* output_dir;
  const std::string* backend;
};

// The one switch over the spec oneof; no default, so a new kind is a compile error here.
SpecRef RefOf(const fp8d::v1::Job& job) {
  switch (job.spec_case()) {
    case fp8d::v1::Job::kTrain:
      return {fp8d::v1::TRAIN, "job.train", &job.train().output_dir(), &job.train().backend()};
    case fp8d::v1::Job::kCalibrate:
      return {fp8d::v1::CALIBRATE, "job.calibrate", &job.calibrate().output_dir(), &job.calibrate().backend()};
    case fp8d::v1::Job::SPEC_NOT_SET:
      break;
  }
  static const std::string kEmpty;
  return {fp8d::v1::JOB_KIND_UNSPECIFIED, "job", &kEmpty, &kEmpty};
}

}  // namespace

fp8d::v1::JobKind KindOf(const fp8d::v1::Job& job) { return RefOf(job).kind; }
const std::string& SpecOutputDir(const fp8d::v1::Job& job) { return *RefOf(job).output_dir; }
const std::string& SpecBackend(const fp8d::v1::Job& job) { return *RefOf(job).backend; }
const char* SpecFieldPath(const fp8d::v1::Job& job) { return RefOf(job).path; }

}  // namespace fp8::jobspec
