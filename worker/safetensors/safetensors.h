// SPDX-License-Identifier: Apache-2.0
// Reading and writing .safetensors files (https://github.com/huggingface/safetensors):
//   [u64 little-endian N][N bytes of JSON header, space-padded][data section]
// The header maps tensor name → {dtype, shape, data_offsets: [begin, end)} relative to the data
// section, plus an optional "__metadata__" string→string map.
//
// Used by the trainer (checkpoints) and the calibrator (FP8 conversion of HF checkpoints), so
// both the whole-file and the streaming (one tensor, or one slice of a tensor, at a time) forms
// exist. Everything that comes from a file is validated before use: a Reader that opened
// successfully has offsets that tile the data section exactly, with sizes that match the
// shapes, so later reads cannot go out of bounds.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fp8::safetensors {

enum class DType { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2 };

const char* DTypeName(DType dtype);  // "F8_E4M3", spelled as in the header
StatusOr<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType dtype);  // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // offsets in the data section
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Product of the dims; InvalidArgument for a negative dim or on overflow.
StatusOr<uint64_t> NumElements(const std::vector<int64_t>& shape);

// Writes a whole file atomically: <path>.tmp-<pid>, fsync, rename, fsync the directory.
// Data is laid out like the reference implementation (larger dtypes first, then by name, so
// every tensor stays aligned to its element size); the header lists "__metadata__" first and
// then the tensors in data order; the header is space-padded to a multiple of 8 bytes.
Status WriteFile(const std::string& path, const std::vector<TensorData>& tensors,
                 const std::map<std::string, std::string>& metadata = {});

class Reader;

// Streaming writer for outputs too big to hold in memory: the header is fixed up front from
// `infos` (name, dtype, shape; offsets are computed), then the data arrives one tensor or one
// slice at a time, in any order. Commit() checks that every byte was written, fsyncs and
// renames into place; a Writer destroyed without Commit() removes its temporary file, so a
// half-written output never appears under the final name. WriteAt may be called from several
// threads at once for disjoint slices (pwrite at fixed offsets); everything else is
// single-threaded.
class Writer {
 public:
  static StatusOr<Writer> Create(const std::string& path, std::vector<TensorInfo> infos,
                                 const std::map<std::string, std::string>& metadata = {});
  Writer(Writer&& other) noexcept;
  Writer& operator=(Writer&& other) noexcept;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer();

  // The tensors in data order, with their offsets.
  const std::vector<TensorInfo>& tensors() const { return infos_; }
  const TensorInfo* Find(const std::string& name) const;

  // The whole tensor: nbytes must equal its size.
  Status Write(const std::string& name, const void* data, size_t nbytes);
  // A slice of the tensor starting `offset` bytes into it. Slices must not overlap.
  Status WriteAt(const std::string& name, uint64_t offset, const void* data, size_t nbytes);
  // Byte-for-byte copy of `src_name` from `reader` (same dtype and size) into `dst_name`.
  Status CopyFrom(const Reader& reader, const std::string& src_name, const std::string& dst_name);

  Status Commit();
  const std::string& path() const { return path_; }

 private:
  Writer() = default;
  void Abort();
  void StartWriteback(uint64_t offset, uint64_t nbytes) const;

  std::string path_, tmp_path_;
  int fd_ = -1;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t> index_;
  // Bytes written per tensor; atomic so concurrent WriteAt calls on disjoint slices add up.
  std::unique_ptr<std::atomic<uint64_t>[]> written_;
};

class Reader {
 public:
  // Reads and validates the header. Errors name the file and the problem (DataLoss for a
  // damaged file, InvalidArgument for one that is well-formed but not valid safetensors,
  // NotFound when it does not exist).
  static StatusOr<Reader> Open(const std::string& path);

  // In data order.
  const std::vector<TensorInfo>& tensors() const { return infos_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* Find(const std::string& name) const;

  // nbytes must equal the tensor's size.
  Status ReadInto(const std::string& name, void* dst, size_t nbytes) const;
  // `nbytes` bytes starting `offset` bytes into the tensor.
  Status ReadRange(const std::string& name, uint64_t offset, void* dst, size_t nbytes) const;
  StatusOr<std::vector<uint8_t>> Read(const std::string& name) const;

  uint64_t data_offset() const { return data_offset_; }  // = 8 + header length
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }
  int fd() const;

 private:
  struct Fd;
  std::shared_ptr<Fd> fd_;
  std::string path_;
  uint64_t data_offset_ = 0, file_size_ = 0;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// fsync the directory holding `path`, so a rename into it is durable.
Status FsyncParentDir(const std::string& path);
// Writes `contents` to `path` atomically (temp file, fsync, rename, fsync dir).
Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace fp8::safetensors
