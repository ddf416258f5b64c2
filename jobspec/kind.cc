#include "jobspec/kind.h"

namespace fp8::jobspec {
namespace {

const std::string& Empty() {
  static const std::string empty;
  return empty;
}

}  // namespace

fp8d::v1::JobKind KindOf(const fp8d::v1::Job& job) {
  switch (job.spec_case()) {
    case fp8d::v1::Job::kTrain: return fp8d::v1::TRAIN;
    case fp8d::v1::Job::kCalibrate: return fp8d::v1::CALIBRATE;
    case fp8d::v1::Job::SPEC_NOT_SET: return fp8d::v1::JOB_KIND_UNSPECIFIED;
  }
  return fp8d::v1::JOB_KIND_UNSPECIFIED;
}

const std::string& SpecOutputDir(const fp8d::v1::Job& job) {
  switch (job.spec_case()) {
    case fp8d::v1::Job::kTrain: return job.train().output_dir();
    case fp8d::v1::Job::kCalibrate: return job.calibrate().output_dir();
    case fp8d::v1::Job::SPEC_NOT_SET: return Empty();
  }
  return Empty();
}

const std::string& SpecBackend(const fp8d::v1::Job& job) {
  switch (job.spec_case()) {
    case fp8d::v1::Job::kTrain: return job.train().backend();
    case fp8d::v1::Job::kCalibrate: return job.calibrate().backend();
    case fp8d::v1::Job::SPEC_NOT_SET: return Empty();
  }
  return Empty();
}

const char* SpecFieldPath(const fp8d::v1::Job& job) {
  switch (job.spec_case()) {
    case fp8d::v1::Job::kTrain: return "job.train";
    case fp8d::v1::Job::kCalibrate: return "job.calibrate";
    case fp8d::v1::Job::SPEC_NOT_SET: return "job";
  }
  return "job";
}

}  // namespace fp8::jobspec
