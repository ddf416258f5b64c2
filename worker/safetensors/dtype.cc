// SPDX-License-Identifier: Apache-2.0
#include <limits>

#include "worker/safetensors/safetensors.h"

namespace fp8::safetensors {

namespace {
struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},         {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},   {DType::U16, "U16", 2},       {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I32, "I32", 4},       {DType::U32, "U32", 4},
    {DType::F32, "F32", 4},   {DType::F64, "F64", 8},       {DType::I64, "I64", 8},
    {DType::U64, "U64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};
}  // namespace

const char* DTypeName(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.name;
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e.size;
  return 0;
}

StatusOr<DType> ParseDType(std::string_view name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.dtype;
  return InvalidArgumentError("unknown safetensors dtype \"" + std::string(name) + "\"");
}

StatusOr<uint64_t> NumElements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("negative dimension " + std::to_string(d));
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      return InvalidArgumentError("shape overflows 64 bits");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace fp8::safetensors
