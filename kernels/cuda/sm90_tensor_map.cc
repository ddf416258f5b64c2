// SPDX-License-Identifier: Apache-2.0
#include "kernels/cuda/sm90_tensor_map.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

namespace fp8::kernels::cuda {

StatusOr<PFN_cuTensorMapEncodeTiled_v12000> Sm90TensorMapEncoder() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (err == cudaSuccess && q == cudaDriverEntryPointSuccess) fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  if (fn == nullptr)
    return InternalError(std::string("cuTensorMapEncodeTiled not available from the driver: ") + cudaGetErrorString(err));
  return fn;
}

}  // namespace fp8::kernels::cuda
