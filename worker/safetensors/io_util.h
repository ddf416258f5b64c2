// SPDX-License-Identifier: Apache-2.0
// Small POSIX I/O helpers shared by the safetensors reader and writer: full reads/writes at an
// offset (looping over short transfers and EINTR) and errno → Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace fp8::safetensors::internal {

std::string ErrnoMessage(int err);
Status PreadFull(int fd, void* dst, size_t n, uint64_t offset, const std::string& path);
Status PwriteFull(int fd, const void* src, size_t n, uint64_t offset, const std::string& path);

}  // namespace fp8::safetensors::internal
