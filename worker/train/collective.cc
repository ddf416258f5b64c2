// SPDX-License-Identifier: Apache-2.0
#include "worker/train/collective.h"

#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

namespace fp8::train {
namespace {

// The counts of an all-to-all: one per rank, none negative, and what this rank sends itself is
// what it expects from itself.
Status CheckCounts(int rank, int world, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) {
  if (send.size() != static_cast<size_t>(world) || recv.size() != static_cast<size_t>(world))
    return InvalidArgumentError("all-to-all: " + std::to_string(world) + " counts per side expected, got " +
                                std::to_string(send.size()) + " and " + std::to_string(recv.size()));
  for (int r = 0; r < world; ++r)
    if (send[static_cast<size_t>(r)] < 0 || recv[static_cast<size_t>(r)] < 0)
      return InvalidArgumentError("all-to-all: negative count for rank " + std::to_string(r));
  if (send[static_cast<size_t>(rank)] != recv[static_cast<size_t>(rank)])
    return InvalidArgumentError("all-to-all: rank " + std::to_string(rank) + " sends itself " +
                                std::to_string(send[static_cast<size_t>(rank)]) + " elements but expects " +
                                std::to_string(recv[static_cast<size_t>(rank)]));
  return OkStatus();
}

class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status AllReduceSum(float*, size_t) override { return OkStatus(); }
  Status AllReduceMax(float*, size_t) override { return OkStatus(); }
  Status Barrier() override { return OkStatus(); }
  Status AllToAllV(const float* send, const std::vector<int64_t>& sc, float* recv, const std::vector<int64_t>& rc) override {
    return Copy(send, sc, recv, rc);
  }
  Status AllToAllV(const int64_t* send, const std::vector<int64_t>& sc, int64_t* recv,
                   const std::vector<int64_t>& rc) override {
    return Copy(send, sc, recv, rc);
  }

 private:
  template <typename T>
  Status Copy(const T* send, const std::vector<int64_t>& sc, T* recv, const std::vector<int64_t>& rc) {
    FP8_RETURN_IF_ERROR(CheckCounts(0, 1, sc, rc));
    std::copy_n(send, sc[0], recv);
    return OkStatus();
  }
};

class GlooCollective final : public Collective {
 public:
  GlooCollective(std::shared_ptr<gloo::rendezvous::Context> ctx, std::shared_ptr<gloo::transport::Device> dev)
      : ctx_(std::move(ctx)), dev_(std::move(dev)) {}
  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }

  Status AllReduceSum(float* data, size_t n) override { return AllReduce(data, n, &gloo::sum<float>); }
  Status AllReduceMax(float* data, size_t n) override { return AllReduce(data, n, &gloo::max<float>); }

  Status Barrier() override {
    try {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(tag_++);
      gloo::barrier(opts);
    } catch (const std::exception& e) {
      return UnavailableError(std::string("gloo barrier failed: ") + e.what());
    }
    return OkStatus();
  }

  Status AllToAllV(const float* send, const std::vector<int64_t>& sc, float* recv, const std::vector<int64_t>& rc) override {
    return Exchange(send, sc, recv, rc);
  }
  Status AllToAllV(const int64_t* send, const std::vector<int64_t>& sc, int64_t* recv,
                   const std::vector<int64_t>& rc) override {
    return Exchange(send, sc, recv, rc);
  }

 private:
  template <typename T>
  Status Exchange(const T* send, const std::vector<int64_t>& sc, T* recv, const std::vector<int64_t>& rc) {
    FP8_RETURN_IF_ERROR(CheckCounts(rank(), world_size(), sc, rc));
    // Gloo wraps each side in a buffer of the summed size: an empty side gets a one-element
    // stand-in, so no buffer is made over a null pointer.
    T empty_send{}, empty_recv{};
    const bool no_send = std::accumulate(sc.begin(), sc.end(), int64_t{0}) == 0;
    const bool no_recv = std::accumulate(rc.begin(), rc.end(), int64_t{0}) == 0;
    try {
      gloo::AlltoallvOptions opts(ctx_);
      opts.setInput(no_send ? &empty_send : const_cast<T*>(send), sc);  // only read
      opts.setOutput(no_recv ? &empty_recv : recv, rc);
      opts.setTag(tag_++);
      gloo::alltoallv(opts);
    } catch (const std::exception& e) {
      return UnavailableError(std::string("gloo alltoallv failed: ") + e.what());
    }
    return OkStatus();
  }

  using ReduceFn = void (*)(void*, const void*, const void*, size_t);
  Status AllReduce(float* data, size_t n, ReduceFn reduce) {
    try {
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(data, n);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setReduceFunction(reduce);
      opts.setTag(tag_++);
      gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return UnavailableError(std::string("gloo allreduce failed: ") + e.what());
    }
    return OkStatus();
  }

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::shared_ptr<gloo::transport::Device> dev_;
  uint32_t tag_ = 1;
};

}  // namespace

std::unique_ptr<Collective> MakeSingleProcessCollective() { return std::make_unique<SingleProcess>(); }

StatusOr<std::unique_ptr<Collective>> MakeGlooCollective(int rank, int world_size,
                                                         const std::string& rendezvous_dir,
                                                         std::chrono::milliseconds timeout) {
  if (rank < 0 || rank >= world_size)
    return InvalidArgumentError("FP8D_RANK: " + std::to_string(rank) + " not in [0, " + std::to_string(world_size) + ")");
  if (rendezvous_dir.empty()) return InvalidArgumentError("FP8D_RENDEZVOUS_DIR: required when FP8D_WORLD_SIZE > 1");
  std::error_code ec;
  std::filesystem::create_directories(rendezvous_dir, ec);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(rendezvous_dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    ctx->setTimeout(timeout);
    ctx->connectFullMesh(store, dev);
    return std::unique_ptr<Collective>(std::make_unique<GlooCollective>(std::move(ctx), std::move(dev)));
  } catch (const std::exception& e) {
    return UnavailableError(std::string("gloo rendezvous in ") + rendezvous_dir + " failed: " + e.what());
  }
}

}  // namespace fp8::train
