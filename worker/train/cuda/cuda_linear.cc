// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/cuda_linear.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/sm90_cuda_check.h"
#include "kernels/cuda/sm90_fp8_quantize.h"
#include "kernels/cuda/sm90_fp8_quantize_transpose.h"
#include "kernels/cuda/sm90_fp8_tensor_quantize.h"
#include "kernels/fp8_format.h"
#include "worker/train/cuda/adamw_cast.h"
#include "worker/train/cuda/cuda_model.h"

namespace fp8::train::cuda {

using kernels::Fp8Format;
using kernels::ScaleFormat;
namespace kc = kernels::cuda;

namespace {
int64_t Ceil128(int64_t x) { return (x + 127) / 128; }
}  // namespace

StatusOr<std::unique_ptr<LinearWorkspace>> LinearWorkspace::Create(const PrecisionConfig& p, int64_t max_m,
                                                                   int64_t max_in, int64_t max_out) {
  auto ws = std::make_unique<LinearWorkspace>();
  const int64_t wmax = max_in * max_out;
  const int64_t dmax = std::max(max_in, max_out);
  ws->dw_scratch_floats = wmax;
  FP8_RETURN_IF_ERROR(ws->col_scratch.Allocate(static_cast<size_t>(ColumnScratchFloats(max_m, dmax)), "column scratch"));
  FP8_RETURN_IF_ERROR(ws->amax.Allocate(8, "amax"));
  FP8_RETURN_IF_ERROR(ws->tmp_state.Allocate(static_cast<size_t>(DelayedStateFloats(std::max(1, p.amax_history_len))), "scaling scratch"));
  if (p.recipe == Recipe::kBf16 || p.recipe == Recipe::kFp32) return ws;
  FP8_RETURN_IF_ERROR(ws->fp8_stats.Allocate(1, "fp8 cast statistics"));
  const int64_t amax_el = max_m * dmax;
  FP8_RETURN_IF_ERROR(ws->aq.Allocate(static_cast<size_t>(amax_el), "fp8 activation"));
  FP8_RETURN_IF_ERROR(ws->aqt.Allocate(static_cast<size_t>(amax_el), "fp8 activation transposed"));
  if (p.recipe == Recipe::kFp8Tensorwise) {  // byte transposes (blockwise casts write its transposes itself)
    FP8_RETURN_IF_ERROR(ws->bq.Allocate(static_cast<size_t>(std::max(wmax, amax_el)), "fp8 weight"));
    FP8_RETURN_IF_ERROR(ws->bqt.Allocate(static_cast<size_t>(std::max(wmax, amax_el)), "fp8 weight transposed"));
  }
  // Scales: 1x128 of [m, d] → d/128·m; 128x128 of [r, c] → r/128·ld(c). Generous bounds.
  const int64_t s1 = Ceil128(dmax) * max_m + Ceil128(max_m) * dmax + 64;
  const int64_t s2 = Ceil128(dmax) * kc::Sm90BlockScaleLd(std::max(dmax, max_m)) + Ceil128(max_m) * kc::Sm90BlockScaleLd(dmax) + 64;
  const int64_t smax = std::max(s1, s2);
  FP8_RETURN_IF_ERROR(ws->as.Allocate(static_cast<size_t>(smax), "activation scales"));
  FP8_RETURN_IF_ERROR(ws->ast.Allocate(static_cast<size_t>(smax), "activation scales transposed"));
  return ws;
}

CudaLinear::CudaLinear(int64_t in, int64_t out, float* w, float* b, float* gw, float* gb,
                       const PrecisionConfig& p, LinearWorkspace* ws, cublasHandle_t cublas,
                       kernels::cuda::Sm90CublasLtContext* lt, Bf16EpilogueGemm* epilogue_gemm, cudaStream_t s)
    : in_(in), out_(out), w_(w), b_(b), gw_(gw), gb_(gb), p_(p), ws_(ws), cublas_(cublas), lt_(lt), epi_(epilogue_gemm), s_(s) {
  fuse_ = (p.recipe == Recipe::kBf16 || p.recipe == Recipe::kFp32) && epi_ != nullptr;
}

DelayedScalingParams CudaLinear::Params(Fp8Format fmt) const {
  return {std::max(1, p_.amax_history_len), p_.margin, p_.amax_most_recent, p_.ue8m0, kernels::Fp8Max(fmt)};
}

Status CudaLinear::Init(int64_t max_m, float* amax_slots, bool input_cast_outside) {
  // One allocation per scale: cuBLASLt answered NOT_SUPPORTED (H200, CUDA 13.0) for a
  // tensorwise scale pointer 4 bytes into an allocation; cudaMalloc's alignment is accepted.
  for (DeviceBuffer<float>* b : {&si_x_, &si_w_, &si_dy_}) FP8_RETURN_IF_ERROR(b->Allocate(1, "used scale_inv"));
  if (p_.recipe == Recipe::kBf16 || p_.recipe == Recipe::kFp32) {
    FP8_RETURN_IF_ERROR(b_bf16_.Allocate(static_cast<size_t>(out_), "bf16 bias"));
    return w_bf16_.Allocate(static_cast<size_t>(in_ * out_), "bf16 weight");
  }
  FP8_RETURN_IF_ERROR(wq_.Allocate(static_cast<size_t>(in_ * out_), "fp8 weight cast"));
  if (p_.recipe == Recipe::kFp8Blockwise) {
    if (!input_cast_outside) {
      FP8_RETURN_IF_ERROR(xqt_.Allocate(static_cast<size_t>(max_m * in_), "fp8 xᵀ cast"));
      FP8_RETURN_IF_ERROR(xqt_scale_.Allocate(static_cast<size_t>(Ceil128(in_) * kc::Sm90BlockScaleLd(max_m)), "fp8 xᵀ block scales"));
    }
    FP8_RETURN_IF_ERROR(wqt_.Allocate(static_cast<size_t>(in_ * out_), "fp8 transposed weight cast"));
    FP8_RETURN_IF_ERROR(wqt_scale_.Allocate(static_cast<size_t>(Ceil128(in_) * kc::Sm90BlockScaleLd(out_)), "fp8 transposed weight block scales"));
    return wq_scale_.Allocate(static_cast<size_t>(Ceil128(out_) * kc::Sm90BlockScaleLd(in_)), "fp8 weight block scales");
  }
  const int h = std::max(1, p_.amax_history_len);
  x_sc_.amax = amax_slots;
  w_sc_.amax = amax_slots + 1;
  dy_sc_.amax = amax_slots + 2;
  dy_sc_.format = Fp8Format::kE5M2;
  for (Scaling* sc : {&x_sc_, &w_sc_, &dy_sc_}) {
    FP8_RETURN_IF_ERROR(sc->state.Allocate(static_cast<size_t>(DelayedStateFloats(h)), "scaling state"));
    // Empty history, scale_inv 1 (DelayedScaling's initial state).
    std::vector<float> init(static_cast<size_t>(DelayedStateFloats(h)), 0.0f);
    init.back() = 1.0f;
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(sc->state.get(), init.data(), init.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  return xq_saved_.Allocate(static_cast<size_t>(max_m * in_), "saved x cast");
}

template <typename T>
Status CudaLinear::CountCast(const T* x, int64_t n, const float* scale_inv, Fp8Format fmt) {
  if (!ws_->collect_fp8_stats) return OkStatus();
  ws_->fp8_stats_elements += n;
  return AccumulateFp8CastStats(x, n, scale_inv, kernels::Fp8Max(fmt), ws_->fp8_stats.get(), s_);
}

// Casts with the delayed scale and copies the scale_inv it used to *si_dst (backward reads it
// there). A training cast records its amax in sc.amax for ApplyScalingUpdates; evaluation casts
// leave the state and the slot alone. The very first cast has no history yet: it is scaled by
// its own amax (on a copy of the state, as LinearPrecision::Tensorwise bootstraps), and that
// amax goes into the history like any other.
template <typename T>
Status CudaLinear::CastTensorwise(Scaling& sc, const T* x, int64_t n, uint8_t* q, bool training, float* si_dst) {
  const int h = std::max(1, p_.amax_history_len);
  float* scratch_amax = ws_->amax.get();
  float* amax_out = training ? sc.amax : scratch_amax;
  const float* scale_inv = DelayedScaleInv(sc.state.get(), h);
  if (!sc.seeded) {
    float* tmp = ws_->tmp_state.get();
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(tmp, sc.state.get(), DelayedStateFloats(h) * sizeof(float), cudaMemcpyDeviceToDevice, s_));
    FP8_RETURN_IF_ERROR(kc::Sm90Amax(x, n, amax_out, s_));
    FP8_RETURN_IF_ERROR(DelayedScalingUpdate(tmp, amax_out, Params(sc.format), s_));
    FP8_RETURN_IF_ERROR(kc::Sm90Fp8QuantizeTensor(x, n, DelayedScaleInv(tmp, h), sc.format, q, scratch_amax + 1, s_));
    scale_inv = DelayedScaleInv(tmp, h);
  } else {
    FP8_RETURN_IF_ERROR(kc::Sm90Fp8QuantizeTensor(x, n, scale_inv, sc.format, q, amax_out, s_));
  }
  if (training) {
    sc.pending = true;
    FP8_RETURN_IF_ERROR(CountCast(x, n, scale_inv, sc.format));
  }
  FP8_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(si_dst, scale_inv, sizeof(float), cudaMemcpyDeviceToDevice, s_));
  return OkStatus();
}

Status CudaLinear::ApplyScalingUpdates() {
  for (Scaling* sc : {&x_sc_, &w_sc_, &dy_sc_}) {
    if (!sc->pending) continue;
    FP8_RETURN_IF_ERROR(DelayedScalingUpdate(sc->state.get(), sc->amax, Params(sc->format), s_));
    sc->pending = false;
    sc->seeded = true;
  }
  return OkStatus();
}

template <typename Gemm>
Status CudaLinear::AccumulateWgrad(Gemm&& gemm) {
  if (overwrite_dw_) return gemm(gw_, 0.0f);
  if (ws_->dw_in_place) {
    const Status st = gemm(gw_, 1.0f);
    if (st.ok()) return st;
    // Only cuBLASLt refusing beta = 1 gets here (a bad shape or pointer fails the fallback too).
    std::fprintf(stderr, "fp8 wgrad: in-place accumulate refused (%s); using an FP32 dW scratch\n", st.message().c_str());
    ws_->dw_in_place = false;
  }
  if (ws_->dw.get() == nullptr)
    FP8_RETURN_IF_ERROR(ws_->dw.Allocate(static_cast<size_t>(ws_->dw_scratch_floats), "linear dW scratch"));
  FP8_RETURN_IF_ERROR(gemm(ws_->dw.get(), 0.0f));
  return Accumulate(ws_->dw.get(), in_ * out_, gw_, s_);
}

Status CudaLinear::ForwardNoBias(const bf16* x, int64_t m, bf16* y, bool training) {
  switch (p_.recipe) {
    case Recipe::kFp32:
    case Recipe::kBf16: {
      FP8_RETURN_IF_ERROR(EnsureWeightCast());
      FP8_RETURN_IF_ERROR(GemmBf16(cublas_, false, true, m, out_, in_, 1.0f, x, in_, w_bf16_.get(), in_, 0.0f, y, out_, false));
      Mark(kFwdGemm);
      break;
    }
    case Recipe::kFp8Tensorwise: {
      // The histories take this step's amaxes only in ApplyScalingUpdates: a cast never sees a
      // scale its own amax produced.
      FP8_RETURN_IF_ERROR(CastTensorwise(x_sc_, x, m * in_, xq_saved_.get(), training, si_x_.get()));
      FP8_RETURN_IF_ERROR(CastTensorwise(w_sc_, w_, in_ * out_, wq_.get(), training, si_w_.get()));
      FP8_RETURN_IF_ERROR(kc::Sm90GemmFp8TensorwiseCublasLt(*lt_, xq_saved_.get(), Fp8Format::kE4M3, si_x_.get(), wq_.get(),
                                                            Fp8Format::kE4M3, si_w_.get(), m, out_, in_, y,
                                                            kc::Sm90GemmOut::kBf16, s_));
      break;
    }
    case Recipe::kFp8Blockwise: {
      const ScaleFormat sf = BlockScaleFormat();
      if (training) {
        if (xqt_.get() == nullptr)
          return FailedPreconditionError("this fp8-blockwise layer trains on its input's cast (Fp8BlockOperand), not on x");
        // x in 1x128 tiles for this GEMM and xᵀ in 128x128 blocks for the backward's wgrad, from
        // one read of x.
        FP8_RETURN_IF_ERROR(kc::Sm90Fp8Quantize1x128AndTransposed128x128(x, m, in_, Fp8Format::kE4M3, sf, ws_->aq.get(), ws_->as.get(),
                                                                        xqt_.get(), xqt_scale_.get(), kc::Sm90BlockScaleLd(m), s_));
        FP8_RETURN_IF_ERROR(CountCast(x, m * in_, nullptr, Fp8Format::kE4M3));
        // W as this forward reads it (its cast may have come from the optimizer step).
        FP8_RETURN_IF_ERROR(CountCast(static_cast<const float*>(w_), in_ * out_, nullptr, Fp8Format::kE4M3));
      } else {
        FP8_RETURN_IF_ERROR(kc::Sm90Fp8Quantize1x128(x, m, in_, Fp8Format::kE4M3, sf, kc::Sm90ScaleLayout::kMnMajor, ws_->aq.get(),
                                                     ws_->as.get(), s_));
      }
      Mark(kXCast);
      FP8_RETURN_IF_ERROR(GemmForwardBlockwise(ws_->aq.get(), ws_->as.get(), m, y));
      break;
    }
  }
  return OkStatus();
}

Status CudaLinear::GemmForwardBlockwise(const uint8_t* xq, const float* xs, int64_t m, bf16* y) {
  FP8_RETURN_IF_ERROR(EnsureWeightCast());
  FP8_RETURN_IF_ERROR(kc::Sm90GemmFp8BlockwiseCublasLt(*lt_, xq, Fp8Format::kE4M3, xs, wq_.get(), Fp8Format::kE4M3, wq_scale_.get(), m, out_,
                                                       in_, y, kc::Sm90GemmOut::kBf16, s_));
  Mark(kFwdGemm);
  return OkStatus();
}

Status CudaLinear::Forward(const Fp8BlockOperand& x, int64_t m, bf16* y, bool training) {
  if (p_.recipe != Recipe::kFp8Blockwise) return FailedPreconditionError("a cast input (Fp8BlockOperand) is fp8-blockwise's");
  if (training && ws_->collect_fp8_stats) {
    // x's amax went into the statistics with its cast; its elements count once per layer, as
    // when each layer cast x itself.
    ws_->fp8_stats_elements += m * in_;
    FP8_RETURN_IF_ERROR(CountCast(static_cast<const float*>(w_), in_ * out_, nullptr, Fp8Format::kE4M3));
  }
  FP8_RETURN_IF_ERROR(GemmForwardBlockwise(x.q, x.s, m, y));
  if (b_ == nullptr) return OkStatus();
  FP8_RETURN_IF_ERROR(AddBias(y, b_, m, out_, s_));
  Mark(kOther);
  return OkStatus();
}

void CudaLinear::SetOpTimer(OpTimer* timer, const std::string& role) {
  timer_ = timer;
  const char* names[kNumOps] = {"x cast", "W cast", "fwd GEMM", "dy cast", "dgrad GEMM", "wgrad GEMM", "bias/epilogue pass"};
  for (int i = 0; i < kNumOps; ++i) labels_[i] = role + " " + names[i];
}

Status CudaLinear::EnsureWeightCast() {
  if (w_cast_current_) return OkStatus();
  if (p_.recipe == Recipe::kFp8Blockwise) {
    // W in 128x128 blocks for the forward GEMM, and Wᵀ for dgrad's, in one pass over the FP32 W.
    const ScaleFormat sf = BlockScaleFormat();
    FP8_RETURN_IF_ERROR(kc::Sm90Fp8Quantize128x128WithTranspose(w_, out_, in_, Fp8Format::kE4M3, sf, wq_.get(), wq_scale_.get(),
                                                                kc::Sm90BlockScaleLd(in_), wqt_.get(), wqt_scale_.get(),
                                                                kc::Sm90BlockScaleLd(out_), s_));
  } else {
    FP8_RETURN_IF_ERROR(CastF32ToBf16(w_, in_ * out_, w_bf16_.get(), s_));
  }
  Mark(kWCast);
  w_cast_current_ = true;
  return OkStatus();
}

bool CudaLinear::FusesOptimizerStep() const { return p_.recipe != Recipe::kFp8Tensorwise; }

Status CudaLinear::OptimizerStep(const AdamWArgs& a, float* m, float* v, bool decay) {
  if (p_.recipe == Recipe::kFp8Blockwise) {
    const ScaleFormat sf = BlockScaleFormat();
    FP8_RETURN_IF_ERROR(AdamWStepCast128x128(w_, gw_, m, v, out_, in_, decay, a, Fp8Format::kE4M3, sf, wq_.get(), wq_scale_.get(),
                                             kc::Sm90BlockScaleLd(in_), wqt_.get(), wqt_scale_.get(), kc::Sm90BlockScaleLd(out_), s_));
  } else if (FusesOptimizerStep()) {
    FP8_RETURN_IF_ERROR(AdamWStepTensor(w_, gw_, m, v, in_ * out_, decay, a, w_bf16_.get(), s_));
  } else {
    return FailedPreconditionError("fp8-tensorwise casts W with the scale of the step that reads it; step W with AdamWStep");
  }
  w_cast_current_ = true;
  return OkStatus();
}

bool CudaLinear::MayFuse(Bf16Epilogue e) const { return fuse_ && !refused_[static_cast<int>(e)]; }

StatusOr<bool> CudaLinear::RunFused(const Bf16GemmArgs& g) {
  const Status st = epi_->Run(g, s_);
  if (st.ok()) return true;
  if (st.code() != StatusCode::kUnimplemented) return st;
  refused_[static_cast<int>(g.epilogue)] = true;
  return false;
}

StatusOr<bool> CudaLinear::TryFusedForward(const bf16* x, int64_t m, bf16* y, Bf16Epilogue e, bf16* aux) {
  if (!MayFuse(e)) return false;
  FP8_RETURN_IF_ERROR(EnsureWeightCast());
  FP8_RETURN_IF_ERROR(CastF32ToBf16(b_, out_, b_bf16_.get(), s_));  // the epilogue takes the bias in D's type
  Bf16GemmArgs g;
  g.tb = true;
  g.m = m, g.n = out_, g.k = in_;
  g.a = x, g.lda = in_;
  g.b = w_bf16_.get(), g.ldb = in_;
  g.d = y, g.ldd = out_;
  g.epilogue = e, g.bias = b_bf16_.get();
  g.aux = aux, g.ld_aux = out_;
  return RunFused(g);
}

Status CudaLinear::Forward(const bf16* x, int64_t m, bf16* y, bool training) {
  FP8_ASSIGN_OR_RETURN(const bool fused, TryFusedForward(x, m, y, Bf16Epilogue::kBias, nullptr));
  if (fused) return OkStatus();
  FP8_RETURN_IF_ERROR(ForwardNoBias(x, m, y, training));
  return AddBias(y, b_, m, out_, s_);
}

Status CudaLinear::ForwardGelu(const bf16* x, int64_t m, bf16* pre, bf16* y, bool training) {
  FP8_ASSIGN_OR_RETURN(const bool fused, TryFusedForward(x, m, y, Bf16Epilogue::kGeluAuxBias, pre));
  if (fused) return OkStatus();
  FP8_RETURN_IF_ERROR(ForwardNoBias(x, m, pre, training));
  return BiasGeluForward(pre, b_, m, out_, y, s_);
}

Status CudaLinear::BackwardIntoGelu(const bf16* dy, const bf16* x, int64_t m, const bf16* pre, bf16* dpre, float* pre_bias_grad) {
  bool fused = false;
  if (MayFuse(Bf16Epilogue::kDGelu)) {
    // dgrad with GELU's derivative in the epilogue (W's bf16 cast is still the forward's).
    Bf16GemmArgs g;
    g.m = m, g.n = in_, g.k = out_;
    g.a = dy, g.lda = out_;
    g.b = w_bf16_.get(), g.ldb = in_;
    g.d = dpre, g.ldd = in_;
    g.epilogue = Bf16Epilogue::kDGelu;
    g.aux = const_cast<bf16*>(pre), g.ld_aux = in_;
    FP8_ASSIGN_OR_RETURN(fused, RunFused(g));
  }
  if (fused) {
    FP8_RETURN_IF_ERROR(Backward(dy, x, m, nullptr));
  } else {
    FP8_RETURN_IF_ERROR(Backward(dy, x, m, dpre));
    FP8_RETURN_IF_ERROR(GeluBackward(dpre, pre, m * in_, dpre, s_));
  }
  return ColumnSumAccumulate(dpre, m, in_, pre_bias_grad, ws_->col_scratch.get(), s_);
}

Status CudaLinear::Backward(const bf16* dy, const bf16* x, int64_t m, bf16* dx, bool bias_grad) {
  if (bias_grad) FP8_RETURN_IF_ERROR(ColumnSumAccumulate(dy, m, out_, gb_, ws_->col_scratch.get(), s_));
  switch (p_.recipe) {
    case Recipe::kFp32:
    case Recipe::kBf16: {
      // W has not changed since Forward cast it (the optimizer steps after Backward).
      if (dx) {
        FP8_RETURN_IF_ERROR(GemmBf16(cublas_, false, false, m, in_, out_, 1.0f, dy, out_, w_bf16_.get(), in_, 0.0f, dx, in_, false));
        Mark(kDgrad);
      }
      FP8_RETURN_IF_ERROR(GemmBf16(cublas_, true, false, out_, in_, m, 1.0f, dy, out_, x, in_, overwrite_dw_ ? 0.0f : 1.0f, gw_, in_, true));
      Mark(kWgrad);
      return OkStatus();
    }
    case Recipe::kFp8Tensorwise: {
      FP8_RETURN_IF_ERROR(CastTensorwise(dy_sc_, dy, m * out_, ws_->aq.get(), true, si_dy_.get()));
      if (dx) {
        // Wᵀ as a byte transpose of the forward's cast (same W, same scale: no second cast).
        FP8_RETURN_IF_ERROR(TransposeU8(wq_.get(), out_, in_, in_, ws_->bqt.get(), out_, s_));
        FP8_RETURN_IF_ERROR(kc::Sm90GemmFp8TensorwiseCublasLt(*lt_, ws_->aq.get(), Fp8Format::kE5M2, si_dy_.get(), ws_->bqt.get(), Fp8Format::kE4M3,
                                                              si_w_.get(), m, in_, out_, dx, kc::Sm90GemmOut::kBf16, s_));
      }
      // wgrad: dyᵀ [out, m] (E5M2) × xᵀ [in, m] (E4M3), both byte transposes of the casts.
      FP8_RETURN_IF_ERROR(TransposeU8(ws_->aq.get(), m, out_, out_, ws_->aqt.get(), m, s_));
      FP8_RETURN_IF_ERROR(TransposeU8(xq_saved_.get(), m, in_, in_, ws_->bq.get(), m, s_));
      FP8_RETURN_IF_ERROR(AccumulateWgrad([&](float* c, float beta) {
        return kc::Sm90GemmFp8TensorwiseCublasLt(*lt_, ws_->aqt.get(), Fp8Format::kE5M2, si_dy_.get(), ws_->bq.get(), Fp8Format::kE4M3,
                                                 si_x_.get(), out_, in_, m, c, kc::Sm90GemmOut::kFp32, s_, beta);
      }));
      return OkStatus();
    }
    case Recipe::kFp8Blockwise:
      if (xqt_.get() == nullptr)
        return FailedPreconditionError("this fp8-blockwise layer trains on its input's cast (Fp8BlockOperand), not on x");
      return BackwardBlockwise(dy, xqt_.get(), xqt_scale_.get(), m, dx);
  }
  return OkStatus();
}

Status CudaLinear::Backward(const bf16* dy, const Fp8BlockOperand& x, int64_t m, bf16* dx, bool bias_grad) {
  if (p_.recipe != Recipe::kFp8Blockwise) return FailedPreconditionError("a cast input (Fp8BlockOperand) is fp8-blockwise's");
  if (bias_grad) FP8_RETURN_IF_ERROR(ColumnSumAccumulate(dy, m, out_, gb_, ws_->col_scratch.get(), s_));
  return BackwardBlockwise(dy, x.qt, x.st, m, dx);
}

Status CudaLinear::BackwardBlockwise(const bf16* dy, const uint8_t* xt, const float* xts, int64_t m, bf16* dx) {
  const ScaleFormat sf = BlockScaleFormat();
  // dy along N (for dgrad) and dyᵀ along M (for wgrad) in one pass.
  FP8_RETURN_IF_ERROR(kc::Sm90Fp8Quantize1x128WithTranspose(dy, m, out_, Fp8Format::kE4M3, sf, kc::Sm90ScaleLayout::kMnMajor,
                                                            ws_->aq.get(), ws_->as.get(), ws_->aqt.get(), ws_->ast.get(), s_));
  FP8_RETURN_IF_ERROR(CountCast(dy, m * out_, nullptr, Fp8Format::kE4M3));
  Mark(kDyCast);
  if (dx) {
    // Wᵀ in 128x128 blocks: the forward cast it with W (W has not changed since).
    FP8_RETURN_IF_ERROR(kc::Sm90GemmFp8BlockwiseCublasLt(*lt_, ws_->aq.get(), Fp8Format::kE4M3, ws_->as.get(), wqt_.get(), Fp8Format::kE4M3,
                                                         wqt_scale_.get(), m, in_, out_, dx, kc::Sm90GemmOut::kBf16, s_));
    Mark(kDgrad);
  }
  // xᵀ [in, m] in 128x128 blocks: quantized from x by the training forward or by x's producer.
  FP8_RETURN_IF_ERROR(AccumulateWgrad([&](float* c, float beta) {
    return kc::Sm90GemmFp8BlockwiseCublasLt(*lt_, ws_->aqt.get(), Fp8Format::kE4M3, ws_->ast.get(), xt, Fp8Format::kE4M3, xts, out_, in_, m,
                                            c, kc::Sm90GemmOut::kFp32, s_, beta);
  }));
  Mark(kWgrad);
  return OkStatus();
}

nlohmann::json CudaLinear::State() const {
  if (p_.recipe != Recipe::kFp8Tensorwise) return nlohmann::json::object();
  const int h = std::max(1, p_.amax_history_len);
  auto one = [&](const Scaling& sc) {
    std::vector<float> st(static_cast<size_t>(DelayedStateFloats(h)));
    cudaMemcpy(st.data(), sc.state.get(), st.size() * sizeof(float), cudaMemcpyDeviceToHost);
    const int count = static_cast<int>(st[static_cast<size_t>(h)]);
    std::vector<float> hist(st.begin(), st.begin() + count);
    return nlohmann::json{{"amax_history", hist}, {"scale_inv", st.back()}};
  };
  return {{"x", one(x_sc_)}, {"w", one(w_sc_)}, {"dy", one(dy_sc_)}};
}

Status CudaLinear::Restore(const nlohmann::json& state) {
  if (p_.recipe != Recipe::kFp8Tensorwise) return OkStatus();
  const int h = std::max(1, p_.amax_history_len);
  for (auto [key, sc] : {std::pair{"x", &x_sc_}, std::pair{"w", &w_sc_}, std::pair{"dy", &dy_sc_}}) {
    if (!state.contains(key) || !state[key].contains("amax_history") || !state[key].contains("scale_inv"))
      return DataLossError(std::string("fp8 scaling state lacks '") + key + "'");
    std::vector<float> hist = state[key]["amax_history"].get<std::vector<float>>();
    if (static_cast<int>(hist.size()) > h) hist.erase(hist.begin(), hist.end() - h);
    std::vector<float> st(static_cast<size_t>(DelayedStateFloats(h)), 0.0f);
    std::copy(hist.begin(), hist.end(), st.begin());
    st[static_cast<size_t>(h)] = static_cast<float>(hist.size());
    st.back() = state[key]["scale_inv"].get<float>();
    FP8_RETURN_IF_CUDA_ERROR(cudaMemcpy(sc->state.get(), st.data(), st.size() * sizeof(float), cudaMemcpyHostToDevice));
    sc->seeded = !hist.empty();
  }
  return OkStatus();
}

}  // namespace fp8::train::cuda
