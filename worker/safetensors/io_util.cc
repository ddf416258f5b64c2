// SPDX-License-Identifier: Apache-2.0
#include "worker/safetensors/io_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fp8::safetensors::internal {

std::string ErrnoMessage(int err) { return std::strerror(err); }

Status PreadFull(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return DataLossError(path + ": read failed at byte " + std::to_string(offset) + ": " +
                           ErrnoMessage(errno));
    }
    if (got == 0)
      return DataLossError(path + ": unexpected end of file at byte " + std::to_string(offset) +
                           " (file truncated?)");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return OkStatus();
}

Status PwriteFull(int fd, const void* src, size_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    ssize_t put = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (put < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(path + ": write failed at byte " + std::to_string(offset) + ": " +
                              ErrnoMessage(errno));
    }
    p += put;
    n -= static_cast<size_t>(put);
    offset += static_cast<uint64_t>(put);
  }
  return OkStatus();
}

}  // namespace fp8::safetensors::internal
