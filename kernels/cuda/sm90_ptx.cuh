// SPDX-License-Identifier: Apache-2.0
// PTX wrappers that the sm_90a kernels share: the blockwise FP8 GEMM
// (sm90_fp8_gemm_blockwise.cuh) and the wgmma flash attention (worker/train/cuda). mbarriers,
// TMA (cp.async.bulk.tensor), cluster shared memory, named barriers, setmaxnreg, wgmma fences and
// the 128-byte-swizzle shared-memory descriptors. The wgmma instructions themselves stay with
// their kernel (FP8 shapes in the GEMM, BF16 shapes in the attention).
#pragma once

#include <cuda.h>  // CUtensorMap (types only: the encoder is fetched through the runtime)

#include <cstdint>

namespace fp8::kernels::cuda::ptx {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void StSharedV4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
// 16 bytes from registers into the shared memory of CTA `cta` of the cluster at the offset
// `addr`, completing its bytes on that CTA's mbarrier at the offset `bar` (no fence needed: the
// receiver sees the data once it has seen the barrier's phase complete).
__device__ __forceinline__ void StAsyncV4(uint32_t addr, uint32_t bar, uint32_t cta, float a, float b, float c,
                                          float d) {
  asm volatile(
      "{\n.reg .b32 ra, rb;\n"
      "mapa.shared::cluster.u32 ra, %0, %2;\n"
      "mapa.shared::cluster.u32 rb, %1, %2;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [ra], {%3, %4, %5, %6}, [rb];\n}\n" ::"r"(addr),
      "r"(bar), "r"(cta), "f"(a), "f"(b), "f"(c), "f"(d)
      : "memory");
}
// Cluster barrier whose arrive orders nothing (barrier.cluster.arrive.relaxed): after barrier
// initialization (fence.mbarrier_init orders that), without the memory barrier of ClusterSync.
__device__ __forceinline__ void ClusterSyncRelaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait;" ::: "memory");
}
// All threads of all CTAs of the cluster (also a CTA-wide barrier).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// Spins until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Whether the phase with parity `parity` of the barrier has completed, without waiting (a probe
// issued early, so its latency passes while the thread does other work).
__device__ __forceinline__ bool MbarTestWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// MbarWait with acquire at cluster scope: for data that other CTAs of the cluster stored with
// st.async (StAsyncV4), whose completion on the barrier releases at cluster scope.
__device__ __forceinline__ void MbarWaitCluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// `bytes` (a multiple of 16; src and dst 16-byte aligned) global -> shared, completing on the
// mbarrier as a TMA tile does (1-D bulk copy, no tensor map).
__device__ __forceinline__ void BulkLoad1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ float LdSharedF32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
// 2-D tile global -> shared, completing `bytes` on the mbarrier (out-of-range elements are 0).
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                          int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
// As TmaLoad2d, with an L2 eviction policy for the lines it reads (CreatePolicyEvict*).
__device__ __forceinline__ void TmaLoad2dHint(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0,
                                              int32_t c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
// As TmaLoad2d, into the same shared-memory offset of every CTA of the cluster in `cta_mask`, each
// copy completing its bytes on that CTA's mbarrier at the offset `bar` (TMA multicast).
__device__ __forceinline__ void TmaLoad2dMulticast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0,
                                                   int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}
// Arrive on the mbarrier at the shared-memory offset `bar` of CTA `cta` of the cluster (default
// .release.cta semantics: the .cluster scope made ptxas put a MEMBAR.ALL.GPU before it).
__device__ __forceinline__ void MbarArriveRemote(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar), "r"(cta)
      : "memory");
}
__device__ __forceinline__ uint64_t CreatePolicyEvictFirst() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t CreatePolicyEvictLast() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// 2-D tile shared -> global (out-of-range rows/columns are not written).
__device__ __forceinline__ void TmaStore2d(const CUtensorMap* map, uint32_t src, int32_t c0,
                                           int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void BulkCommit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// The staging tile may be overwritten once the earlier stores have read it.
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void BulkWaitAll() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Ordinary shared-memory stores become visible to the TMA (async proxy).
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void NamedBarrierSync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Counts this thread's warp towards barrier `id` without waiting (the signalling side of a
// producer/consumer pair of named-barrier users).
__device__ __forceinline__ void NamedBarrierArrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// True in one lane of the calling warp (all 32 lanes must call). A branch on it is known to run
// in one thread, so ptxas issues the TMA instructions inside it once, without the loop over
// active lanes (ELECT ... BRA.U.ANY) it wraps them in under a plain threadIdx test.
__device__ __forceinline__ bool ElectOneSync() {
  uint32_t elected = 0;
  asm volatile(
      "{\n.reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(elected));
  return elected != 0;
}

template <uint32_t kRegs>
__device__ __forceinline__ void SetMaxNRegInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void SetMaxNRegDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// wgmma shared-memory descriptor of a K-major tile in the 128-byte swizzle layout that TMA
// writes: 8-row atoms of 128 bytes, 1024 bytes apart (stride byte offset); the leading byte
// offset is unused for swizzled K-major operands. Stepping K by 32 FP8 = +32 bytes = +2 in the
// address field (the hardware applies the swizzle to the computed addresses).
__device__ __forceinline__ uint64_t MakeSmemDescSw128(uint32_t smem_addr) {
  uint64_t desc = (smem_addr & 0x3FFFFu) >> 4;
  desc |= uint64_t{1024 >> 4} << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Tells the compiler the accumulator registers change here, so it neither reads them before a
// wgmma.wait nor moves them across an in-flight wgmma (CUTLASS's warpgroup_fence_operand).
template <int kN>
__device__ __forceinline__ void FenceOperands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// 4-D tile global → shared, completing its bytes on the mbarrier (elements outside the tensor,
// e.g. rows past the sequence, arrive as zeros).
__device__ __forceinline__ void TmaLoad4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1,
                                          int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Descriptor of an MN-major operand (N contiguous: V's rows, d fastest, used as B of P·V) stored
// as 128B-swizzled [rows][64] column blocks, `block_bytes` apart: within a block, 8-row groups are
// 1024 bytes apart (stride byte offset); the next 64 columns are one block further (leading byte
// offset). CUTLASS's canonical GMMA MN-major SW128 layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)).
__device__ __forceinline__ uint64_t MakeSmemDescSw128MnMajor(uint32_t smem_addr, uint32_t block_bytes) {
  uint64_t desc = (smem_addr & 0x3FFFFu) >> 4;
  desc |= uint64_t{(block_bytes >> 4) & 0x3FFFu} << 16;
  desc |= uint64_t{1024 >> 4} << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

// Two floats → BF16 pair (low half = lo), round to nearest.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Four 8x8 b16 matrices into shared memory: lane l gives the address of row l % 8 of matrix
// l / 8; register i of lane l holds row l / 4, columns 2 (l % 4) and + 1 of matrix i (the wgmma
// accumulator fragment of one 8-row, 8-column group, packed to bf16x2).
__device__ __forceinline__ void StMatrixX4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

__device__ __forceinline__ void StSharedU32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ float4 LdSharedV4F32(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ uint4 LdSharedV4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

}  // namespace fp8::kernels::cuda::ptx
