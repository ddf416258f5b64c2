// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/data_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fp8d::server {

namespace {

std::string ReadHolder(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

fp8::Status LockDataDir(const std::string& data_dir) {
  const std::string path = data_dir + "/fp8d.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fp8::FailedPreconditionError("--data-dir " + data_dir + ": cannot open " + path + ": " +
                                        std::strerror(errno));
  }
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    std::string holder = ReadHolder(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return fp8::FailedPreconditionError("--data-dir " + data_dir +
                                          ": another fp8d (pid " + holder +
                                          ") is using this data dir (lock " + path + ")");
    }
    return fp8::FailedPreconditionError("--data-dir " + data_dir + ": flock " + path + ": " +
                                        std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // A failed write leaves only the holder's pid out of a second daemon's message; the lock
  // itself holds, so it is not an error.
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] ssize_t n = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::server
