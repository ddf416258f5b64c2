// SPDX-License-Identifier: Apache-2.0
// The one check of a job's paths, run by fp8d at create and by fp8-worker before it opens them.
// Which fields are paths is declared once, in job.proto (`[(fp8d.v1.path) = ...]`):
// CheckSpecPaths walks a message by its descriptor and checks every marked field, so a new
// path field is covered by marking it.
//
// The rule: a path is absolute; a glob holds no `..` component; the path is resolved the way
// the kernel would open it (symlinks followed, a tail that does not exist yet taken as
// written, where it may not hold `..`) and must lie under one of the allowed roots. A glob's
// literal directory (the components before the first one with a wildcard) is checked at
// create; the worker checks every match. Refusals name the field and print what the caller
// wrote and the roots, never a resolved target (a symlink may point where the caller cannot
// read).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/message.h>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8::jobspec {

enum class PathCheck {
  kAtCreate,    // fp8d: a glob's literal directory (its matches may not exist yet)
  kBeforeOpen,  // fp8-worker: also every match of a glob
};

// Each root resolved with realpath; a root that does not resolve is left out.
std::vector<std::string> ResolveRoots(const std::vector<std::string>& roots);

// What a passing check resolved, for a caller that would otherwise resolve it again.
struct ResolvedPaths {
  // The OUTPUT_DIR field's value as it resolved ("" when unset). A job has one: fp8d's
  // output-dir admission takes it as its key instead of walking the path a second time.
  std::string output_dir;
};

// INVALID_ARGUMENT "<field>: ..." for the first marked field of `message` (or of a message it
// holds) that breaks the rule. `prefix` is the message's own path in errors ("job", or "" for
// the worker's spec). `roots` are resolved (ResolveRoots); with none, every path is refused.
// `resolved`, when given and the check passes, receives what it resolved.
fp8::Status CheckSpecPaths(const google::protobuf::Message& message, std::string_view prefix,
                           const std::vector<std::string>& roots, PathCheck when,
                           ResolvedPaths* resolved = nullptr);

// The same for one value of a field of `kind`; empty is left to the validator (required or not).
fp8::Status CheckPath(std::string_view field, const std::string& value, fp8d::v1::PathKind kind,
                      const std::vector<std::string>& roots, PathCheck when);

// Every field of `descriptor` and of the messages it holds that is marked as a path, by its
// path ("data.train") with its kind.
std::vector<std::pair<std::string, fp8d::v1::PathKind>> PathFields(
    const google::protobuf::Descriptor* descriptor);

// `path` (absolute) as the kernel would open it, with lstat and readlink only: each symlink
// followed, `..` applied to what it resolved to, a component that does not exist ending the
// walk (the rest appended as written; `..` there is refused).
fp8::StatusOr<std::string> ResolvePath(const std::string& path);

// The worker's check of its spec (TrainSpec or CalibrateSpec) against the allowed_roots fp8d
// stored in it, run before anything is opened: a path may have become a symlink while the job
// was queued. No roots (a worker run by hand, not by fp8d): nothing to check against.
fp8::Status CheckPathsBeforeOpen(const google::protobuf::Message& spec,
                                 const google::protobuf::RepeatedPtrField<std::string>& allowed_roots);

// The job's spec's allowed_roots (output only): what fp8d checked it against, for the worker.
void SetAllowedRoots(fp8d::v1::Job* job, const std::vector<std::string>& roots);

}  // namespace fp8::jobspec
