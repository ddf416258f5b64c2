// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: fp8ctl's job-file parser (client/job_file.cc) on arbitrary bytes. Any
// input must come back as a Job or an INVALID_ARGUMENT status: no crash, no exception, no
// unbounded memory (alias bombs), no stack overflow (recursive aliases).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/job_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto job = fp8d::client::ParseJobText(text, "/fuzz");
  if (!job.ok() && job.status().code() != fp8::StatusCode::kInvalidArgument) std::abort();
  if (!job.ok() && job.status().message().empty()) std::abort();  // every refusal says why
  return 0;
}
