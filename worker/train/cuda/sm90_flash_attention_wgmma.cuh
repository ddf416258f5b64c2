// SPDX-License-Identifier: Apache-2.0
// The wgmma flash-attention kernels' own helpers (sm90_flash_attention_wgmma{,_dkdv}.cu): the
// ping-pong turns of the consumer warpgroups, the swizzled row store, and wgmma m64nNk16 BF16
// with both operands in shared memory (SS, for S = Q·Kᵀ) or A in registers (RS, for O += P·V).
// The PTX wrappers they share with the FP8 GEMM are in kernels/cuda/sm90_ptx.cuh.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/sm90_ptx.cuh"
#include "worker/train/cuda/sm90_flash_attention.h"

namespace fp8::train::cuda::wgmma_attention {

namespace ptx = ::fp8::kernels::cuda::ptx;
using ptx::LdSharedV4;
using ptx::NamedBarrierArrive;
using ptx::PackBf16;
using ptx::StSharedU32;
using ptx::Exp2;
using ptx::MakeSmemDescSw128MnMajor;
using ptx::TmaLoad4d;

constexpr int kSwizzleCols = 64;  // BF16 columns in one 128-byte swizzle row
constexpr int kTileRows = 128;    // rows of the tile a CTA owns (queries, or keys in dK/dV), 64 per consumer warpgroup

// One head's [T, hd] rows of q, k, v or dy as a 4-D TMA tensor (d, row, head, batch) or (d, head,
// row, batch), whichever has the smaller stride first; box = 64 columns (one 128-byte swizzle row)
// × `box_rows` rows, 128-byte swizzle (sm90_flash_attention_wgmma.cu).
StatusOr<CUtensorMap> HeadsTensorMap(const __nv_bfloat16* ptr, const AttentionDims& d, HeadLayout l, uint32_t box_rows,
                                     const char* what);

// The dims of the key/value tensors: KvHeads(d) heads (their tensor maps' head dimension).
inline AttentionDims KvDims(const AttentionDims& d) {
  AttentionDims kv = d;
  kv.heads = KvHeads(d);
  kv.kv_heads = 0;
  return kv;
}

// One box of a head's rows global → shared: coordinates (d, row, head, batch) in the order of the
// tensor map's dimensions (HeadsTensorMap puts rows or heads first, whichever has the smaller
// stride).
__device__ __forceinline__ void TmaLoadHeadRows(uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row,
                                                int head, int batch, bool rows_first) {
  if (rows_first) TmaLoad4d(dst, map, bar, col, row, head, batch);
  else TmaLoad4d(dst, map, bar, col, head, row, batch);
}

// The ping-pong schedule of the two consumer warpgroups (cw 0 and 1): a warpgroup issues its
// turn's GEMMs between Begin and End, so one warpgroup's softmax runs under the other's GEMMs.
// Named barriers 3 and 4, 256 threads each: warpgroup cw waits on 3 + cw and releases 4 − cw.
struct PingPongTurns {
  uint32_t my_turn, other_turn, cw;
  __device__ explicit PingPongTurns(uint32_t consumer) : my_turn(3 + consumer), other_turn(4 - consumer), cw(consumer) {
    if (cw == 1) NamedBarrierArrive(3, 256);  // warpgroup 0 goes first
  }
  __device__ void Begin() const { ptx::NamedBarrierSync(my_turn, 256); }
  // The last turn of warpgroup 1 has no partner left to release (its arrive would dangle).
  __device__ void End(bool last) const {
    if (!last || cw == 0) NamedBarrierArrive(other_turn, 256);
  }
};

// A consumer warpgroup's 64×D accumulator (wgmma layout), row r scaled by f[r] (this thread's
// rows g and g + 8 of its warp), → BF16 into the warpgroup's rows of the 128-row swizzled tile at
// s_tile (its own Q, K or V rows, spent) → 16-byte stores to rows q0 + 64·cw + r of dst (rows ≥ T
// dropped). Named barrier 1 + cw (the warpgroup's 128 threads) between the two halves.
template <int D>
__device__ __forceinline__ void StoreRows(const float (&acc)[D / 2], const float (&f)[2], uint32_t s_tile, int cw,
                                          __nv_bfloat16* dst, int64_t row_stride, int q0, int64_t T) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 64 * cw + 16 * warp + g + 8 * r;  // in the tile
      const uint32_t addr = s_tile + (i / 8) * kTileRows * 128 + row * 128 + (((i % 8) ^ (row & 7)) << 4) + 4 * t4;
      StSharedU32(addr, PackBf16(acc[4 * i + 2 * r] * f[r], acc[4 * i + 2 * r + 1] * f[r]));
    }
  ptx::NamedBarrierSync(1 + cw, 128);
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll
  for (int pass = 0; pass < 64 * kChunks / 128; ++pass) {
    const int idx = pass * 128 + threadIdx.x % 128;
    const int r = idx / kChunks, c = idx % kChunks, row = 64 * cw + r;
    if (q0 + row >= T) continue;
    const uint4 v = LdSharedV4(s_tile + (c / 8) * kTileRows * 128 + row * 128 + (((c % 8) ^ (row & 7)) << 4));
    *reinterpret_cast<uint4*>(dst + (q0 + row) * row_stride + c * 8) = v;
  }
}

// D[64 x 64] (+)= A[64 x 16] · B[64 x 16]ᵀ, A and B K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaSS(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 64] (+)= A[64 x 16] · B[16 x 64]: A in registers (the accumulator layout of a k16
// slice, as BF16 pairs), B MN-major (rows of N contiguous) in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaRS(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 128] (+)= A[64 x 16] · B[128 x 16]ᵀ, A and B K-major in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaSS(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 128] (+)= A[64 x 16] · B[16 x 128]: A in registers (the accumulator layout of a k16
// slice, as BF16 pairs), B MN-major (rows of N contiguous) in 128B-swizzled shared memory.
__device__ __forceinline__ void WgmmaRS(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

}  // namespace fp8::train::cuda::wgmma_attention
