// SPDX-License-Identifier: Apache-2.0
#include "daemon/launcher/beneath_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fp8d::launcher {
namespace {

// Deeper than this, a tree in a job folder is not fp8d's (its own go two levels down): removal
// stops there rather than hold an fd per level.
constexpr int kMaxRemoveDepth = 64;

std::string Join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

fp8::Status Refused(const std::string& path, const std::string& why) {
  return fp8::Status(fp8::StatusCode::kPermissionDenied,
                     path + ": " + why + "; fp8d follows no link and opens nothing but its own files and "
                     "folders in a job folder");
}

// errno of an open, mkdir or rename beneath a folder, as a status naming `path`.
fp8::Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  switch (err) {
    case ELOOP:
      return Refused(path, "is a symbolic link");
    case EXDEV:
      return Refused(path, "leads outside its folder");
    case ENOTDIR:
      return Refused(path, "is not a folder");
    case EISDIR:
      return Refused(path, "is a folder");
    case ENXIO:
      return Refused(path, "is not a regular file");
    case ENOENT:
      return fp8::NotFoundError(what + " " + path + ": " + std::strerror(err));
    default:
      return fp8::UnavailableError(what + " " + path + ": " + std::strerror(err));
  }
}

fp8::Status CheckName(const std::string& dir, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return fp8::InvalidArgumentError(dir + ": '" + name + "' is not a name in it");
  }
  return fp8::OkStatus();
}

// openat of one name beneath `dirfd` that follows no symbolic link, also not as the last
// component. openat2 says so outright; where the kernel lacks it (ENOSYS), O_NOFOLLOW on a
// single component means the same.
int OpenBeneath(int dirfd, const std::string& name, int flags, mode_t mode) {
  static std::atomic<bool> have_openat2{true};
  flags |= O_CLOEXEC | O_NOCTTY;
  if (have_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.mode = (flags & O_CREAT) != 0 ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd;
    do {
      fd = ::syscall(SYS_openat2, dirfd, name.c_str(), &how, sizeof(how));
    } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
    if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
    have_openat2.store(false, std::memory_order_relaxed);
  }
  int fd;
  do {
    fd = ::openat(dirfd, name.c_str(), flags | O_NOFOLLOW, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// A regular file opened with O_NONBLOCK (a FIFO planted under the name must not block fp8d),
// which is then dropped again (it means nothing for a regular file, but the fd may become a
// worker's stdout).
fp8::StatusOr<UniqueFd> CheckRegular(UniqueFd fd, const std::string& path, int flags) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) return Refused(path, "is not a regular file");
  if (::fcntl(fd.get(), F_SETFL, flags & O_APPEND) != 0) {
    return ErrnoStatus("fcntl", path, errno);
  }
  return fd;
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

fp8::StatusOr<UniqueFd> UniqueFd::Dup() const {
  const int fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return fp8::UnavailableError(std::string("dup: ") + std::strerror(errno));
  return UniqueFd(fd);
}

fp8::Status HandOver(int fd, const Handover& handover, const std::string& what) {
  if (handover.uid <= 0) return fp8::OkStatus();
  if (::fchown(fd, static_cast<uid_t>(handover.uid), static_cast<gid_t>(handover.gid)) != 0) {
    return fp8::UnavailableError("chown " + what + " to uid " + std::to_string(handover.uid) + ": " +
                                 std::strerror(errno));
  }
  if (::fchmod(fd, handover.mode) != 0) {
    return fp8::UnavailableError("chmod " + what + ": " + std::strerror(errno));
  }
  return fp8::OkStatus();
}

fp8::StatusOr<BeneathDir> BeneathDir::OpenTrusted(const std::string& path, bool create) {
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return fp8::UnavailableError("creating " + path + ": " + ec.message());
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  return BeneathDir(UniqueFd(fd), path);
}

fp8::StatusOr<BeneathDir> BeneathDir::OpenDir(const std::string& name, bool create, mode_t mode) const {
  FP8_RETURN_IF_ERROR(CheckName(path_, name));
  const std::string path = Join(path_, name);
  // mkdirat never follows a link at the name: a planted one makes it EEXIST, and the open
  // below refuses it.
  if (create && ::mkdirat(fd_.get(), name.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoStatus("creating", path, errno);
  }
  const int fd = OpenBeneath(fd_.get(), name, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  return BeneathDir(UniqueFd(fd), path);
}

fp8::StatusOr<UniqueFd> BeneathDir::OpenFile(const std::string& name, int flags) const {
  FP8_RETURN_IF_ERROR(CheckName(path_, name));
  const std::string path = Join(path_, name);
  const int fd = OpenBeneath(fd_.get(), name, (flags & ~(O_CREAT | O_TRUNC)) | O_NONBLOCK, 0);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  FP8_ASSIGN_OR_RETURN(UniqueFd file, CheckRegular(UniqueFd(fd), path, flags));
  // fp8d's own files have one name. A second one is a hard link the owner made, perhaps to a
  // file it may not read (where fs.protected_hardlinks is off).
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) return ErrnoStatus("fstat", path, errno);
  if (st.st_nlink != 1) return Refused(path, "has other hard links");
  return file;
}

fp8::StatusOr<UniqueFd> BeneathDir::CreateFile(const std::string& name, int flags, mode_t mode) const {
  FP8_RETURN_IF_ERROR(CheckName(path_, name));
  const std::string path = Join(path_, name);
  struct stat st {};
  if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) return Refused(path, "is a symbolic link");
    if (!S_ISREG(st.st_mode)) return Refused(path, "is not a regular file");
    if (::unlinkat(fd_.get(), name.c_str(), 0) != 0 && errno != ENOENT) return ErrnoStatus("removing", path, errno);
  } else if (errno != ENOENT) {
    return ErrnoStatus("stat", path, errno);
  }
  const int fd = OpenBeneath(fd_.get(), name, flags | O_CREAT | O_EXCL | O_NONBLOCK, mode);
  if (fd < 0 && errno == EEXIST) return Refused(path, "appeared while fp8d was creating it");
  if (fd < 0) return ErrnoStatus("creating", path, errno);
  return CheckRegular(UniqueFd(fd), path, flags);
}

fp8::Status BeneathDir::WriteAtomically(const std::string& name, const std::string& content,
                                        const Handover& handover, mode_t mode) const {
  const std::string tmp = name + ".tmp";
  FP8_ASSIGN_OR_RETURN(UniqueFd fd, CreateFile(tmp, O_WRONLY, mode));
  const std::string tmp_path = Join(path_, tmp);
  auto fail = [&](const std::string& what, int err) {
    ::unlinkat(fd_.get(), tmp.c_str(), 0);
    return ErrnoStatus(what, tmp_path, err);
  };
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("writing", errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return fail("fsync", errno);
  if (fp8::Status st = HandOver(fd.get(), handover, tmp_path); !st.ok()) {
    ::unlinkat(fd_.get(), tmp.c_str(), 0);
    return st;
  }
  // renameat replaces whatever `name` is (a link included) without following it.
  if (::renameat(fd_.get(), tmp.c_str(), fd_.get(), name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(fd_.get(), tmp.c_str(), 0);
    return ErrnoStatus("renaming " + tmp_path + " to", Join(path_, name), err);
  }
  if (::fsync(fd_.get()) != 0) return ErrnoStatus("fsync", path_, errno);
  return fp8::OkStatus();
}

fp8::StatusOr<std::vector<std::string>> BeneathDir::List() const {
  // A fresh open of "." (not a dup): a directory stream of its own, at the start.
  const int fd = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("listing", path_, errno);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("listing", path_, err);
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoStatus("listing", path_, err);
  return names;
}

fp8::Status BeneathDir::RemoveTree(const std::string& name) const {
  FP8_RETURN_IF_ERROR(CheckName(path_, name));
  struct stat self {};
  if (::fstat(fd_.get(), &self) != 0) return ErrnoStatus("fstat", path_, errno);
  return RemoveTreeAt(name, self.st_dev, 0);
}

fp8::Status BeneathDir::RemoveTreeAt(const std::string& name, dev_t device, int depth) const {
  const std::string path = Join(path_, name);
  struct stat st {};
  if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? fp8::OkStatus() : ErrnoStatus("stat", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    if (depth >= kMaxRemoveDepth) return Refused(path, "is nested deeper than fp8d's own folders");
    fp8::StatusOr<BeneathDir> sub = OpenDir(name);
    if (sub.ok()) {
      struct stat opened {};
      if (::fstat(sub->fd(), &opened) != 0) return ErrnoStatus("fstat", path, errno);
      if (opened.st_dev != device) return Refused(path, "is a mount point");
      FP8_ASSIGN_OR_RETURN(std::vector<std::string> names, sub->List());
      for (const std::string& entry : names) FP8_RETURN_IF_ERROR(sub->RemoveTreeAt(entry, device, depth + 1));
      if (::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return fp8::OkStatus();
      return ErrnoStatus("removing", path, errno);
    }
    // Replaced by a link since the stat: the link goes, as any other non-folder.
    if (sub.status().code() != fp8::StatusCode::kPermissionDenied) return sub.status();
  }
  if (::unlinkat(fd_.get(), name.c_str(), 0) == 0 || errno == ENOENT) return fp8::OkStatus();
  return ErrnoStatus("removing", path, errno);
}

fp8::Status BeneathDir::RemoveDirIfEmpty(const std::string& name) const {
  FP8_RETURN_IF_ERROR(CheckName(path_, name));
  if (::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) == 0) return fp8::OkStatus();
  if (errno == ENOENT || errno == ENOTEMPTY || errno == EEXIST) return fp8::OkStatus();
  return ErrnoStatus("removing", Join(path_, name), errno);
}

}  // namespace fp8d::launcher
