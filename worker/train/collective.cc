#include "worker/train/collective.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <filesystem>

namespace fp8::train {
namespace {

class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status AllReduceSum(float*, size_t) override { return OkStatus(); }
  Status AllReduceMax(float*, size_t) override { return OkStatus(); }
  Status Barrier() override { return OkStatus(); }
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

 private:
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
