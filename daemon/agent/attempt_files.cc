// The attempt directory as the default launcher keeps it: rank logs read for GetJobLogs, and
// removal of a deleted job's attempt folders.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "daemon/agent/agent.h"

namespace fp8d::agent {
namespace {

// A file that may still grow: each Read continues where the last stopped.
class FileRankStream final : public RankStream {
 public:
  FileRankStream(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~FileRankStream() override { ::close(fd_); }

  StatusOr<std::string> Read(size_t max_bytes) override {
    std::string buf(max_bytes, '\0');
    ssize_t n;
    do {
      n = ::read(fd_, buf.data(), buf.size());
    } while (n < 0 && errno == EINTR);
    if (n < 0) return fp8::InternalError("read " + path_ + ": " + std::strerror(errno));
    buf.resize(static_cast<size_t>(n));
    return buf;
  }

 private:
  const std::string path_;
  const int fd_;
};

}  // namespace

StatusOr<std::unique_ptr<RankStream>> Agent::OpenRankLog(const std::string& job_id, int attempt,
                                                         const std::string& attempt_dir,
                                                         int rank) const {
  const std::string path = attempt_dir + "/rank-" + std::to_string(rank) + ".log";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    return fp8::NotFoundError("no log yet for rank " + std::to_string(rank) + " of job " + job_id +
                              " attempt " + std::to_string(attempt));
  }
  if (fd < 0) return fp8::InternalError("open " + path + ": " + std::strerror(errno));
  return std::unique_ptr<RankStream>(std::make_unique<FileRankStream>(path, fd));
}

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
