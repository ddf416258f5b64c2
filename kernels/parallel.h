// SPDX-License-Identifier: Apache-2.0
// A minimal thread pool for the CPU reference: ParallelFor over [0, n) in contiguous chunks.
// Threads = FP8_NUM_THREADS or the cores this process may run on (its CPU affinity), read once
// at first use (fp8-worker sets FP8_NUM_THREADS to a rank's share); the calling
// thread is one of them. A ParallelFor called from inside another one, or while another
// thread's ParallelFor holds the pool, runs inline on its caller (no deadlock, no waiting).
// The chunking depends only on n, min_chunk and the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace fp8::kernels {

int NumThreads();
// Calls fn(begin, end) on disjoint chunks covering [0, n); runs inline when n is small.
void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace fp8::kernels
