// SPDX-License-Identifier: Apache-2.0
// The driver's cuTensorMapEncodeTiled (TMA descriptors), fetched once through the runtime so that
// nothing links libcuda: CI builds and runs the CPU tests without a driver. Used by the own FP8
// GEMM and the trainer's wgmma flash attention.
#pragma once

#include <cudaTypedefs.h>

#include "common/status.h"

namespace fp8::kernels::cuda {

StatusOr<PFN_cuTensorMapEncodeTiled_v12000> Sm90TensorMapEncoder();

}  // namespace fp8::kernels::cuda
