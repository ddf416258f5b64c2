// Host side of Sm90GemmFp8Blockwise: shape and alignment checks, the TMA tensor maps, the
// choice of block tile, and the persistent launch. Design notes in sm90_fp8_gemm_blockwise.cuh.
#include "kernels/cuda/sm90_fp8_gemm_blockwise.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <atomic>
#include <string>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_tensor_map.h"
#include "kernels/cuda/sm90_fp8_gemm_blockwise.cuh"
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

template <class Cfg>
Status Launch(const uint8_t* a, const float* a_scale_inv, const uint8_t* b,
              const float* b_scale_inv, int64_t m, int64_t n, int64_t k, __nv_bfloat16* d,
              int device, int sms, cudaStream_t stream) {
  using blockwise_gemm::kBlockK;
  using blockwise_gemm::kBlockM;
  FP8_ASSIGN_OR_RETURN(const CUtensorMap map_a,
                       MakeTensorMap(a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, m, k, Cfg::kABoxRows, kBlockK, "A"));
  FP8_ASSIGN_OR_RETURN(const CUtensorMap map_b,
                       MakeTensorMap(b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, n, k, Cfg::kBlockN, kBlockK, "B"));
  // D is stored in 64x64 boxes: 128 bytes a row, the widest the 128B swizzle allows.
  FP8_ASSIGN_OR_RETURN(const CUtensorMap map_d,
                       MakeTensorMap(d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, m, n, 64, 64, "D"));
  KernelArgs args{};
  args.a_scale = a_scale_inv;
  args.b_scale = b_scale_inv;
  args.d = d;
  args.b = b;
  args.m = static_cast<uint32_t>(m);
  args.n = static_cast<uint32_t>(n);
  args.num_m_blocks = static_cast<uint32_t>((m + kBlockM - 1) / kBlockM);
  // BLOCK_N = 112 / 56 need not divide N: the last column tile is clipped (kDirectStore).
  args.num_n_blocks = static_cast<uint32_t>((n + Cfg::kBlockN - 1) / Cfg::kBlockN);
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
  } else {  // grid: whole clusters (pairs: tiles is even, the caller checked)
    ClusterLaunch<Cfg> launch(grid, stream);
    FP8_RETURN_IF_CUDA_ERROR(cudaLaunchKernelEx(&launch.config, kernel, map_a, map_b, map_d, args));
  }
  FP8_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 32 KB stages for 128x128 tiles: 6 fit beside the 32 KB staging tile in 227 KB.
using ConfigN128 = Config<128, 6, true>;
using ConfigN128Single = Config<128, 6, false>;
using ConfigN128Overlap = Config<128, 6, true, true>;
// 24 KB stages for 128x64 tiles: 8 fit beside the 16 KB staging tile.
using ConfigN64 = Config<64, 8, true>;
using ConfigN64Overlap = Config<64, 8, true, true>;
// The same tiles in CTA pairs sharing A through TMA multicast.
using ConfigN128PairA = Config<128, 6, true, false, 2>;
using ConfigN64PairA = Config<64, 8, true, false, 2>;
// 128x128 tiles, K split over clusters of 2, 4 or 8 CTAs; no staging tile, so 7 stages fit.
using ConfigN128SplitK2 = Config<128, 7, true, false, 1, 2>;
using ConfigN128SplitK4 = Config<128, 7, true, false, 1, 4>;
using ConfigN128SplitK8 = Config<128, 7, true, false, 1, 8>;
// Experiments: B rows prefetched into L2 ahead of the TMA loads.
using ConfigN64PrefetchB = Config<64, 8, true, false, 1, 1, true>;
using ConfigN128SplitK2PrefetchB = Config<128, 7, true, false, 1, 2, true>;
// Scales copied into shared memory with each stage. 6 (split-K: 7) stages of 32 KB leave less
// than the 3.2 KB of scale copies free in 227 KB, so these run one stage fewer; 128x64 keeps 8.
using ConfigN128ScalesTma = Config<128, 5, true, false, 1, 1, false, true>;
using ConfigN64ScalesTma = Config<64, 8, true, false, 1, 1, false, true>;
using ConfigN128SplitK2ScalesTma = Config<128, 6, true, false, 1, 2, false, true>;
using ConfigN128SplitK4ScalesTma = Config<128, 6, true, false, 1, 4, false, true>;
// One 8 KB staging box per consumer warpgroup instead of two leaves room for the 6th stage
// beside the scale copies (6 x 32 KB + 16 KB + 3.2 KB).
using ConfigN128ScalesTma6 = Config<128, 6, true, false, 1, 1, false, true, true>;
using ConfigN128PairAScalesTma = Config<128, 6, true, false, 2, 1, false, true, true>;
using ConfigN64PairAScalesTma = Config<64, 8, true, false, 2, 1, false, true>;
// 24 KB stages, no staging tile (split-K): 9 fit beside the scale copies.
using ConfigN64SplitK2ScalesTma = Config<64, 9, true, false, 1, 2, false, true>;
// Tile counts between those of 128x64 and 128x128 (N = 7168: 64 tiles of 112, 128 of 56), so
// that tiles x split fill the 132 SMs at M = 128. 30 KB (23 KB) stages, no staging tile.
using ConfigN112SplitK2ScalesTma = Config<112, 7, true, false, 1, 2, false, true>;
using ConfigN56ScalesTma = Config<56, 9, true, false, 1, 1, false, true>;
// 128x192 tiles (large M: B read from shared memory once per 192 instead of 128 columns, 25%
// fewer operand bytes per flop) with one partial accumulator (two do not fit in registers);
// 40 KB stages, 5 fit beside one staging box per warpgroup and the scale copies.
using ConfigN192ScalesTma = Config<192, 5, false, false, 1, 1, false, true, true>;
// 128x192 as kN192ScalesTma, the consumer warpgroups' wgmma issues alternating (ping-pong),
// rasterized in groups of 8 or 16 row blocks.
using ConfigN192PingPong = Config<192, 5, false, false, 1, 1, false, true, true, false, true>;
using ConfigN192PingPongGroup16 = Config<192, 5, false, false, 1, 1, false, true, true, false, true, 16>;
using ConfigN128PingPong = Config<128, 6, false, false, 1, 1, false, true, true, false, true>;
using ConfigN128ScalesTma6Group16 = Config<128, 6, true, false, 1, 1, false, true, true, false, false, 16>;
// Ping-pong, the turn passed once half / all of the K block's wgmmas have completed.
using ConfigN192PingPongPassAtHalf = Config<192, 5, false, false, 1, 1, false, true, true, false, true, 8, 2>;
using ConfigN192PingPongPassAtEnd = Config<192, 5, false, false, 1, 1, false, true, true, false, true, 8, 4>;
using ConfigN128PingPongPassAtHalf = Config<128, 6, false, false, 1, 1, false, true, true, false, true, 8, 2>;
// 128x192 with the partial double-buffered in two 96-column halves.
using ConfigN192HalfAcc = Config<192, 5, false, false, 1, 1, false, true, true, false, false, 8, 0, true>;
using ConfigN192HalfAccGroup16 = Config<192, 5, false, false, 1, 1, false, true, true, false, false, 16, 0, true>;
// Small-M kAuto tiles with L2 eviction hints (keep A, drop B first).
using ConfigN128SplitK2ScalesTmaL2 = Config<128, 6, true, false, 1, 2, false, true, false, true>;
using ConfigN64ScalesTmaL2 = Config<64, 8, true, false, 1, 1, false, true, false, true>;

Sm90BlockwiseGemmTile WithoutScalesTma(Sm90BlockwiseGemmTile tile) {
  switch (tile) {
    case Sm90BlockwiseGemmTile::kN128ScalesTma: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN64ScalesTma: return Sm90BlockwiseGemmTile::kN64;
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTma: return Sm90BlockwiseGemmTile::kN128SplitK2;
    case Sm90BlockwiseGemmTile::kN128SplitK4ScalesTma: return Sm90BlockwiseGemmTile::kN128SplitK4;
    case Sm90BlockwiseGemmTile::kN128ScalesTma6Stages: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN128PairSharedAScalesTma: return Sm90BlockwiseGemmTile::kN128PairSharedA;
    case Sm90BlockwiseGemmTile::kN64PairSharedAScalesTma: return Sm90BlockwiseGemmTile::kN64PairSharedA;
    // No __ldg 128x64 split-K kernel: the 128x128 one computes the same bits.
    case Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma: return Sm90BlockwiseGemmTile::kN128SplitK2;
    case Sm90BlockwiseGemmTile::kN112SplitK2ScalesTma: return Sm90BlockwiseGemmTile::kN128SplitK2;
    case Sm90BlockwiseGemmTile::kN56ScalesTma: return Sm90BlockwiseGemmTile::kN64;
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints: return Sm90BlockwiseGemmTile::kN128SplitK2;
    case Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints: return Sm90BlockwiseGemmTile::kN64;
    // No __ldg 128x192 kernel: the 128x128 one computes the same bits.
    case Sm90BlockwiseGemmTile::kN192ScalesTma: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN192PingPong: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN192PingPongGroup16: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN128PingPong: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN128ScalesTma6StagesGroup16: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN192PingPongPassAtHalf: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN192PingPongPassAtEnd: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN128PingPongPassAtHalf: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN192HalfAccumulators: return Sm90BlockwiseGemmTile::kN128;
    case Sm90BlockwiseGemmTile::kN192HalfAccumulatorsGroup16: return Sm90BlockwiseGemmTile::kN128;
    default: return tile;
  }
}

int SplitOf(Sm90BlockwiseGemmTile tile) {
  switch (tile) {
    case Sm90BlockwiseGemmTile::kN128SplitK2: return 2;
    case Sm90BlockwiseGemmTile::kN128SplitK2PrefetchB: return 2;
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTma: return 2;
    case Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma: return 2;
    case Sm90BlockwiseGemmTile::kN112SplitK2ScalesTma: return 2;
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints: return 2;
    case Sm90BlockwiseGemmTile::kN128SplitK4: return 4;
    case Sm90BlockwiseGemmTile::kN128SplitK4ScalesTma: return 4;
    case Sm90BlockwiseGemmTile::kN128SplitK8: return 8;
    default: return 1;
  }
}

// Measured on the H200 (docs/performance.md, own blockwise GEMM, 2026-11-29 runs). All
// choices have the scales through the pipeline (+4-13% over the __ldg twins on all eight issue
// shapes); the launcher falls back to the twin where the scales are not 16-byte aligned.
// - Small M (fewer 128x128 tiles than SMs), first: 128x64 tiles split 2 (4 x tiles_128 CTAs)
//   where they all run at once and leave >= 16 K blocks per CTA. M = 128, (4096, 7168): 454-456
//   TFLOPS against 366-372 for 128x128 split 2 (twice the CTAs, 24 KB stages, 9 of them).
// - Then split K over the largest cluster size S whose tiles x S CTAs all run at once and that
//   leaves every CTA >= 16 K blocks. M = 128: split 2 is the fastest variant at (7168, 16384);
//   with 8 K blocks per CTA (7168, 2048) it lost 20% to 128x64; splits 4 and 8 lost everywhere,
//   and so did 128x112 tiles split 2 (128 CTAs: 732 vs 762 at (7168, 16384)).
// - L2 hints (keep A, drop B first) on the small-M choices (split 2 and 128x64 with fewer
//   128x128 tiles than SMs): +1-3% on both shapes where they apply, in two runs (782 vs 764 /
//   771 at M = 128, (7168, 16384); 358 vs 350 / 347 at (7168, 2048)); on 128x64 with more
//   tiles than SMs -1% once and +1% once ((24576, 1536)), so not there.
// - Not chosen, measured slower: 128x192 tiles with one partial accumulator (0.43-0.71x
//   cuBLASLt on every issue shape); at M = 4096 (three runs, 2026-11-29, TFLOPS) the 128x192
//   ping-pong (turn passed at issue, half or end of the K block's wgmmas) 823-1024 against
//   1143-1249 for 128x128 6 stages, the 128x192 half accumulators 758-859, the 128x128 ping-pong
//   852-1117; 128x128 in groups of 16 row blocks is level with groups of 8 (within 3%).
// - Many tiles (>= 4 waves of 128x128): 128x128 with 6 stages (one staging box; 5 stages measured
//   2-10% slower at M = 4096, K = 16384 and level elsewhere). The CTA pairs sharing A and the
//   epilogue-overlap variants measured slower on every issue shape and are not chosen.
// - Otherwise whichever of 128x128 / 128x64 fills the SMs' waves better (128x56 tiles, 128
//   instead of 112 at N = 7168, measured 12% slower than 128x64 there).
StatusOr<Sm90BlockwiseGemmTile> ChooseTile(int64_t tiles_128, int64_t k_blocks, int device, int sms) {
  if (tiles_128 < sms) {
    FP8_ASSIGN_OR_RETURN(const int resident_n64, ResidentCtas<ConfigN64SplitK2ScalesTma>(device, sms));
    if (4 * tiles_128 <= resident_n64 && k_blocks >= 32) return Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma;
    FP8_ASSIGN_OR_RETURN(const int resident8, ResidentCtas<ConfigN128SplitK8>(device, sms));
    FP8_ASSIGN_OR_RETURN(const int resident4, ResidentCtas<ConfigN128SplitK4>(device, sms));
    FP8_ASSIGN_OR_RETURN(const int resident2, ResidentCtas<ConfigN128SplitK2>(device, sms));
    const std::pair<int, Sm90BlockwiseGemmTile> splits[] = {{resident8, Sm90BlockwiseGemmTile::kN128SplitK8},
                                                            {resident4, Sm90BlockwiseGemmTile::kN128SplitK4},
                                                            {resident2, Sm90BlockwiseGemmTile::kN128SplitK2}};
    for (const auto& [resident, tile] : splits) {
      const int split = SplitOf(tile);
      if (tiles_128 * split <= resident && k_blocks >= 16 * split)
        return tile == Sm90BlockwiseGemmTile::kN128SplitK2 ? Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints : tile;
    }
  }
  if (tiles_128 >= 4 * int64_t{sms}) return Sm90BlockwiseGemmTile::kN128ScalesTma6Stages;
  auto wave_fill = [sms](int64_t tiles) { return double(tiles) / double((tiles + sms - 1) / sms * sms); };
  if (wave_fill(2 * tiles_128) <= wave_fill(tiles_128)) return Sm90BlockwiseGemmTile::kN128ScalesTma6Stages;
  return tiles_128 < sms ? Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints : Sm90BlockwiseGemmTile::kN64ScalesTma;
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
  const int64_t tiles_128 = (m + 127) / 128 * (n / 128), k_blocks = k / 128;
  if (tile == Sm90BlockwiseGemmTile::kAuto) {
    FP8_ASSIGN_OR_RETURN(tile, ChooseTile(tiles_128, k_blocks, device, sms));
  }
  // Split-K needs a K block per CTA and a grid of tiles x split < 2^31 CTAs; otherwise the
  // plain 128x128 tile (with scales through TMA when the split tile had them).
  // (kN64SplitK2ScalesTma: 128x64 tiles x 2 CTAs = 4 x tiles_128 CTAs.)
  if (const int split = SplitOf(tile);
      split > 1 && (k_blocks < split || tiles_128 * split * 2 > INT32_MAX))
    tile = WithoutScalesTma(tile) != tile ? Sm90BlockwiseGemmTile::kN128ScalesTma : Sm90BlockwiseGemmTile::kN128;
  // Scales through TMA: the bulk copies need 16-byte aligned sources (the A-scale chunk of K
  // block kb starts at float kb·M + m0) and sizes; otherwise the same tile with __ldg scales.
  if (m % 4 != 0 || !Aligned16(a_scale_inv) || !Aligned16(b_scale_inv)) tile = WithoutScalesTma(tile);
  // CTA pairs need an even number of column blocks; otherwise the same tile without pairs (128x64
  // pairs always have one: N is a multiple of 128).
  if ((n / 128) % 2 != 0) {
    if (tile == Sm90BlockwiseGemmTile::kN128PairSharedA) tile = Sm90BlockwiseGemmTile::kN128;
    if (tile == Sm90BlockwiseGemmTile::kN128PairSharedAScalesTma) tile = Sm90BlockwiseGemmTile::kN128ScalesTma6Stages;
  }
  switch (tile) {
    case Sm90BlockwiseGemmTile::kN128PairSharedA:
      return Launch<ConfigN128PairA>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64PairSharedA:
      return Launch<ConfigN64PairA>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SingleAccumulator:
      return Launch<ConfigN128Single>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128OverlapEpilogue:
      return Launch<ConfigN128Overlap>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64:
      return Launch<ConfigN64>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64OverlapEpilogue:
      return Launch<ConfigN64Overlap>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK2:
      return Launch<ConfigN128SplitK2>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK4:
      return Launch<ConfigN128SplitK4>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK8:
      return Launch<ConfigN128SplitK8>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64PrefetchB:
      return Launch<ConfigN64PrefetchB>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK2PrefetchB:
      return Launch<ConfigN128SplitK2PrefetchB>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128ScalesTma:
      return Launch<ConfigN128ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64ScalesTma:
      return Launch<ConfigN64ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTma:
      return Launch<ConfigN128SplitK2ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK4ScalesTma:
      return Launch<ConfigN128SplitK4ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128ScalesTma6Stages:
      return Launch<ConfigN128ScalesTma6>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128PairSharedAScalesTma:
      return Launch<ConfigN128PairAScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64PairSharedAScalesTma:
      return Launch<ConfigN64PairAScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64SplitK2ScalesTma:
      return Launch<ConfigN64SplitK2ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN112SplitK2ScalesTma:
      return Launch<ConfigN112SplitK2ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN56ScalesTma:
      return Launch<ConfigN56ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128SplitK2ScalesTmaL2Hints:
      return Launch<ConfigN128SplitK2ScalesTmaL2>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN64ScalesTmaL2Hints:
      return Launch<ConfigN64ScalesTmaL2>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192ScalesTma:
      return Launch<ConfigN192ScalesTma>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192PingPong:
      return Launch<ConfigN192PingPong>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192PingPongGroup16:
      return Launch<ConfigN192PingPongGroup16>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128PingPong:
      return Launch<ConfigN128PingPong>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128ScalesTma6StagesGroup16:
      return Launch<ConfigN128ScalesTma6Group16>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192PingPongPassAtHalf:
      return Launch<ConfigN192PingPongPassAtHalf>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192PingPongPassAtEnd:
      return Launch<ConfigN192PingPongPassAtEnd>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN128PingPongPassAtHalf:
      return Launch<ConfigN128PingPongPassAtHalf>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192HalfAccumulators:
      return Launch<ConfigN192HalfAcc>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    case Sm90BlockwiseGemmTile::kN192HalfAccumulatorsGroup16:
      return Launch<ConfigN192HalfAccGroup16>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
    default:
      return Launch<ConfigN128>(a, a_scale_inv, b, b_scale_inv, m, n, k, d, device, sms, stream);
  }
}

}  // namespace fp8::kernels::cuda
