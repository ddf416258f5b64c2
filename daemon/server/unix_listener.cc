// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>

namespace fp8d::server {

fp8::Status UnixListener::Bind(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return fp8::InvalidArgumentError("--listen unix:" + path + ": path empty or too long");
  }
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) return fp8::InternalError(std::string("socket: ") + std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  struct stat st{};
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    // A socket someone still accepts on belongs to a live fp8d: leave it alone.
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (probe >= 0) close(probe);
    if (live) {
      close(fd_);
      fd_ = -1;
      return fp8::FailedPreconditionError("--listen unix:" + path + ": another process is serving on it");
    }
    unlink(path.c_str());  // stale, from a process that is gone
  }
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 128) != 0) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    return fp8::FailedPreconditionError("--listen unix:" + path + ": " + std::strerror(err));
  }
  chmod(path.c_str(), 0666);
  path_ = path;
  return fp8::OkStatus();
}

// Each connection gets an fd number above the last one handed out (wrapping at half the fd
// limit), so a number, and with it gRPC's "fd:N" peer name, is not reused right after a
// connection closes: a late call of a closed connection can never find a newer peer's uid.
int UnixListener::FreshNumber(int fd) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const int top = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20)) / 2;
  if (next_fd_ < 64 || next_fd_ >= top) next_fd_ = 64;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, next_fd_);
  if (moved < 0) return fd;
  close(fd);
  next_fd_ = moved + 1;
  return moved;
}

void UnixListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn < 0) continue;
      conn = FreshNumber(conn);
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        spdlog::warn("unix socket: SO_PEERCRED failed: {}", std::strerror(errno));
        close(conn);
        continue;
      }
      // Recorded before gRPC sees the fd, so no call can arrive before its uid is known.
      peers_->Set(conn, cred.uid);
      grpc::AddInsecureChannelFromFd(server, conn);
    }
  });
}

void UnixListener::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
    unlink(path_.c_str());
  }
}

}  // namespace fp8d::server
