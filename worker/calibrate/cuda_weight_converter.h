// SPDX-License-Identifier: Apache-2.0
// The calibration job's CUDA backend (built only with FP8D_CUDA): 128x128-block weights in BF16
// or F32 are quantized (and FP8 weights dequantized) on the GPU with kernels/cuda, streamed in
// chunks of whole 128-row bands through two pinned host buffers and two CUDA streams, so the
// pread of chunk k+1 and the pwrite of chunk k−1 overlap the GPU's work on chunk k. The bytes
// and scales are those of the CPU path (kernels/cuda is bit-identical to kernels/cpu); the
// round-trip statistics are computed on the GPU too (cuda_round_trip_stats.h).
//
// Left to the CPU converter, per tensor: channel and tensor granularity (the GPU kernels have
// no per-row scale, and per-tensor needs a second pass over the file), F16 input (no F16
// quantize kernel). Rows whose length is not a multiple of 16 are padded with zeros on the
// device (the kernels' vector loads need it); zeros change no tile's amax.
#pragma once

#include <cstdint>
#include <memory>

#include "worker/calibrate/tensor_convert.h"

namespace fp8::calibrate {

// True when the CUDA runtime sees at least one device.
bool CudaDeviceAvailable();

// chunk_bytes: the input bytes per pipeline step (rounded to whole 128-row bands, at least one).
std::unique_ptr<WeightConverter> MakeCudaWeightConverter(int64_t chunk_bytes = int64_t{16} << 20);

}  // namespace fp8::calibrate
