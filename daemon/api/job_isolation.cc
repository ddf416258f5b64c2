#include "daemon/api/job_isolation.h"

#include <pwd.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>

namespace fp8d::api {

namespace fs = std::filesystem;

namespace {

fp8::Status Bad(const std::string& field, const std::string& why) {
  return fp8::InvalidArgumentError(field + ": " + why);
}

// realpath of the nearest existing ancestor, with the rest appended; the rest may not hold
// ".." (it could climb out once created).
fp8::StatusOr<std::string> Resolve(const std::string& field, const std::string& path) {
  fs::path p(path);
  fs::path rest;
  while (!p.empty()) {
    char buf[PATH_MAX];
    if (realpath(p.c_str(), buf) != nullptr) {
      for (const auto& part : rest) {
        if (part == "..") return Bad(field, "must not contain '..' below an existing directory");
      }
      return rest.empty() ? std::string(buf) : (fs::path(buf) / rest).lexically_normal().string();
    }
    if (p == p.root_path()) break;
    rest = rest.empty() ? p.filename() : p.filename() / rest;
    p = p.parent_path();
  }
  return Bad(field, "cannot be resolved");
}

bool Under(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p == root || p.rfind(root + "/", 0) == 0;
}

fp8::Status CheckPath(const std::string& field, const std::string& value,
                      const std::vector<std::string>& roots) {
  if (value.empty()) return fp8::OkStatus();
  if (value[0] != '/') return Bad(field, "must be an absolute path");
  std::string literal = value;
  if (const size_t glob = value.find_first_of("*?["); glob != std::string::npos) {
    literal = value.substr(0, value.rfind('/', glob) + 1);
  }
  auto resolved = Resolve(field, literal);
  if (!resolved.ok()) return resolved.status();
  for (const std::string& root : roots) {
    if (Under(*resolved, root)) return fp8::OkStatus();
  }
  std::string list;
  for (const std::string& root : roots) list += (list.empty() ? "" : ", ") + root;
  return Bad(field, value + " resolves to " + *resolved + ", outside the allowed roots (" + list +
                        ")");
}

}  // namespace

int64_t RunAsUid(const IsolationOptions& options, const Principal& principal) {
  if (!options.run_as_owner) return 0;
  const int64_t uid = principal.uid > 0 ? principal.uid : options.default_uid;
  return uid > 0 ? uid : options.default_uid;
}

std::vector<std::string> AllowedRoots(const IsolationOptions& options, int64_t run_as_uid) {
  std::vector<std::string> roots = options.allowed_roots;
  if (roots.empty()) {
    roots.push_back(options.data_dir);
    const uid_t uid = run_as_uid > 0 ? static_cast<uid_t>(run_as_uid) : geteuid();
    if (struct passwd* pw = getpwuid(uid); pw != nullptr && pw->pw_dir != nullptr) {
      roots.push_back(pw->pw_dir);
    }
  }
  std::vector<std::string> resolved;
  for (const std::string& root : roots) {
    char buf[PATH_MAX];
    if (realpath(root.c_str(), buf) != nullptr) resolved.push_back(buf);
  }
  return resolved;
}

fp8::Status CheckJobPaths(const fp8d::v1::Job& job, const std::vector<std::string>& roots) {
  switch (job.spec_case()) {  // exhaustive: a new kind's paths must be listed here
    case fp8d::v1::Job::kTrain: {
      const auto& t = job.train();
      FP8_RETURN_IF_ERROR(CheckPath("job.train.data.train", t.data().train(), roots));
      FP8_RETURN_IF_ERROR(CheckPath("job.train.data.val", t.data().val(), roots));
      return CheckPath("job.train.output_dir", t.output_dir(), roots);
    }
    case fp8d::v1::Job::kCalibrate: {
      const auto& c = job.calibrate();
      FP8_RETURN_IF_ERROR(CheckPath("job.calibrate.input", c.input(), roots));
      FP8_RETURN_IF_ERROR(CheckPath("job.calibrate.output_dir", c.output_dir(), roots));
      return CheckPath("job.calibrate.activations.data", c.activations().data(), roots);
    }
    case fp8d::v1::Job::SPEC_NOT_SET:
      break;
  }
  return fp8::OkStatus();
}

fp8::Status ValidateJobEnv(const fp8d::v1::Job& job) {
  if (job.env_size() > 64) return Bad("job.env", "at most 64 variables");
  for (const auto& [key, value] : job.env()) {
    const std::string field = "job.env[" + key + "]";
    bool ok = !key.empty() && key.size() <= 128 && !std::isdigit(static_cast<unsigned char>(key[0]));
    for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) return Bad(field, "key must match [A-Za-z_][A-Za-z0-9_]* (at most 128 characters)");
    if (key.rfind("FP8D_", 0) == 0) return Bad(field, "FP8D_* variables are set by the launcher");
    if (value.size() > 4096) return Bad(field, "value must be at most 4096 bytes");
    if (value.find('\0') != std::string::npos) return Bad(field, "value must not contain NUL");
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::api
