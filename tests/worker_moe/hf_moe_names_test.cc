// SPDX-License-Identifier: Apache-2.0
// The names of MoE tensors between fp8d and its two Hugging Face families (hf_moe_common.h), as
// tables: each family's names both ways, and the router and expert tensors a config.json
// promises, which the calibration checks before converting (a layout transformers builds that
// fp8d does not train, Qwen3-MoE's decoder_sparse_step 2, included); and what a Mixtral export
// refuses, naming the field.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/train/hf_llama.h"
#include "worker/train/hf_mixtral.h"
#include "worker/train/hf_moe_common.h"

namespace fp8::train {
namespace {

using json = nlohmann::json;

struct NameCase {
  const char* fp8d;
  const char* mixtral;
};

TEST(HfMoeNames, MixtralNamesBothWays) {
  const NameCase cases[] = {
      {"model.layers.0.mlp.gate.weight", "model.layers.0.block_sparse_moe.gate.weight"},
      {"model.layers.3.mlp.experts.0.gate_proj.weight", "model.layers.3.block_sparse_moe.experts.0.w1.weight"},
      {"model.layers.3.mlp.experts.17.up_proj.weight", "model.layers.3.block_sparse_moe.experts.17.w3.weight"},
      {"model.layers.12.mlp.experts.5.down_proj.weight", "model.layers.12.block_sparse_moe.experts.5.w2.weight"},
      {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"},
      {"model.embed_tokens.weight", "model.embed_tokens.weight"},
      {"lm_head.weight", "lm_head.weight"},
  };
  for (const NameCase& c : cases) {
    EXPECT_EQ(HfMoeFileName(kMixtralFamily, c.fp8d), c.mixtral);
    EXPECT_EQ(HfMoeFp8dName(kMixtralFamily, c.mixtral), c.fp8d);
    // Qwen3-MoE's names are fp8d's.
    EXPECT_EQ(HfMoeFileName(kQwen3MoeFamily, c.fp8d), c.fp8d);
  }
}

TEST(HfMoeNames, FileNamesThatAreNotTheFamilysMatchNoParameter) {
  // fp8d's (Qwen3-MoE's) names in a Mixtral file, and a projection Mixtral does not have.
  for (const char* name : {"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.1.gate_proj.weight"}) {
    const std::string got = HfMoeFp8dName(kMixtralFamily, name);
    EXPECT_NE(got, name);
    EXPECT_NE(got.find(name), std::string::npos) << got;  // still says which tensor
  }
  EXPECT_EQ(HfMoeFp8dName(kMixtralFamily, "model.layers.0.block_sparse_moe.experts.1.w4.weight"),
            "model.layers.0.mlp.experts.1.w4.weight");
}

std::vector<std::string> Promised(const json& c) {
  auto names = HfMoeTensorNames(c, "config.json");
  EXPECT_TRUE(names.ok()) << names.status().message();
  return names.ok() ? *names : std::vector<std::string>{};
}

TEST(HfMoeNames, AMixtralPromisesARouterAndEveryExpertInEveryLayer) {
  const json c = {{"architectures", {"MixtralForCausalLM"}}, {"num_hidden_layers", 2}, {"num_local_experts", 2}};
  const std::vector<std::string> want = {
      "model.layers.0.block_sparse_moe.gate.weight",       "model.layers.0.block_sparse_moe.experts.0.w1.weight",
      "model.layers.0.block_sparse_moe.experts.0.w3.weight", "model.layers.0.block_sparse_moe.experts.0.w2.weight",
      "model.layers.0.block_sparse_moe.experts.1.w1.weight", "model.layers.0.block_sparse_moe.experts.1.w3.weight",
      "model.layers.0.block_sparse_moe.experts.1.w2.weight", "model.layers.1.block_sparse_moe.gate.weight",
      "model.layers.1.block_sparse_moe.experts.0.w1.weight", "model.layers.1.block_sparse_moe.experts.0.w3.weight",
      "model.layers.1.block_sparse_moe.experts.0.w2.weight", "model.layers.1.block_sparse_moe.experts.1.w1.weight",
      "model.layers.1.block_sparse_moe.experts.1.w3.weight", "model.layers.1.block_sparse_moe.experts.1.w2.weight",
  };
  EXPECT_EQ(Promised(c), want);
}

TEST(HfMoeNames, AQwen3MoePromisesExpertsOnlyInItsSparseLayers) {
  // transformers: sparse unless in mlp_only_layers, every decoder_sparse_step-th layer.
  const json c = {{"model_type", "qwen3_moe"},   {"num_hidden_layers", 6}, {"num_experts", 1},
                  {"mlp_only_layers", {3}},      {"decoder_sparse_step", 2}};
  const std::vector<std::string> want = {
      "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.0.gate_proj.weight",
      "model.layers.1.mlp.experts.0.up_proj.weight", "model.layers.1.mlp.experts.0.down_proj.weight",
      "model.layers.5.mlp.gate.weight", "model.layers.5.mlp.experts.0.gate_proj.weight",
      "model.layers.5.mlp.experts.0.up_proj.weight", "model.layers.5.mlp.experts.0.down_proj.weight",
  };
  EXPECT_EQ(Promised(c), want);
}

// transformers 5 saves a Qwen3-MoE's expert count as num_local_experts.
TEST(HfMoeNames, AQwen3MoeWithNumLocalExpertsReadsAsNumExperts) {
  const json c = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"hidden_size", 32}, {"intermediate_size", 64},
                  {"moe_intermediate_size", 16}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                  {"num_key_value_heads", 2}, {"head_dim", 8}, {"max_position_embeddings", 16}, {"vocab_size", 64},
                  {"num_local_experts", 4}, {"num_experts_per_tok", 2}};
  auto read = LlamaConfigFromHf(c, "config.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->moe.num_experts, 4);
  EXPECT_EQ(Promised(c).size(), 1u + 4u * 3u);
  json both = c;
  both["num_experts"] = 2;  // the family's own key wins
  auto two = LlamaConfigFromHf(both, "config.json");
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->moe.num_experts, 2);
  json neither = c;
  neither.erase("num_local_experts");
  auto missing = LlamaConfigFromHf(neither, "config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("\"num_experts\" is missing"), std::string::npos) << missing.status().message();
}

TEST(HfMoeNames, OtherModelsPromiseNothingAndBadLayoutsNameTheField) {
  EXPECT_TRUE(Promised({{"architectures", {"LlamaForCausalLM"}}, {"num_hidden_layers", 2}}).empty());
  EXPECT_TRUE(Promised({{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_hidden_layers", 2}, {"num_experts", 0}}).empty());
  auto bad = HfMoeTensorNames({{"architectures", {"MixtralForCausalLM"}}, {"num_hidden_layers", 2}}, "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"num_local_experts\" is missing"), std::string::npos) << bad.status().message();
  bad = HfMoeTensorNames({{"model_type", "qwen3_moe"}, {"num_hidden_layers", 2}, {"num_experts", 2},
                          {"mlp_only_layers", "0"}},
                         "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"mlp_only_layers\""), std::string::npos) << bad.status().message();
}

TEST(HfMoeNames, AMixtralExportRefusesWhatMixtralCannotHoldNamingTheField) {
  const json c = {{"architectures", {"MixtralForCausalLM"}}, {"hidden_size", 32}, {"intermediate_size", 16},
                  {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                  {"max_position_embeddings", 16}, {"vocab_size", 64}, {"num_local_experts", 4},
                  {"num_experts_per_tok", 2}, {"sliding_window", nullptr}};
  auto read = LlamaConfigFromHf(c, "config.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(MixtralExportRefusal(*read), "");
  EXPECT_EQ(read->moe.moe_intermediate_size, 16);
  EXPECT_TRUE(read->moe.norm_topk_prob);
  struct Case {
    void (*change)(ModelConfig*);
    const char* field;
  };
  const Case cases[] = {
      {[](ModelConfig* m) { m->moe.first_dense_layers = 1; }, "model.moe.first_dense_layers"},
      {[](ModelConfig* m) { m->moe.norm_topk_prob = false; }, "model.moe.norm_topk_prob"},
      {[](ModelConfig* m) { m->moe.router = MoeRouter::kSigmoidBias; }, "routes by softmax-topk"},
      {[](ModelConfig* m) { m->moe.num_shared_experts = 1; }, "no shared experts"},
      {[](ModelConfig* m) { m->qk_norm = true; }, "model.qk_norm"},
      {[](ModelConfig* m) { m->attention_bias = true; }, "model.attention_bias"},
  };
  for (const Case& k : cases) {
    ModelConfig m = *read;
    k.change(&m);
    EXPECT_NE(MixtralExportRefusal(m).find(k.field), std::string::npos) << k.field << ": " << MixtralExportRefusal(m);
  }
}

}  // namespace
}  // namespace fp8::train
