// SPDX-License-Identifier: Apache-2.0
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

// The non-empty components of `path`, as views into it.
std::vector<std::string_view> Components(const std::string& path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) out.emplace_back(path.data() + start, slash - start);
    start = slash + 1;
  }
  return out;
}

bool HasWildcard(std::string_view component) {
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

// What one check has found out about the components it walked: the fields of one job share
// their folders (data/ and the output_dir below one project folder), and each is looked at
// once per check, as if every field were resolved at the same moment. Only a check's own
// walks share it; the worker checks again before it opens anything.
class Lookups {
 public:
  explicit Lookups(size_t reserved) { entries_.reserve(reserved); }
  struct Entry {
    bool missing = false;  // ENOENT or ENOTDIR: the rest of the path is taken as written
    bool link = false;
    std::string target;    // the symlink's, when `link`
  };
  const Entry* Find(const std::string& path) const {
    for (const auto& [p, e] : entries_) {
      if (p == path) return &e;
    }
    return nullptr;
  }
  const Entry& Add(const std::string& path, Entry entry) { return entries_.emplace_back(path, std::move(entry)).second; }

 private:
  std::vector<std::pair<std::string, Entry>> entries_;  // a handful: a linear search is the fastest
};

// A job's paths share a few folders: room for them without growing.
constexpr size_t kLookupsReserved = 16;

// lstat (and readlink for a symlink) of one component.
StatusOr<Lookups::Entry> LookUp(const std::string& path) {
  Lookups::Entry entry;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) return InvalidArgumentError(std::string("cannot be resolved: ") + std::strerror(errno));
    entry.missing = true;
    return entry;
  }
  if (!S_ISLNK(st.st_mode)) return entry;
  std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : PATH_MAX) + 1, '\0');
  const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
  if (n <= 0 || static_cast<size_t>(n) >= target.size()) return InvalidArgumentError("cannot be resolved: unreadable symbolic link");
  target.resize(static_cast<size_t>(n));
  entry.link = true;
  entry.target = std::move(target);
  return entry;
}

// ResolvePath; `seen` (when not null) answers the components already looked at.
StatusOr<std::string> Resolve(const std::string& path, Lookups* seen) {
  if (path.empty() || path[0] != '/') return InvalidArgumentError("must be an absolute path");
  // `rest` from `pos` on is what is left to walk (a symlink's target is spliced in front of
  // it); `resolved` is the walk so far ("" is "/") and the very string lstat is given, so a
  // path without symlinks costs no allocation per component (but the copy `seen` keeps).
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
    const Lookups::Entry* known = seen != nullptr ? seen->Find(resolved) : nullptr;
    Lookups::Entry looked;
    if (known == nullptr) {
      FP8_ASSIGN_OR_RETURN(looked, LookUp(resolved));
      if (seen != nullptr) known = &seen->Add(resolved, std::move(looked));
    }
    const Lookups::Entry& entry = known != nullptr ? *known : looked;
    if (entry.missing) {
      missing = true;
      continue;
    }
    if (!entry.link) continue;
    if (++links > kMaxSymlinks) return InvalidArgumentError("cannot be resolved: too many levels of symbolic links");
    const std::string target = entry.target;  // `entry` may move when `seen` grows
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

// `value` (what the caller wrote, printed as such) resolved from `path` must lie under a root;
// `out` (when not null) receives what it resolved to.
Status ResolvesUnderRoots(std::string_view field, const std::string& value, const std::string& path,
                          const std::vector<std::string>& roots, Lookups* seen, std::string* out = nullptr) {
  auto resolved = Resolve(path, seen);
  if (!resolved.ok()) return Bad(field, value + ": " + resolved.status().message());
  for (const std::string& root : roots) {
    if (Under(*resolved, root)) {
      if (out != nullptr) *out = *std::move(resolved);
      return OkStatus();
    }
  }
  return Bad(field, value + " is outside the allowed roots " + RootList(roots));
}

Status CheckGlob(std::string_view field, const std::string& value, const std::vector<std::string>& roots,
                 PathCheck when, Lookups* seen) {
  std::string literal;
  literal.reserve(value.size());
  bool wild = false;
  for (const std::string_view part : Components(value)) {
    if (part == "..") return Bad(field, value + ": a glob must not contain '..'");
    wild = wild || HasWildcard(part);
    if (!wild) {
      literal += '/';
      literal += part;
    }
  }
  if (!wild) return ResolvesUnderRoots(field, value, value, roots, seen);
  FP8_RETURN_IF_ERROR(ResolvesUnderRoots(field, value, literal.empty() ? "/" : literal, roots, seen));
  if (when == PathCheck::kAtCreate) return OkStatus();
  // Each match: a wildcard may have matched a symlink that leaves the roots. The match itself
  // is not printed (its name is the target directory's).
  glob_t g{};
  const int rc = ::glob(value.c_str(), 0, nullptr, &g);
  Status status = OkStatus();
  for (size_t i = 0; rc == 0 && status.ok() && i < g.gl_pathc; ++i) {
    auto resolved = Resolve(g.gl_pathv[i], seen);
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

// CheckPath with the check's `seen`; a single OUTPUT_DIR field's resolved value goes to
// `resolved` (when not null).
Status CheckOne(std::string_view field, const std::string& value, fp8d::v1::PathKind kind,
                const std::vector<std::string>& roots, PathCheck when, Lookups* seen,
                ResolvedPaths* resolved = nullptr) {
  if (value.empty()) return OkStatus();
  if (value[0] != '/') return Bad(field, "must be an absolute path");
  // Only a glob's wildcards are special; in the other kinds `*` is a character of the name.
  if (kind == fp8d::v1::INPUT_GLOB) return CheckGlob(field, value, roots, when, seen);
  const bool output_dir = resolved != nullptr && kind == fp8d::v1::OUTPUT_DIR;
  return ResolvesUnderRoots(field, value, value, roots, seen, output_dir ? &resolved->output_dir : nullptr);
}

// `name` is the message's own path in errors on entry and on return; each field's is built
// in it in turn (a create checks every path, and only a refusal copies one).
Status CheckPlanned(const Message& message, const PathPlan& plan, std::string& name,
                    const std::vector<std::string>& roots, PathCheck when, Lookups* seen,
                    ResolvedPaths* resolved) {
  const Reflection* r = message.GetReflection();
  const size_t own = name.size();
  std::string scratch;  // GetStringReference's buffer, for a field not held as a std::string
  for (const PathPlan::Step& step : plan.steps) {
    const FieldDescriptor* f = step.field;
    name.resize(own);
    if (own > 0) name += '.';
    name += f->name();
    const size_t field = name.size();
    const auto index = [&](int j) {
      name.resize(field);
      name += '[' + std::to_string(j) + ']';
    };
    if (step.message == nullptr) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(message, f); ++j) {
          index(j);
          FP8_RETURN_IF_ERROR(CheckOne(name, r->GetRepeatedStringReference(message, f, j, &scratch), step.kind,
                                       roots, when, seen));
        }
      } else {
        FP8_RETURN_IF_ERROR(CheckOne(name, r->GetStringReference(message, f, &scratch), step.kind, roots, when,
                                     seen, resolved));
      }
    } else if (f->is_repeated()) {
      for (int j = 0; j < r->FieldSize(message, f); ++j) {
        index(j);
        FP8_RETURN_IF_ERROR(CheckPlanned(r->GetRepeatedMessage(message, f, j), *step.message, name, roots, when,
                                         seen, resolved));
      }
    } else if (r->HasField(message, f)) {
      FP8_RETURN_IF_ERROR(CheckPlanned(r->GetMessage(message, f), *step.message, name, roots, when, seen, resolved));
    }
  }
  name.resize(own);
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

StatusOr<std::string> ResolvePath(const std::string& path) { return Resolve(path, nullptr); }

Status CheckPath(std::string_view field, const std::string& value, fp8d::v1::PathKind kind,
                 const std::vector<std::string>& roots, PathCheck when) {
  return CheckOne(field, value, kind, roots, when, nullptr);
}

Status CheckSpecPaths(const Message& message, std::string_view prefix, const std::vector<std::string>& roots,
                      PathCheck when, ResolvedPaths* resolved) {
  ResolvedPaths found;
  Lookups seen(kLookupsReserved);
  std::string name(prefix);
  name.reserve(64);
  FP8_RETURN_IF_ERROR(CheckPlanned(message, PlanFor(message.GetDescriptor()), name, roots, when, &seen,
                                   resolved != nullptr ? &found : nullptr));
  if (resolved != nullptr) *resolved = std::move(found);
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
