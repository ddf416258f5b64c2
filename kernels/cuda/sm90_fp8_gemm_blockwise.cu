// SPDX-License-Identifier: Apache-2.0
// Host side of Sm90GemmFp8Blockwise: shape and alignment checks, the TMA tensor maps, the
// choice of block tile, and the persistent launch. Design notes in sm90_fp8_gemm_blockwise.cuh.
#include "kernels/cuda/sm90_fp8_gemm_blockwise.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_tensor_map.h"
#include "kernels/cuda/sm90_fp8_gemm_blockwise.cuh"
#include "kernels/cuda/sm90_fp8_gemm_tile_heuristics.h"
#include "kernels/cuda/sm90_fp8_quantize.h"

namespace fp8::kernels::cuda {
namespace {

using blockwise_gemm::Config;
using blockwise_gemm::KernelArgs;

// Row-major [rows, cols] matrix, 2-D box [box_rows, box_cols], 128-byte swizzle.
StatusOr<CUtensorMap> MakeTensorMap(const void* ptr, CUtensorMapDataType type, int elem_bytes,
                                    int64_t rows, int64_t cols, uint32_t box_rows,
                                    uint32_t box_cols, const char* what) {
  FP8_ASSIGN_OR_RETURN(auto encode, Sm90TensorMapEncoder());
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols * elem_bytes)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(&map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return InternalError(std::string("cuTensorMapEncodeTiled failed for ") + what + " (CUresult " +
                         std::to_string(static_cast<int>(r)) + ")");
  }
  return map;
}

// Small GEMMs run in a few microseconds, so the per-call host work is kept to the launch and
// three tensor-map encodings: the SM count and the kernels' shared-memory attribute are looked
// up / set once per device (up to 64 devices; beyond that every call asks again).
constexpr int kCachedDevices = 64;

StatusOr<int> SmCount(int device) {
  static std::atomic<int> cached[kCachedDevices] = {};
  if (device < kCachedDevices) {
    if (const int sms = cached[device].load(std::memory_order_relaxed); sms > 0) return sms;
  }
  int sms = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device < kCachedDevices) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

template <class Cfg>
Status AllowLargeSharedMemory(int device) {
  static std::atomic<uint64_t> done_devices{0};
  const uint64_t bit = device < kCachedDevices ? uint64_t{1} << device : 0;
  if (bit != 0 && (done_devices.load(std::memory_order_relaxed) & bit) != 0) return OkStatus();
  FP8_RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(blockwise_gemm::Sm90Fp8BlockwiseGemmKernel<Cfg>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  done_devices.fetch_or(bit, std::memory_order_relaxed);
  return OkStatus();
}

// cudaLaunchKernelEx / occupancy configuration for Cfg's clusters of kClusterDim CTAs along x;
// the grid is rounded down to whole clusters. Not copyable: config.attrs points at attr.
template <class Cfg>
struct ClusterLaunch {
  ClusterLaunch(int ctas, cudaStream_t stream) {
    config.gridDim = dim3(static_cast<unsigned>(ctas / Cfg::kClusterDim * Cfg::kClusterDim));
    config.blockDim = dim3(blockwise_gemm::kThreads);
    config.dynamicSmemBytes = Cfg::kSmemBytes;
    config.stream = stream;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = Cfg::kClusterDim;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;

  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attr{};
};

// How many CTAs run at once: #SMs, or with clusters kClusterDim times the clusters the GPCs
// hold at once (a GPC whose free SMs are not a multiple of the cluster size leaves some idle; a
// grid beyond it would run a second, almost empty wave of clusters).
template <class Cfg>
StatusOr<int> ResidentCtas(int device, int sms) {
  if constexpr (Cfg::kClusterDim == 1) {
    return sms;
  } else {
    static std::atomic<int> cached[kCachedDevices] = {};
    if (device < kCachedDevices) {
      if (const int n = cached[device].load(std::memory_order_relaxed); n > 0) return n;
    }
    FP8_RETURN_IF_ERROR(AllowLargeSharedMemory<Cfg>(device));  // the query sees the kernel's limit
    ClusterLaunch<Cfg> launch(sms, nullptr);
    int clusters = 0;
    FP8_RETURN_IF_CUDA_ERROR(cudaOccupancyMaxActiveClusters(
        &clusters, blockwise_gemm::Sm90Fp8BlockwiseGemmKernel<Cfg>, &launch.config));
    if (clusters < 1) {
      return InternalError("blockwise GEMM: no cluster of " + std::to_string(Cfg::kClusterDim) +
                           " CTAs fits on this GPU");
    }
    const int n = clusters * Cfg::kClusterDim;
    if (device < kCachedDevices) cached[device].store(n, std::memory_order_relaxed);
    return n;
  }
}

// One call's operands and where it runs.
struct GemmCall {
  const uint8_t* a;
  const float* a_scale_inv;
  const uint8_t* b;
  const float* b_scale_inv;
  int64_t m, n, k;
  __nv_bfloat16* d;
  int device, sms;
  cudaStream_t stream;
};

template <class Cfg>
Status Launch(const GemmCall& call) {
  using blockwise_gemm::kBlockK;
  constexpr int kBlockM = Cfg::kBlockM;
  const auto [a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream] = call;
  FP8_ASSIGN_OR_RETURN(const CUtensorMap map_a,
                       MakeTensorMap(a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, m, k, Cfg::kTmaARows, kBlockK, "A"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap map_b,
                       MakeTensorMap(b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, n, k, Cfg::kBlockN, kBlockK, "B"));
  // D is stored in 64x64 boxes: 128 bytes a row, the widest the 128B swizzle allows.
  FP8_ASSIGN_OR_RETURN(const CUtensorMap map_d,
                       MakeTensorMap(d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, m, n, 64, 64, "D"));
  KernelArgs args{};
  args.a_scale = a_scale_inv;
  args.b_scale = b_scale_inv;
  args.d = d;
  args.m = static_cast<uint32_t>(m);
  args.n = static_cast<uint32_t>(n);
  args.num_m_blocks = static_cast<uint32_t>((m + kBlockM - 1) / kBlockM);
  args.num_n_blocks = static_cast<uint32_t>(n / Cfg::kBlockN);
  args.num_k_blocks = static_cast<uint32_t>(k / kBlockK);
  args.b_scale_ld = static_cast<uint32_t>(Sm90BlockScaleLd(k));

  FP8_RETURN_IF_ERROR(AllowLargeSharedMemory<Cfg>(device));
  auto* kernel = blockwise_gemm::Sm90Fp8BlockwiseGemmKernel<Cfg>;
  const int64_t tiles = int64_t{args.num_m_blocks} * args.num_n_blocks;
  int grid = 0;
  if constexpr (Cfg::kSplitK > 1) {
    // One tile per cluster (the reduction reuses the stage memory): clusters beyond the resident
    // ones wait for a later wave. The caller keeps tiles x kSplitK < 2^31.
    grid = static_cast<int>(tiles * Cfg::kSplitK);
  } else {
    FP8_ASSIGN_OR_RETURN(const int resident, ResidentCtas<Cfg>(device, sms));
    grid = static_cast<int>(std::min<int64_t>(tiles, resident));
  }
  if constexpr (Cfg::kClusterDim == 1) {
    kernel<<<grid, blockwise_gemm::kThreads, Cfg::kSmemBytes, stream>>>(map_a, map_b, map_d, args);
  } else {  // grid: whole clusters
    ClusterLaunch<Cfg> launch(grid, stream);
    FP8_RETURN_IF_CUDA_ERROR(cudaLaunchKernelEx(&launch.config, kernel, map_a, map_b, map_d, args));
  }
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The kernels behind the tiles of Sm90BlockwiseGemmTile, each with the twin that reads its scales
// with __ldg (bitwise the same results) for scale arrays the bulk copies cannot read.
// 128x128, 6 stages of 32 KB beside the 32 KB staging tile; with the scales through the
// pipeline one 8 KB staging box per warpgroup leaves room for the 6th stage beside the scale
// copies (6 x 32 KB + 16 KB + 3.2 KB).
using ConfigN128 = Config<128, 6>;
using ConfigN128ScalesTma6 = Config<128, 6, 1, true, true>;
// 128x64: 24 KB stages, 8 fit beside the 16 KB staging tile; L2 hints for small M.
using ConfigN64 = Config<64, 8>;
using ConfigN64ScalesTma = Config<64, 8, 1, true>;
using ConfigN64ScalesTmaL2 = Config<64, 8, 1, true, false, true>;
// 128x128 tiles, K split over clusters of 2, 4 or 8 CTAs; no staging tile, so 7 stages fit
// (6 beside the scale copies).
using ConfigN128SplitK2 = Config<128, 7, 2>;
using ConfigN128SplitK2ScalesTmaL2 = Config<128, 6, 2, true, false, true>;
using ConfigN128SplitK4 = Config<128, 7, 4>;
using ConfigN128SplitK8 = Config<128, 7, 8>;
// 128x64 split 2: 24 KB stages, no staging tile, 9 fit beside the scale copies. Its __ldg twin
// is the 128x128 split 2, which computes the same bits.
using ConfigN64SplitK2ScalesTma = Config<64, 9, 2, true>;
// 256x128 (two 64-row waves per consumer warpgroup) with A multicast: 48 KB stages, 3 beside
// the whole 64 KB staging tile (one epilogue pass). Its __ldg twin is the 128x128 tile (the same
// promotion order per row: the same bits).
using ConfigM256MulticastA = Config<128, 3, 1, true, false, false, 256, true>;

template <class WithScalesTma, class WithLdgScales>
Status LaunchEither(bool scales_tma, const GemmCall& call) {
  return scales_tma ? Launch<WithScalesTma>(call) : Launch<WithLdgScales>(call);
}

// CTAs of each split-K kernel the device holds at once (ChooseBlockwiseGemmTile's inputs).
StatusOr<BlockwiseGemmResidency> Residency(int device, int sms) {
  BlockwiseGemmResidency r;
  r.sms = sms;
  FP8_ASSIGN_OR_RETURN(r.n64_split2, ResidentCtas<ConfigN64SplitK2ScalesTma>(device, sms));
  FP8_ASSIGN_OR_RETURN(r.n128_split2, ResidentCtas<ConfigN128SplitK2>(device, sms));
  FP8_ASSIGN_OR_RETURN(r.n128_split4, ResidentCtas<ConfigN128SplitK4>(device, sms));
  FP8_ASSIGN_OR_RETURN(r.n128_split8, ResidentCtas<ConfigN128SplitK8>(device, sms));
  return r;
}

}  // namespace

Status Sm90ValidateGemmFp8BlockwiseOwnShape(int64_t m, int64_t n, int64_t k) {
  if (m < 1 || m > (int64_t{1} << 31) - 1)
    return InvalidArgumentError("blockwise GEMM: m=" + std::to_string(m) + " must be in [1, 2^31)");
  if (n < 128 || n % 128 != 0 || n > (int64_t{1} << 31) - 1)
    return InvalidArgumentError("blockwise GEMM: n=" + std::to_string(n) +
                                " must be a positive multiple of 128 (whole 128x128 weight blocks)");
  if (k < 128 || k % 128 != 0 || k > (int64_t{1} << 31) - 1)
    return InvalidArgumentError("blockwise GEMM: k=" + std::to_string(k) +
                                " must be a positive multiple of 128 (whole scale blocks)");
  return OkStatus();
}

Status Sm90GemmFp8Blockwise(const uint8_t* a, const float* a_scale_inv, const uint8_t* b,
                            const float* b_scale_inv, int64_t m, int64_t n, int64_t k,
                            __nv_bfloat16* d, cudaStream_t stream, Sm90BlockwiseGemmTile tile) {
  FP8_RETURN_IF_ERROR(Sm90ValidateGemmFp8BlockwiseOwnShape(m, n, k));
  if (a == nullptr || b == nullptr || d == nullptr || a_scale_inv == nullptr || b_scale_inv == nullptr)
    return InvalidArgumentError(
        "blockwise GEMM: a, b, d, a_scale_inv and b_scale_inv must be device pointers, got null");
  if (!Aligned16(a) || !Aligned16(b) || !Aligned16(d))
    return InvalidArgumentError("blockwise GEMM: a, b and d must be 16-byte aligned (TMA)");
  int device = 0;
  FP8_RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  FP8_ASSIGN_OR_RETURN(const int sms, SmCount(device));
  if (tile == Sm90BlockwiseGemmTile::kAuto) {
    FP8_ASSIGN_OR_RETURN(const BlockwiseGemmResidency gpu, Residency(device, sms));
    tile = ChooseBlockwiseGemmTile(m, n, k, gpu);
  }
  // Split-K needs a K block per CTA and a grid of tiles x split < 2^31 CTAs; otherwise the
  // plain 128x128 tile. (128x64 split 2: 4 x tiles_128 CTAs.)
  const int64_t tiles_128 = (m + 127) / 128 * (n / 128), k_blocks = k / 128;
  if (const int split = BlockwiseGemmSplitK(tile);
      split > 1 && (k_blocks < split || tiles_128 * split * 2 > INT32_MAX))
    tile = Sm90BlockwiseGemmTile::kN128ScalesTma6Stages;
  // Scales through TMA: the bulk copies need 16-byte aligned sources (the A-scale chunk of K
  // block kb starts at float kb·M + m0) and sizes; otherwise the same tile with __ldg scales.
  const bool scales_tma = m % 4 == 0 && Aligned16(a_scale_inv) && Aligned16(b_scale_inv);
  const GemmCall call{a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream};
  switch (tile) {
    case Sm90BlockwiseGemmTile::kN64ScalesTma: return LaunchEither<ConfigN64ScalesTma, ConfigN64>(scales_tma, call);
    case Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints:
      return LaunchEither<ConfigN64ScalesTmaL2, ConfigN64>(scales_tma, call);
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints:
      return LaunchEither<ConfigN128SplitK2ScalesTmaL2, ConfigN128SplitK2>(scales_tma, call);
    case Sm90BlockwiseGemmTile::kN128SplitK4: return Launch<ConfigN128SplitK4>(call);
    case Sm90BlockwiseGemmTile::kN128SplitK8: return Launch<ConfigN128SplitK8>(call);
    case Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma:
      return LaunchEither<ConfigN64SplitK2ScalesTma, ConfigN128SplitK2>(scales_tma, call);
    // A multicast pairs column blocks: with an odd number of them, the 128x128 tile.
    case Sm90BlockwiseGemmTile::kM256N128MulticastA:
      if (n / 128 % 2 == 0) return LaunchEither<ConfigM256MulticastA, ConfigN128>(scales_tma, call);
      break;
    case Sm90BlockwiseGemmTile::kAuto:
    case Sm90BlockwiseGemmTile::kN128ScalesTma6Stages: break;
  }
  return LaunchEither<ConfigN128ScalesTma6, ConfigN128>(scales_tma, call);
}

}  // namespace fp8::kernels::cuda
