// SPDX-License-Identifier: Apache-2.0
#include "worker/train/cuda/cuda_causal_lm.h"

#include "worker/train/cuda/cuda_llama_model.h"
#include "worker/train/cuda/cuda_model.h"

namespace fp8::train::cuda {

StatusOr<std::unique_ptr<CudaCausalLm>> MakeCudaCausalLm(const ModelConfig& cfg, const PrecisionConfig& precision,
                                                         const std::vector<ParamTensor>& tensors, int max_batch,
                                                         cudaStream_t stream, const CudaModelOptions& options) {
  switch (cfg.architecture) {
    case Architecture::kGpt2: {
      FP8_ASSIGN_OR_RETURN(auto m, CudaGptModel::Create(cfg, precision, tensors, max_batch, stream, options));
      return std::unique_ptr<CudaCausalLm>(std::move(m));
    }
    case Architecture::kLlama: {
      FP8_ASSIGN_OR_RETURN(auto m, CudaLlamaModel::Create(cfg, precision, tensors, max_batch, stream, options));
      return std::unique_ptr<CudaCausalLm>(std::move(m));
    }
  }
  return InvalidArgumentError("model.architecture: unknown");
}

}  // namespace fp8::train::cuda
