// SPDX-License-Identifier: Apache-2.0
#include "worker/train/hf_moe_common.h"

#include <set>

#include "worker/train/hf_model.h"

namespace fp8::train {
using json = nlohmann::json;

namespace {

constexpr const char* kFp8dBlock = kQwen3MoeFamily.block;
constexpr const auto& kFp8dProjections = kQwen3MoeFamily.projections;

// `name` as <head>.<block>.<rest>: the position of ".<block>." in a model.layers.<l> name, or npos.
size_t BlockAt(const std::string& name, const std::string& block) {
  if (!name.starts_with("model.layers.")) return std::string::npos;
  return name.find("." + block + ".");
}

// A name of the MoE block `from_block` with projections `from` renamed to `to_block` / `to`;
// `name` itself when it is not in such a block.
using Projections = const char* const (&)[3];
std::string Rename(const std::string& name, const std::string& from_block, Projections from, const std::string& to_block,
                   Projections to) {
  const size_t at = BlockAt(name, from_block);
  if (at == std::string::npos) return name;
  std::string rest = name.substr(at + from_block.size() + 2);  // "gate.weight", "experts.3.w1.weight"
  if (rest.starts_with("experts.")) {
    const size_t dot = rest.find('.', 8);
    if (dot != std::string::npos) {
      const std::string tail = rest.substr(dot + 1);  // "w1.weight"
      for (int i = 0; i < 3; ++i)
        if (tail == std::string(from[i]) + ".weight") rest = rest.substr(0, dot + 1) + to[i] + ".weight";
    }
  }
  return name.substr(0, at) + "." + to_block + "." + rest;
}


}  // namespace

bool HfFieldUnset(const json& obj, const std::string& key) { return !obj.contains(key) || obj[key].is_null(); }

Status HfFieldRefused(const std::string& where, const json& obj, const std::string& key, const std::string& why) {
  return DataLossError(where + ": field \"" + key + "\" is " + obj[key].dump() + "; " + why);
}

const HfMoeFamily* HfMoeFamilyOf(const json& c) {
  static constexpr const HfMoeFamily* kAll[] = {&kQwen3MoeFamily, &kMixtralFamily};
  if (c.contains("architectures")) {
    if (!c["architectures"].is_array()) return nullptr;
    for (const json& a : c["architectures"])
      for (const HfMoeFamily* f : kAll)
        if (a == f->architecture) return f;
    return nullptr;
  }
  for (const HfMoeFamily* f : kAll)
    if (c.value("model_type", json()) == f->model_type) return f;
  return nullptr;
}

namespace {

// The field config.json holds the number of experts in: the family's key, else its alias when
// that is there (errors name the key).
std::string ExpertsKeyIn(const json& c, const HfMoeFamily& family) {
  if (family.experts_alias != nullptr && HfFieldUnset(c, family.experts_key) && !HfFieldUnset(c, family.experts_alias))
    return family.experts_alias;
  return family.experts_key;
}

}  // namespace

Status ReadHfMoeRouting(const json& c, const HfMoeFamily& family, const std::string& where, double default_aux_loss_coef,
                        ModelConfig* m) {
  MoeConfig& e = m->moe;
  const std::string experts = ExpertsKeyIn(c, family);
  FP8_ASSIGN_OR_RETURN(e.num_experts, ConfigPositiveInt(c, experts, where));
  if (e.num_experts > 1024) return HfFieldRefused(where, c, experts, "fp8d takes at most 1024 experts");
  FP8_ASSIGN_OR_RETURN(e.experts_per_token, ConfigPositiveInt(c, "num_experts_per_tok", where));
  if (e.experts_per_token > e.num_experts)
    return HfFieldRefused(where, c, "num_experts_per_tok",
                  "must be at most \"" + experts + "\" (" + std::to_string(e.num_experts) + ")");
  e.aux_loss_coef = default_aux_loss_coef;
  if (!HfFieldUnset(c, "router_aux_loss_coef")) {
    const json& v = c["router_aux_loss_coef"];
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1)
      return HfFieldRefused(where, c, "router_aux_loss_coef", "must be a number in [0, 1]");
    e.aux_loss_coef = v.get<double>();
  }
  e.router = MoeRouter::kSoftmaxTopK;
  e.num_shared_experts = 0;
  e.capacity_factor = 0;
  e.bias_update_rate = 0;
  return OkStatus();
}

void AddHfMoeRouting(const ModelConfig& cfg, const HfMoeFamily& family, json* c) {
  (*c)[family.experts_key] = cfg.moe.num_experts;
  (*c)["num_experts_per_tok"] = cfg.moe.experts_per_token;
  (*c)["router_aux_loss_coef"] = cfg.moe.aux_loss_coef;
  (*c)["output_router_logits"] = false;
}

std::string HfMoeRoutingRefusal(const ModelConfig& cfg, const HfMoeFamily& family) {
  const std::string arch = family.architecture;
  if (!cfg.moe.enabled()) return arch + " is a mixture of experts; this model has none (model.moe)";
  if (cfg.moe.router != MoeRouter::kSoftmaxTopK)
    return arch + " routes by softmax-topk; this model's router is " + MoeRouterName(cfg.moe.router);
  if (cfg.moe.num_shared_experts > 0)
    return arch + " has no shared experts; this model has " + std::to_string(cfg.moe.num_shared_experts);
  return "";
}

std::string HfMoeFileName(const HfMoeFamily& family, const std::string& fp8d_name) {
  return Rename(fp8d_name, kFp8dBlock, kFp8dProjections, family.block, family.projections);
}

std::string HfMoeFp8dName(const HfMoeFamily& family, const std::string& file_name) {
  // fp8d's block name in a file of a family that calls it otherwise: no parameter is named so.
  if (std::string(family.block) != kFp8dBlock && BlockAt(file_name, kFp8dBlock) != std::string::npos)
    return "not-" + std::string(family.architecture) + ":" + file_name;
  return Rename(file_name, family.block, family.projections, kFp8dBlock, kFp8dProjections);
}

StatusOr<std::vector<std::string>> HfMoeTensorNames(const json& c, const std::string& where) {
  const HfMoeFamily* family = HfMoeFamilyOf(c);
  if (!family) return std::vector<std::string>();
  const std::string at = where + " (" + family->architecture + ")";
  FP8_ASSIGN_OR_RETURN(const int layers, ConfigPositiveInt(c, "num_hidden_layers", at));
  // 0 experts: transformers builds every MLP dense, so there is no MoE tensor to expect.
  const std::string experts_key = ExpertsKeyIn(c, *family);
  int experts = 0;
  if (!(c.contains(experts_key) && c[experts_key] == 0)) {
    FP8_ASSIGN_OR_RETURN(experts, ConfigPositiveInt(c, experts_key, at));
  }
  // transformers' Qwen3MoeDecoderLayer: sparse unless in mlp_only_layers, every
  // decoder_sparse_step-th layer. Mixtral has neither field: every layer is sparse.
  std::set<int> dense;
  if (!HfFieldUnset(c, "mlp_only_layers")) {
    if (!c["mlp_only_layers"].is_array()) return HfFieldRefused(at, c, "mlp_only_layers", "must be a list of layer indices");
    for (const json& l : c["mlp_only_layers"]) {
      if (!l.is_number_integer()) return HfFieldRefused(at, c, "mlp_only_layers", "must be a list of layer indices");
      dense.insert(l.get<int>());
    }
  }
  int step = 1;
  if (!HfFieldUnset(c, "decoder_sparse_step")) {
    FP8_ASSIGN_OR_RETURN(step, ConfigPositiveInt(c, "decoder_sparse_step", at));
  }
  std::vector<std::string> names;
  for (int l = 0; l < layers; ++l) {
    if (experts == 0 || dense.count(l) || (l + 1) % step != 0) continue;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    names.push_back(HfMoeFileName(*family, p + "gate.weight"));
    for (int e = 0; e < experts; ++e)
      for (const char* proj : kFp8dProjections)
        names.push_back(HfMoeFileName(*family, p + "experts." + std::to_string(e) + "." + proj + ".weight"));
  }
  return names;
}

}  // namespace fp8::train
