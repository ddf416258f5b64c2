#include "jobspec/paths.h"

#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <google/protobuf/descriptor.h>

namespace fp8::jobspec {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr int kMaxSymlinks = 40;  // the kernel's own limit (ELOOP)

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

bool HasWildcard(const std::string& component) {
  return component.find_first_of("*?[") != std::string::npos;
}

bool Under(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || path.rfind(root + "/", 0) == 0;
}

std::string RootList(const std::vector<std::string>& roots) {
  std::string list;
  for (const std::string& root : roots) list += (list.empty() ? "" : ", ") + root;
  return "(" + list + ")";
}

Status Bad(std::string_view field, const std::string& why) {
  return InvalidArgumentError(std::string(field) + ": " + why);
}

// `value` (what the caller wrote, printed as such) resolved from `path` must lie under a root.
Status ResolvesUnderRoots(std::string_view field, const std::string& value, const std::string& path,
                          const std::vector<std::string>& roots) {
  auto resolved = ResolvePath(path);
  if (!resolved.ok()) return Bad(field, value + ": " + resolved.status().message());
  for (const std::string& root : roots) {
    if (Under(*resolved, root)) return OkStatus();
  }
  return Bad(field, value + " is outside the allowed roots " + RootList(roots));
}

Status CheckGlob(std::string_view field, const std::string& value, const std::vector<std::string>& roots,
                 PathCheck when) {
  const std::vector<std::string> parts = Components(value);
  std::string literal;
  bool wild = false;
  for (const std::string& part : parts) {
    if (part == "..") return Bad(field, value + ": a glob must not contain '..'");
    wild = wild || HasWildcard(part);
    if (!wild) literal += "/" + part;
  }
  if (!wild) return ResolvesUnderRoots(field, value, value, roots);
  FP8_RETURN_IF_ERROR(ResolvesUnderRoots(field, value, literal.empty() ? "/" : literal, roots));
  if (when == PathCheck::kAtCreate) return OkStatus();
  // Each match: a wildcard may have matched a symlink that leaves the roots. The match itself
  // is not printed (its name is the target directory's).
  glob_t g{};
  const int rc = ::glob(value.c_str(), 0, nullptr, &g);
  Status status = OkStatus();
  for (size_t i = 0; rc == 0 && status.ok() && i < g.gl_pathc; ++i) {
    auto resolved = ResolvePath(g.gl_pathv[i]);
    bool inside = false;
    for (const std::string& root : roots) inside = inside || (resolved.ok() && Under(*resolved, root));
    if (!inside) status = Bad(field, value + " matches a path outside the allowed roots " + RootList(roots));
  }
  ::globfree(&g);
  return status;
}

// True when `d` or a message it holds has a field marked as a path; `seen` stops recursive
// types (google.protobuf.Struct).
bool HoldsPaths(const Descriptor* d, std::set<const Descriptor*>& seen) {
  if (!seen.insert(d).second) return false;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->options().GetExtension(fp8d::v1::path) != fp8d::v1::PATH_KIND_UNSPECIFIED) return true;
    if (f->type() == FieldDescriptor::TYPE_MESSAGE && HoldsPaths(f->message_type(), seen)) return true;
  }
  return false;
}

bool HoldsPaths(const Descriptor* d) {
  std::set<const Descriptor*> seen;
  return HoldsPaths(d, seen);
}

std::string Join(std::string_view prefix, const std::string& name) {
  return prefix.empty() ? name : std::string(prefix) + "." + name;
}

void CollectPathFields(const Descriptor* d, const std::string& prefix, std::set<const Descriptor*>& seen,
                       std::vector<std::pair<std::string, fp8d::v1::PathKind>>* out) {
  if (!seen.insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const fp8d::v1::PathKind kind = f->options().GetExtension(fp8d::v1::path);
    if (kind != fp8d::v1::PATH_KIND_UNSPECIFIED) out->emplace_back(Join(prefix, f->name()), kind);
    if (f->type() == FieldDescriptor::TYPE_MESSAGE) CollectPathFields(f->message_type(), Join(prefix, f->name()), seen, out);
  }
  seen.erase(d);
}

// What CheckSpecPaths visits in one message type, in declaration order (so the first field
// that breaks the rule is the one reported): its path fields, and the message fields that hold
// some. Worked out once per type: walking every field's options and every nested type on each
// create was a third of what the whole check cost.
struct PathPlan {
  struct Step {
    const FieldDescriptor* field;
    fp8d::v1::PathKind kind;         // PATH_KIND_UNSPECIFIED: a message that holds paths
    const PathPlan* message = nullptr;
  };
  std::vector<Step> steps;
};

using PathPlans = std::map<const Descriptor*, std::unique_ptr<PathPlan>>;

const PathPlan* BuildPlan(const Descriptor* d, PathPlans& plans) {
  auto [it, inserted] = plans.try_emplace(d);
  if (!inserted) return it->second.get();  // built, or being built (a type that holds itself)
  it->second = std::make_unique<PathPlan>();
  PathPlan* plan = it->second.get();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const fp8d::v1::PathKind kind = f->options().GetExtension(fp8d::v1::path);
    if (kind != fp8d::v1::PATH_KIND_UNSPECIFIED) {
      plan->steps.push_back({f, kind});
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE && HoldsPaths(f->message_type())) {
      plan->steps.push_back({f, kind, BuildPlan(f->message_type(), plans)});
    }
  }
  return plan;
}

// Plans live as long as the descriptors they point into (the process); gRPC's threads share
// them, so they are built under a lock and never changed after.
const PathPlan& PlanFor(const Descriptor* d) {
  static std::mutex mu;
  static PathPlans* const plans = new PathPlans();
  std::lock_guard lock(mu);
  return *BuildPlan(d, *plans);
}

Status CheckPlanned(const Message& message, const PathPlan& plan, std::string_view prefix,
                    const std::vector<std::string>& roots, PathCheck when) {
  const Reflection* r = message.GetReflection();
  for (const PathPlan::Step& step : plan.steps) {
    const FieldDescriptor* f = step.field;
    const std::string name = Join(prefix, f->name());
    if (step.message == nullptr) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(message, f); ++j) {
          FP8_RETURN_IF_ERROR(CheckPath(name + "[" + std::to_string(j) + "]", r->GetRepeatedString(message, f, j),
                                        step.kind, roots, when));
        }
      } else {
        FP8_RETURN_IF_ERROR(CheckPath(name, r->GetString(message, f), step.kind, roots, when));
      }
    } else if (f->is_repeated()) {
      for (int j = 0; j < r->FieldSize(message, f); ++j) {
        FP8_RETURN_IF_ERROR(CheckPlanned(r->GetRepeatedMessage(message, f, j), *step.message,
                                         name + "[" + std::to_string(j) + "]", roots, when));
      }
    } else if (r->HasField(message, f)) {
      FP8_RETURN_IF_ERROR(CheckPlanned(r->GetMessage(message, f), *step.message, name, roots, when));
    }
  }
  return OkStatus();
}

}  // namespace

std::vector<std::string> ResolveRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> resolved;
  for (const std::string& root : roots) {
    char buf[PATH_MAX];
    if (::realpath(root.c_str(), buf) != nullptr) resolved.push_back(buf);
  }
  return resolved;
}

StatusOr<std::string> ResolvePath(const std::string& path) {
  if (path.empty() || path[0] != '/') return InvalidArgumentError("must be an absolute path");
  // `rest` from `pos` on is what is left to walk (a symlink's target is spliced in front of
  // it); `resolved` is the walk so far ("" is "/") and the very string lstat is given, so a
  // path without symlinks costs no allocation per component.
  std::string rest = path;
  size_t pos = 0;
  std::string resolved;
  resolved.reserve(path.size() + 16);
  bool missing = false;
  int links = 0;
  while (pos < rest.size()) {
    if (rest[pos] == '/') {
      ++pos;
      continue;
    }
    size_t end = rest.find('/', pos);
    if (end == std::string::npos) end = rest.size();
    const std::string_view part(rest.data() + pos, end - pos);
    pos = end;
    if (part == ".") continue;
    if (part == "..") {
      // Below a directory that does not exist yet the kernel would apply it to whatever is
      // created there later, which may be a symlink.
      if (missing) return InvalidArgumentError("must not contain '..' below a directory that does not exist");
      resolved.resize(std::min(resolved.size(), resolved.rfind('/')));
      continue;
    }
    const size_t before = resolved.size();
    resolved += '/';
    resolved += part;
    if (missing) continue;
    struct stat st {};
    if (::lstat(resolved.c_str(), &st) != 0) {
      if (errno != ENOENT && errno != ENOTDIR) return InvalidArgumentError(std::string("cannot be resolved: ") + std::strerror(errno));
      missing = true;
      continue;
    }
    if (!S_ISLNK(st.st_mode)) continue;
    if (++links > kMaxSymlinks) return InvalidArgumentError("cannot be resolved: too many levels of symbolic links");
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : PATH_MAX) + 1, '\0');
    const ssize_t n = ::readlink(resolved.c_str(), target.data(), target.size());
    if (n <= 0 || static_cast<size_t>(n) >= target.size()) return InvalidArgumentError("cannot be resolved: unreadable symbolic link");
    target.resize(static_cast<size_t>(n));
    rest = target + "/" + rest.substr(pos);
    pos = 0;
    if (target[0] == '/') {
      resolved.clear();
    } else {
      resolved.resize(before);  // the link's own name is replaced by its target
    }
  }
  return resolved.empty() ? std::string("/") : resolved;
}

Status CheckPath(std::string_view field, const std::string& value, fp8d::v1::PathKind kind,
                 const std::vector<std::string>& roots, PathCheck when) {
  if (value.empty()) return OkStatus();
  if (value[0] != '/') return Bad(field, "must be an absolute path");
  // Only a glob's wildcards are special; in the other kinds `*` is a character of the name.
  if (kind == fp8d::v1::INPUT_GLOB) return CheckGlob(field, value, roots, when);
  return ResolvesUnderRoots(field, value, value, roots);
}

Status CheckSpecPaths(const Message& message, std::string_view prefix, const std::vector<std::string>& roots,
                      PathCheck when) {
  return CheckPlanned(message, PlanFor(message.GetDescriptor()), prefix, roots, when);
}

std::vector<std::pair<std::string, fp8d::v1::PathKind>> PathFields(const Descriptor* descriptor) {
  std::vector<std::pair<std::string, fp8d::v1::PathKind>> out;
  std::set<const Descriptor*> seen;
  CollectPathFields(descriptor, "", seen, &out);
  return out;
}

Status CheckPathsBeforeOpen(const Message& spec, const google::protobuf::RepeatedPtrField<std::string>& allowed_roots) {
  if (allowed_roots.empty()) return OkStatus();
  const std::vector<std::string> roots(allowed_roots.begin(), allowed_roots.end());
  return CheckSpecPaths(spec, "", ResolveRoots(roots), PathCheck::kBeforeOpen);
}

void SetAllowedRoots(fp8d::v1::Job* job, const std::vector<std::string>& roots) {
  google::protobuf::RepeatedPtrField<std::string>* field = nullptr;
  switch (job->spec_case()) {
    case fp8d::v1::Job::kTrain: field = job->mutable_train()->mutable_allowed_roots(); break;
    case fp8d::v1::Job::kCalibrate: field = job->mutable_calibrate()->mutable_allowed_roots(); break;
    case fp8d::v1::Job::SPEC_NOT_SET: return;
  }
  field->Clear();
  for (const std::string& root : roots) field->Add()->assign(root);
}

}  // namespace fp8::jobspec
