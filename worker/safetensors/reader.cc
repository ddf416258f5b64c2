// SPDX-License-Identifier: Apache-2.0
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <nlohmann/json.hpp>

#include "worker/safetensors/io_util.h"
#include "worker/safetensors/safetensors.h"

namespace fp8::safetensors {

using internal::ErrnoMessage;
using internal::PreadFull;

namespace {

// The reference implementation refuses headers over 100 MB; a real one is a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

Status Bad(const std::string& path, const std::string& what) {
  return InvalidArgumentError(path + ": " + what);
}
Status Damaged(const std::string& path, const std::string& what) {
  return DataLossError(path + ": " + what);
}

std::string Range(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
}

// One header entry → TensorInfo, checking types, dtype and that shape × dtype = byte range.
StatusOr<TensorInfo> ParseEntry(const std::string& path, const std::string& name,
                                const nlohmann::json& v) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!v.is_object()) return Bad(path, where + "header entry is not an object");
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return Bad(path, where + "missing string \"dtype\"");
  auto dtype = ParseDType(dt->get<std::string>());
  if (!dtype.ok()) return Bad(path, where + dtype.status().message());
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return Bad(path, where + "missing array \"shape\"");
  TensorInfo info;
  info.name = name;
  info.dtype = *dtype;
  for (const auto& d : *sh) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return Bad(path, where + "shape has a dimension that is not a non-negative integer");
    info.shape.push_back(d.get<int64_t>());
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    return Bad(path, where + "\"data_offsets\" must be two non-negative integers");
  info.begin = (*off)[0].get<uint64_t>();
  info.end = (*off)[1].get<uint64_t>();
  if (info.end < info.begin)
    return Bad(path, where + "data_offsets " + Range(info.begin, info.end) + " end before they begin");
  auto numel = NumElements(info.shape);
  if (!numel.ok()) return Bad(path, where + numel.status().message());
  const size_t esize = DTypeSize(info.dtype);
  if (*numel > UINT64_MAX / esize || *numel * esize != info.end - info.begin)
    return Bad(path, where + "shape × " + DTypeName(info.dtype) + " is " +
                         std::to_string(*numel) + " elements × " + std::to_string(esize) +
                         " bytes but data_offsets " + Range(info.begin, info.end) + " hold " +
                         std::to_string(info.end - info.begin) + " bytes");
  return info;
}

}  // namespace

struct Reader::Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int Reader::fd() const { return fd_ ? fd_->fd : -1; }

StatusOr<Reader> Reader::Open(const std::string& path) {
  Reader r;
  r.path_ = path;
  r.fd_ = std::make_shared<Fd>();
  r.fd_->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r.fd_->fd < 0) {
    int err = errno;
    if (err == ENOENT) return NotFoundError(path + ": no such file");
    return Bad(path, "cannot open: " + ErrnoMessage(err));
  }
  struct stat st {};
  if (::fstat(r.fd_->fd, &st) != 0) return Bad(path, "cannot stat: " + ErrnoMessage(errno));
  if (!S_ISREG(st.st_mode)) return Bad(path, "not a regular file");
  r.file_size_ = static_cast<uint64_t>(st.st_size);
  if (r.file_size_ < 8)
    return Damaged(path, "not a safetensors file, or truncated: " + std::to_string(r.file_size_) +
                             " bytes, shorter than the 8-byte header length");
  uint8_t len_bytes[8];
  FP8_RETURN_IF_ERROR(PreadFull(r.fd_->fd, len_bytes, 8, 0, path));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len == 0 || header_len > kMaxHeaderBytes)
    return Bad(path, "not a safetensors file: header length " + std::to_string(header_len) +
                         " is absurd (must be 1.." + std::to_string(kMaxHeaderBytes) + ")");
  if (header_len > r.file_size_ - 8)
    return Damaged(path, "truncated: header length " + std::to_string(header_len) +
                             " but only " + std::to_string(r.file_size_ - 8) +
                             " bytes follow it");
  std::string header(header_len, '\0');
  FP8_RETURN_IF_ERROR(PreadFull(r.fd_->fd, header.data(), header_len, 8, path));
  if (header[0] != '{')
    return Bad(path, "not a safetensors file: header does not start with '{'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    return Bad(path, std::string("malformed JSON header: ") + e.what());
  }
  if (!j.is_object()) return Bad(path, "malformed header: not a JSON object");

  r.data_offset_ = 8 + header_len;
  const uint64_t data_size = r.file_size_ - r.data_offset_;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Bad(path, "\"__metadata__\" is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return Bad(path, "\"__metadata__\" value for \"" + m.key() + "\" is not a string");
        r.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    FP8_ASSIGN_OR_RETURN(TensorInfo info, ParseEntry(path, it.key(), *it));
    r.infos_.push_back(std::move(info));
  }

  // The byte ranges must tile the data section exactly: no overlap, no gap, nothing past the
  // end (a truncated file), nothing unclaimed at the end (trailing garbage).
  std::sort(r.infos_.begin(), r.infos_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : r.infos_) {
    if (t.end > data_size)
      return Damaged(path, "tensor \"" + t.name + "\" data_offsets " + Range(t.begin, t.end) +
                               " exceed the data section of " + std::to_string(data_size) +
                               " bytes (file truncated?)");
    if (t.begin < covered)
      return Bad(path, "tensor \"" + t.name + "\" data_offsets " + Range(t.begin, t.end) +
                           " overlap tensor \"" + prev->name + "\" " +
                           Range(prev->begin, prev->end));
    if (t.begin > covered)
      return Bad(path, "gap in the data section: bytes " + Range(covered, t.begin) +
                           " belong to no tensor");
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size)
    return Bad(path, "tensors cover " + std::to_string(covered) + " bytes of a data section of " +
                         std::to_string(data_size) + " bytes (trailing bytes belong to no tensor)");
  for (size_t i = 0; i < r.infos_.size(); ++i) r.index_[r.infos_[i].name] = i;
  return r;
}

const TensorInfo* Reader::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &infos_[it->second];
}

Status Reader::ReadRange(const std::string& name, uint64_t offset, void* dst, size_t nbytes) const {
  const TensorInfo* t = Find(name);
  if (!t) return NotFoundError(path_ + ": no tensor \"" + name + "\"");
  if (offset > t->nbytes() || nbytes > t->nbytes() - offset)
    return OutOfRangeError(path_ + ": tensor \"" + name + "\": read of " +
                           Range(offset, offset + nbytes) + " past its " +
                           std::to_string(t->nbytes()) + " bytes");
  return PreadFull(fd_->fd, dst, nbytes, data_offset_ + t->begin + offset, path_);
}

Status Reader::ReadInto(const std::string& name, void* dst, size_t nbytes) const {
  const TensorInfo* t = Find(name);
  if (!t) return NotFoundError(path_ + ": no tensor \"" + name + "\"");
  if (nbytes != t->nbytes())
    return InvalidArgumentError(path_ + ": tensor \"" + name + "\" has " +
                                std::to_string(t->nbytes()) + " bytes, buffer has " +
                                std::to_string(nbytes));
  return ReadRange(name, 0, dst, nbytes);
}

StatusOr<std::vector<uint8_t>> Reader::Read(const std::string& name) const {
  const TensorInfo* t = Find(name);
  if (!t) return NotFoundError(path_ + ": no tensor \"" + name + "\"");
  std::vector<uint8_t> out(t->nbytes());
  FP8_RETURN_IF_ERROR(ReadInto(name, out.data(), out.size()));
  return out;
}

}  // namespace fp8::safetensors
