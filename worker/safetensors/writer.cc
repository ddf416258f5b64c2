// SPDX-License-Identifier: Apache-2.0
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include <nlohmann/json.hpp>

#include "worker/safetensors/io_util.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::safetensors {

using internal::ErrnoMessage;
using internal::PreadFull;
using internal::PwriteFull;

namespace {

std::string DirName(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string TempPathFor(const std::string& path) {
  return path + ".tmp-" + std::to_string(::getpid());
}

}  // namespace

Status FsyncParentDir(const std::string& path) {
  const std::string dir = DirName(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return UnavailableError(dir + ": cannot open directory: " + ErrnoMessage(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return UnavailableError(dir + ": fsync failed: " + ErrnoMessage(err));
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string tmp = TempPathFor(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError(tmp + ": cannot create: " + ErrnoMessage(errno));
  Status st = PwriteFull(fd, contents.data(), contents.size(), 0, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = UnavailableError(tmp + ": fsync failed: " + ErrnoMessage(errno));
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = UnavailableError(path + ": rename failed: " + ErrnoMessage(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncParentDir(path);
}

StatusOr<Writer> Writer::Create(const std::string& path, std::vector<TensorInfo> infos,
                                const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (auto& t : infos) {
    if (t.name == "__metadata__") return InvalidArgumentError(path + ": tensor name \"__metadata__\" is reserved");
    if (!names.insert(t.name).second)
      return InvalidArgumentError(path + ": duplicate tensor \"" + t.name + "\"");
    if (DTypeSize(t.dtype) == 0) return InvalidArgumentError(path + ": tensor \"" + t.name + "\": bad dtype");
    auto n = NumElements(t.shape);
    if (!n.ok()) return InvalidArgumentError(path + ": tensor \"" + t.name + "\": " + n.status().message());
    t.begin = 0;
    t.end = *n * DTypeSize(t.dtype);
  }
  // Larger elements first, then by name (the reference's order): every tensor starts at a
  // multiple of its element size because the data section starts 8-aligned.
  std::sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    size_t sa = DTypeSize(a.dtype), sb = DTypeSize(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  uint64_t offset = 0;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  for (auto& t : infos) {
    uint64_t size = t.end;
    t.begin = offset;
    t.end = offset + size;
    offset = t.end;
    header[t.name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');

  Writer w;
  w.path_ = path;
  w.tmp_path_ = TempPathFor(path);
  w.infos_ = std::move(infos);
  for (size_t i = 0; i < w.infos_.size(); ++i) w.index_[w.infos_[i].name] = i;
  w.written_ = std::make_unique<std::atomic<uint64_t>[]>(w.infos_.size());
  for (size_t i = 0; i < w.infos_.size(); ++i) w.written_[i].store(0);
  w.data_offset_ = 8 + text.size();
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return UnavailableError(w.tmp_path_ + ": cannot create: " + ErrnoMessage(errno));
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  FP8_RETURN_IF_ERROR(PwriteFull(w.fd_, len, 8, 0, w.tmp_path_));
  FP8_RETURN_IF_ERROR(PwriteFull(w.fd_, text.data(), text.size(), 8, w.tmp_path_));
  if (::ftruncate(w.fd_, static_cast<off_t>(w.data_offset_ + offset)) != 0)
    return UnavailableError(w.tmp_path_ + ": cannot size file: " + ErrnoMessage(errno));
  return w;
}

Writer::Writer(Writer&& o) noexcept { *this = std::move(o); }

Writer& Writer::operator=(Writer&& o) noexcept {
  if (this != &o) {
    Abort();
    path_ = std::move(o.path_);
    tmp_path_ = std::move(o.tmp_path_);
    fd_ = o.fd_;
    o.fd_ = -1;
    data_offset_ = o.data_offset_;
    infos_ = std::move(o.infos_);
    index_ = std::move(o.index_);
    written_ = std::move(o.written_);
  }
  return *this;
}

Writer::~Writer() { Abort(); }

void Writer::Abort() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    fd_ = -1;
  }
}

const TensorInfo* Writer::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

Status Writer::WriteAt(const std::string& name, uint64_t offset, const void* data, size_t nbytes) {
  if (fd_ < 0) return FailedPreconditionError(path_ + ": writer is closed");
  auto it = index_.find(name);
  if (it == index_.end()) return NotFoundError(path_ + ": no tensor \"" + name + "\" in the header");
  const TensorInfo& t = infos_[it->second];
  if (offset > t.nbytes() || nbytes > t.nbytes() - offset)
    return OutOfRangeError(path_ + ": tensor \"" + name + "\": write past its " +
                           std::to_string(t.nbytes()) + " bytes");
  const uint64_t file_offset = data_offset_ + t.begin + offset;
  FP8_RETURN_IF_ERROR(PwriteFull(fd_, data, nbytes, file_offset, tmp_path_));
  StartWriteback(file_offset, nbytes);
  written_[it->second].fetch_add(nbytes);
  return OkStatus();
}

// Starts writing a just-written range to disk without waiting for it, so the disk works while
// the next band converts and Commit's fsync finds little left to flush (on 2 cores, the serial
// fsync at the end of each shard was the gap between tmpfs and disk throughput). Advisory: a
// filesystem without sync_file_range just leaves everything to Commit's fsync.
void Writer::StartWriteback(uint64_t offset, uint64_t nbytes) const {
  ::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(nbytes),
                    SYNC_FILE_RANGE_WRITE);
}

Status Writer::Write(const std::string& name, const void* data, size_t nbytes) {
  const TensorInfo* t = Find(name);
  if (!t) return NotFoundError(path_ + ": no tensor \"" + name + "\" in the header");
  if (nbytes != t->nbytes())
    return InvalidArgumentError(path_ + ": tensor \"" + name + "\" needs " +
                                std::to_string(t->nbytes()) + " bytes, got " + std::to_string(nbytes));
  return WriteAt(name, 0, data, nbytes);
}

Status Writer::CopyFrom(const Reader& reader, const std::string& src_name, const std::string& dst_name) {
  const TensorInfo* src = reader.Find(src_name);
  if (!src) return NotFoundError(reader.path() + ": no tensor \"" + src_name + "\"");
  const TensorInfo* dst = Find(dst_name);
  if (!dst) return NotFoundError(path_ + ": no tensor \"" + dst_name + "\" in the header");
  if (src->nbytes() != dst->nbytes() || src->dtype != dst->dtype)
    return InvalidArgumentError(path_ + ": tensor \"" + dst_name + "\" differs in dtype or size from its source");
  // copy_file_range lets the kernel move the bytes (no trip through user space); fall back to
  // a buffered copy where the filesystem pair does not support it.
  loff_t in_off = static_cast<loff_t>(reader.data_offset() + src->begin);
  loff_t out_off = static_cast<loff_t>(data_offset_ + dst->begin);
  uint64_t left = src->nbytes();
  while (left > 0) {
    ssize_t n = ::copy_file_range(reader.fd(), &in_off, fd_, &out_off, left, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) break;
      return UnavailableError(path_ + ": copying \"" + dst_name + "\" failed: " + ErrnoMessage(errno));
    }
    if (n == 0) return DataLossError(reader.path() + ": unexpected end of file copying \"" + src_name + "\"");
    left -= static_cast<uint64_t>(n);
  }
  if (left > 0) {
    std::vector<uint8_t> buf(std::min<uint64_t>(left, 8u << 20));
    while (left > 0) {
      size_t n = std::min<uint64_t>(left, buf.size());
      FP8_RETURN_IF_ERROR(PreadFull(reader.fd(), buf.data(), n, static_cast<uint64_t>(in_off), reader.path()));
      FP8_RETURN_IF_ERROR(PwriteFull(fd_, buf.data(), n, static_cast<uint64_t>(out_off), tmp_path_));
      in_off += static_cast<loff_t>(n);
      out_off += static_cast<loff_t>(n);
      left -= n;
    }
  }
  StartWriteback(data_offset_ + dst->begin, dst->nbytes());
  written_[index_.at(dst_name)].fetch_add(dst->nbytes());
  return OkStatus();
}

Status Writer::Commit() {
  if (fd_ < 0) return FailedPreconditionError(path_ + ": writer is closed");
  for (size_t i = 0; i < infos_.size(); ++i)
    if (written_[i].load() != infos_[i].nbytes())
      return FailedPreconditionError(path_ + ": tensor \"" + infos_[i].name + "\" has " +
                                     std::to_string(written_[i].load()) + " of " +
                                     std::to_string(infos_[i].nbytes()) + " bytes written");
  if (::fsync(fd_) != 0) return UnavailableError(tmp_path_ + ": fsync failed: " + ErrnoMessage(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return UnavailableError(path_ + ": rename failed: " + ErrnoMessage(err));
  }
  return FsyncParentDir(path_);
}

Status WriteFile(const std::string& path, const std::vector<TensorData>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  std::vector<TensorInfo> infos;
  infos.reserve(tensors.size());
  for (const auto& t : tensors) infos.push_back(TensorInfo{t.name, t.dtype, t.shape, 0, 0});
  FP8_ASSIGN_OR_RETURN(Writer w, Writer::Create(path, std::move(infos), metadata));
  for (const auto& t : tensors) FP8_RETURN_IF_ERROR(w.Write(t.name, t.data, t.nbytes));
  return w.Commit();
}

}  // namespace fp8::safetensors
