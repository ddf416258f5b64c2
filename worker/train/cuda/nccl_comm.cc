// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/nccl_comm.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fp8::train::cuda {

// The slice of nccl.h this file needs (ABI-stable since NCCL 2.0).
namespace {
constexpr int kNcclUniqueIdBytes = 128;
struct NcclUniqueId {
  char internal[kNcclUniqueIdBytes];
};
constexpr int kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclSum = 0, kNcclMax = 2;
using GetUniqueIdFn = int (*)(NcclUniqueId*);
using CommInitRankFn = int (*)(void**, int, NcclUniqueId, int);
using AllReduceFn = int (*)(const void*, void*, size_t, int, int, void*, cudaStream_t);
using CommDestroyFn = int (*)(void*);
using GetErrorStringFn = const char* (*)(int);

template <typename F>
F Sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

Status NcclError(void* lib, int rc, const char* what) {
  auto err = Sym<GetErrorStringFn>(lib, "ncclGetErrorString");
  return InternalError(std::string(what) + ": NCCL error " + std::to_string(rc) + (err ? std::string(" (") + err(rc) + ")" : ""));
}
}  // namespace

StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(int rank, int world_size, const std::string& rendezvous_dir,
                                                     std::chrono::milliseconds timeout) {
  std::unique_ptr<NcclComm> c(new NcclComm());
  c->rank_ = rank;
  c->world_ = world_size;
  if (world_size <= 1) return c;
  if (rendezvous_dir.empty()) return InvalidArgumentError("FP8D_RENDEZVOUS_DIR: required when FP8D_WORLD_SIZE > 1");
  c->lib_ = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!c->lib_) return UnavailableError(std::string("cannot load NCCL (libnccl.so.2): ") + dlerror());
  auto get_id = Sym<GetUniqueIdFn>(c->lib_, "ncclGetUniqueId");
  auto init = Sym<CommInitRankFn>(c->lib_, "ncclCommInitRank");
  if (!get_id || !init || !Sym<AllReduceFn>(c->lib_, "ncclAllReduce"))
    return UnavailableError("libnccl.so.2 lacks ncclGetUniqueId/ncclCommInitRank/ncclAllReduce");
  namespace fs = std::filesystem;
  const fs::path id_path = fs::path(rendezvous_dir) / "nccl_unique_id";
  NcclUniqueId id{};
  if (rank == 0) {
    if (int rc = get_id(&id); rc != 0) return NcclError(c->lib_, rc, "ncclGetUniqueId");
    const fs::path tmp = id_path.string() + ".tmp";
    std::error_code ec;  // the launcher makes the directory; a rank started by hand may not have it
    fs::create_directories(rendezvous_dir, ec);
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(id.internal, kNcclUniqueIdBytes);
      if (!f) return UnavailableError("cannot write " + tmp.string());
    }
    fs::rename(tmp, id_path, ec);
    if (ec) return UnavailableError("cannot rename " + tmp.string() + ": " + ec.message());
  } else {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::ifstream f(id_path, std::ios::binary);
      if (f && f.read(id.internal, kNcclUniqueIdBytes)) break;
      if (std::chrono::steady_clock::now() > deadline)
        return UnavailableError("rank 0 did not publish " + id_path.string() + " in time");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (int rc = init(&c->comm_, world_size, id, rank); rc != 0) return NcclError(c->lib_, rc, "ncclCommInitRank");
  return c;
}

NcclComm::~NcclComm() {
  if (comm_) {
    if (auto destroy = Sym<CommDestroyFn>(lib_, "ncclCommDestroy")) destroy(comm_);
  }
  // The library stays loaded: NCCL's own threads may outlive the communicator briefly.
}

Status NcclComm::AllReduce(void* data, size_t n, int type, int op, cudaStream_t stream) {
  if (world_ <= 1 || n == 0) return OkStatus();
  auto fn = Sym<AllReduceFn>(lib_, "ncclAllReduce");
  if (int rc = fn(data, data, n, type, op, comm_, stream); rc != 0) return NcclError(lib_, rc, "ncclAllReduce");
  return OkStatus();
}

Status NcclComm::AllReduceSum(float* data, size_t n, cudaStream_t stream) { return AllReduce(data, n, kNcclFloat32, kNcclSum, stream); }
Status NcclComm::AllReduceSum(double* data, size_t n, cudaStream_t stream) { return AllReduce(data, n, kNcclFloat64, kNcclSum, stream); }
Status NcclComm::AllReduceMax(float* data, size_t n, cudaStream_t stream) { return AllReduce(data, n, kNcclFloat32, kNcclMax, stream); }

}  // namespace fp8::train::cuda
