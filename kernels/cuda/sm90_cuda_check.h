// SPDX-License-Identifier: Apache-2.0
// CUDA / cuBLAS error handling for the sm_90 kernels: every runtime call and every launch is
// checked, and a failure becomes an fp8::Status that names the call and its file:line (an exit
// code of 0 proves nothing on a GPU; see docs/performance.md).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace fp8::kernels::cuda {

inline Status CudaErrorStatus(cudaError_t err, const char* what, const char* file, int line) {
  return InternalError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                       cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

inline Status CublasErrorStatus(cublasStatus_t st, const char* what, const char* file, int line) {
  const StatusCode code = st == CUBLAS_STATUS_NOT_SUPPORTED ? StatusCode::kUnimplemented
                          : st == CUBLAS_STATUS_INVALID_VALUE ? StatusCode::kInvalidArgument
                                                              : StatusCode::kInternal;
  return Status(code, std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                          cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")");
}

}  // namespace fp8::kernels::cuda

// Returns an Internal status naming the expression and file:line when a CUDA runtime call fails.
#define FP8_RETURN_IF_CUDA_ERROR(expr)                                                      \
  do {                                                                                      \
    const cudaError_t _fp8_cuda_err = (expr);                                               \
    if (_fp8_cuda_err != cudaSuccess)                                                       \
      return ::fp8::kernels::cuda::CudaErrorStatus(_fp8_cuda_err, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: configuration errors (and sticky errors of earlier work) surface here.
#define FP8_RETURN_IF_LAUNCH_FAILED() FP8_RETURN_IF_CUDA_ERROR(cudaGetLastError())

#define FP8_CUBLAS_RETURN_IF_ERROR(expr)                                                       \
  do {                                                                                         \
    const cublasStatus_t _fp8_cublas_st = (expr);                                              \
    if (_fp8_cublas_st != CUBLAS_STATUS_SUCCESS)                                               \
      return ::fp8::kernels::cuda::CublasErrorStatus(_fp8_cublas_st, #expr, __FILE__, __LINE__); \
  } while (0)

// For tests and benchmarks (programmer errors): abort with file:line.
#define FP8_CHECK_CUDA(expr)                                                               \
  do {                                                                                     \
    const cudaError_t _fp8_cuda_err = (expr);                                              \
    if (_fp8_cuda_err != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                   \
                   cudaGetErrorString(_fp8_cuda_err));                                     \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
