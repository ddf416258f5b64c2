// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/selection.h"

#include <fnmatch.h>

namespace fp8::calibrate {

const std::vector<std::string>& DefaultIncludePatterns() {
  static const std::vector<std::string> p = {"*.weight"};
  return p;
}

const std::vector<std::string>& DefaultExcludePatterns() {
  static const std::vector<std::string> p = {
      "*embed*", "wte.*", "*.wte.*", "wpe.*", "*.wpe.*", "*lm_head*",
      "*norm*", "ln_*", "*.ln_*", "*.gate.weight",
  };
  return p;
}

bool IsEmbeddingModule(const std::string& module) {
  const std::string weight = module + ".weight";
  for (const char* g : {"*embed*", "wte.*", "*.wte.*", "wpe.*", "*.wpe.*"})
    if (::fnmatch(g, weight.c_str(), 0) == 0) return true;
  return false;
}

TensorSelector::TensorSelector(const WeightOptions& opts) {
  user_include_ = !opts.include.empty();
  for (const auto& g : user_include_ ? opts.include : DefaultIncludePatterns())
    include_.push_back({g, user_include_, false});
  for (const auto& g : opts.exclude) exclude_.push_back({g, true, false});
  for (const auto& g : DefaultExcludePatterns()) exclude_.push_back({g, false, false});
}

bool TensorSelector::Match(const std::string& glob, const std::string& name) {
  // No FNM_PATHNAME: `*` crosses the dots of module paths.
  return ::fnmatch(glob.c_str(), name.c_str(), 0) == 0;
}

bool TensorSelector::Selected(const std::string& name, size_t rank) {
  bool included = false;
  for (auto& p : include_) {
    if (Match(p.glob, name)) {
      p.matched = true;
      included = true;
    }
  }
  bool excluded = false;
  for (auto& p : exclude_) {
    if (!p.user && user_include_ && included) continue;  // explicit include wins over defaults
    if (Match(p.glob, name)) {
      p.matched = true;
      excluded = true;
    }
  }
  return included && !excluded && rank == 2;
}

Status TensorSelector::CheckEveryPatternMatched() const {
  for (const auto& p : include_)
    if (p.user && !p.matched)
      return InvalidArgumentError("weights.include pattern \"" + p.glob + "\" matches no tensor");
  for (const auto& p : exclude_)
    if (p.user && !p.matched)
      return InvalidArgumentError("weights.exclude pattern \"" + p.glob + "\" matches no tensor");
  return OkStatus();
}

}  // namespace fp8::calibrate
