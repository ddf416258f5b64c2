#include "jobspec/paths.h"

#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
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
  std::deque<std::string> pending;
  for (std::string& part : Components(path)) pending.push_back(std::move(part));
  std::string resolved;  // resolved so far; "" is "/"
  bool missing = false;
  int links = 0;
  while (!pending.empty()) {
    std::string part = std::move(pending.front());
    pending.pop_front();
    if (part == ".") continue;
    if (part == "..") {
      // Below a directory that does not exist yet the kernel would apply it to whatever is
      // created there later, which may be a symlink.
      if (missing) return InvalidArgumentError("must not contain '..' below a directory that does not exist");
      resolved = resolved.substr(0, resolved.rfind('/'));
      continue;
    }
    std::string next = resolved + "/" + part;
    if (missing) {
      resolved = std::move(next);
      continue;
    }
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno != ENOENT && errno != ENOTDIR) return InvalidArgumentError(std::string("cannot be resolved: ") + std::strerror(errno));
      missing = true;
      resolved = std::move(next);
      continue;
    }
    if (!S_ISLNK(st.st_mode)) {
      resolved = std::move(next);
      continue;
    }
    if (++links > kMaxSymlinks) return InvalidArgumentError("cannot be resolved: too many levels of symbolic links");
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : PATH_MAX) + 1, '\0');
    const ssize_t n = ::readlink(next.c_str(), target.data(), target.size());
    if (n <= 0 || static_cast<size_t>(n) >= target.size()) return InvalidArgumentError("cannot be resolved: unreadable symbolic link");
    target.resize(static_cast<size_t>(n));
    std::vector<std::string> spliced = Components(target);
    pending.insert(pending.begin(), spliced.begin(), spliced.end());
    if (target[0] == '/') resolved.clear();
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
  const Descriptor* d = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string name = Join(prefix, f->name());
    const fp8d::v1::PathKind kind = f->options().GetExtension(fp8d::v1::path);
    if (kind != fp8d::v1::PATH_KIND_UNSPECIFIED) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(message, f); ++j) {
          FP8_RETURN_IF_ERROR(CheckPath(name + "[" + std::to_string(j) + "]", r->GetRepeatedString(message, f, j),
                                        kind, roots, when));
        }
      } else {
        FP8_RETURN_IF_ERROR(CheckPath(name, r->GetString(message, f), kind, roots, when));
      }
      continue;
    }
    if (f->type() != FieldDescriptor::TYPE_MESSAGE || !HoldsPaths(f->message_type())) continue;
    if (f->is_repeated()) {
      for (int j = 0; j < r->FieldSize(message, f); ++j) {
        FP8_RETURN_IF_ERROR(CheckSpecPaths(r->GetRepeatedMessage(message, f, j), name + "[" + std::to_string(j) + "]",
                                           roots, when));
      }
    } else if (r->HasField(message, f)) {
      FP8_RETURN_IF_ERROR(CheckSpecPaths(r->GetMessage(message, f), name, roots, when));
    }
  }
  return OkStatus();
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
