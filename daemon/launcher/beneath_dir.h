// SPDX-License-Identifier: Apache-2.0
// Files in a folder another user may write. A job's folder (jobs/<id> and below) belongs to the
// job's owner, who can put a symbolic link, a FIFO or a hard link under any name fp8d uses
// there; fp8d runs as root. So every name below the jobs root is opened relative to a
// directory fd, one component at a time, with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
// (O_NOFOLLOW where the kernel has no openat2), and ownership, modes and sizes are changed on
// the fd, never on the name. An entry that is not what fp8d expects there (a link, a FIFO where a
// file belongs, a file where a folder belongs) is refused with PERMISSION_DENIED naming it;
// other I/O failures are UNAVAILABLE (the controller's own disk), missing entries NOT_FOUND.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8d::launcher {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);
  // A second fd on the same open file (close-on-exec).
  fp8::StatusOr<UniqueFd> Dup() const;

 private:
  int fd_ = -1;
};

// Who gets an entry fp8d made: uid 0 leaves it as created (fp8d's own user, its umask).
struct Handover {
  int64_t uid = 0;
  int64_t gid = 0;
  mode_t mode = 0;
};

// fchown and fchmod of an open file or directory when handover.uid > 0; `what` names it.
fp8::Status HandOver(int fd, const Handover& handover, const std::string& what);

class BeneathDir {
 public:
  // `path` itself is trusted (it and every folder above it are root's: the jobs root), so it is
  // opened by name, created with its parents when `create`.
  static fp8::StatusOr<BeneathDir> OpenTrusted(const std::string& path, bool create);

  // The folder `name` (one component) here; made with `mode` (less the umask) when missing and
  // `create`. An existing real folder is opened as it is.
  fp8::StatusOr<BeneathDir> OpenDir(const std::string& name, bool create = false, mode_t mode = 0755) const;
  // An existing regular file with no other hard link, `flags` as for open(2) (O_RDONLY,
  // O_WRONLY | O_APPEND, ...).
  fp8::StatusOr<UniqueFd> OpenFile(const std::string& name, int flags) const;
  // A new, empty regular file made by fp8d: a regular file of that name is replaced (unlinked,
  // never truncated: it may be a hard link), anything else there is refused.
  fp8::StatusOr<UniqueFd> CreateFile(const std::string& name, int flags, mode_t mode = 0644) const;
  // `content` under `name`, whole or not at all: written to `<name>.tmp` (made as CreateFile
  // does), fsynced, handed over on its fd, renamed over `name`, and the folder fsynced.
  fp8::Status WriteAtomically(const std::string& name, const std::string& content,
                              const Handover& handover = {}, mode_t mode = 0644) const;
  // Names of the entries here (without "." and "..").
  fp8::StatusOr<std::vector<std::string>> List() const;
  // Removes `name` and, when it is a folder, everything in it: links are removed, never
  // followed, and no mount point is crossed. A missing `name` is not an error.
  fp8::Status RemoveTree(const std::string& name) const;
  // Removes the folder `name` when it is empty; OK when it is not, or missing.
  fp8::Status RemoveDirIfEmpty(const std::string& name) const;
  // This folder's owner and mode (HandOver on its fd).
  fp8::Status HandOverSelf(const Handover& handover) const { return HandOver(fd_.get(), handover, path_); }

  int fd() const { return fd_.get(); }
  // For messages only: never opened by name.
  const std::string& path() const { return path_; }

 private:
  BeneathDir(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  fp8::Status RemoveTreeAt(const std::string& name, dev_t device, int depth) const;

  UniqueFd fd_;
  std::string path_;
};

}  // namespace fp8d::launcher
