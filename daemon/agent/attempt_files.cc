#include <filesystem>
#include <set>

#include "daemon/agent/agent.h"

namespace fp8d::agent {

Status Agent::RemoveAttemptFiles(const std::string& job_id, const std::vector<std::string>& attempt_dirs) {
  namespace fs = std::filesystem;
  std::set<fs::path> parents;
  for (const auto& dir : attempt_dirs) {
    const fs::path path(dir);
    // Only attempt folders: a name that is not attempt-<n> is not ours to remove.
    if (path.filename().string().rfind("attempt-", 0) != 0) {
      return fp8::InvalidArgumentError("job " + job_id + ": " + dir + " is not an attempt folder");
    }
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) return fp8::InternalError("removing " + dir + ": " + ec.message());
    parents.insert(path.parent_path());
  }
  for (const auto& parent : parents) {
    std::error_code ec;
    if (fs::is_empty(parent, ec) && !ec) fs::remove(parent, ec);  // non-recursive: empty only
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::agent
