// SPDX-License-Identifier: Apache-2.0
// The job kind and the fields every kind has, from ONE exhaustive switch over the spec oneof:
// a third kind added to job.proto fails to compile here (kind.cc builds with -Werror=switch)
// instead of being silently labelled as one of the others.
#pragma once

#include <string>

#include "fp8d/v1/job.pb.h"

namespace fp8::jobspec {

// TRAIN, CALIBRATE, or JOB_KIND_UNSPECIFIED when no spec is set.
fp8d::v1::JobKind KindOf(const fp8d::v1::Job& job);
// The set spec's output_dir / backend ("" when no spec is set).
const std::string& SpecOutputDir(const fp8d::v1::Job& job);
const std::string& SpecBackend(const fp8d::v1::Job& job);
// The API field path of the set spec: "job.train" / "job.calibrate" ("job" when none is set).
const char* SpecFieldPath(const fp8d::v1::Job& job);

}  // namespace fp8::jobspec
