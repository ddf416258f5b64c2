// SPDX-License-Identifier: Apache-2.0
// Which tensors a quantize job converts to FP8. A tensor is quantized when it is 2-D, matches an
// include pattern and no exclude pattern. Defaults: include `*.weight` (linear layers);
// exclude embeddings, lm_head, norms and MoE router gates, which DeepSeek-V3 / vLLM FP8
// checkpoints keep in high precision. A user `include` list replaces the default include; a
// tensor an explicit include pattern names is exempt from the default excludes (so
// include: ["*lm_head*"] quantizes lm_head), never from the user's own excludes.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/calibrate/spec.h"

namespace fp8::calibrate {

const std::vector<std::string>& DefaultIncludePatterns();
const std::vector<std::string>& DefaultExcludePatterns();
// Whether `module` (a tensor name less `.weight`) is a token or position embedding by the
// default exclude patterns' names (`*embed*`, `wte`, `wpe`).
bool IsEmbeddingModule(const std::string& module);

class TensorSelector {
 public:
  explicit TensorSelector(const WeightOptions& opts);
  // `rank` = number of dimensions.
  bool Selected(const std::string& name, size_t rank);
  // After every tensor was offered: InvalidArgument naming a user pattern that matched nothing.
  Status CheckEveryPatternMatched() const;

 private:
  struct Pattern {
    std::string glob;
    bool user = false;
    bool matched = false;
  };
  static bool Match(const std::string& glob, const std::string& name);
  std::vector<Pattern> include_, exclude_;
  bool user_include_ = false;
};

}  // namespace fp8::calibrate
