// SPDX-License-Identifier: Apache-2.0
// The routers of a mixture-of-experts MLP on the CPU, as pure functions over FP32 router logits
// [n, E] (a plain FP32 GEMM of the layer input and mlp.gate.weight: the router stays out of the
// FP8 recipe, as DeepSeek-V3 keeps it). Deterministic: each token is routed on its own, in a fixed
// order, and ties between experts go to the lower expert id.
//
//   softmax-topk (Qwen3-MoE, Mixtral): p = softmax(logits) over all E experts; the k largest p
//     are the token's experts, their weights p (÷ their sum with norm_topk_prob). Balanced by the
//     load-balancing loss coef · E · Σ_e f_e·P_e (Switch Transformer; transformers'
//     load_balancing_loss_func): f_e = (tokens routed to e) / n, P_e = mean over tokens of p_e.
//   sigmoid-bias (DeepSeek-V3): s = sigmoid(logits); the experts are the k largest s + bias (the
//     bias only chooses), their weights s (÷ their sum with norm_topk_prob). Balanced without a
//     loss: after each step, bias_e += rate · sign(mean load − load_e).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/train/spec.h"

namespace fp8::train::moe {

// What the router decided for n tokens, k experts each.
struct Routing {
  int64_t tokens = 0, experts = 0, k = 0;
  std::vector<int32_t> expert;  // [n, k]: the chosen experts, best first
  std::vector<float> weight;    // [n, k]: their combine weights
  std::vector<float> score;     // [n, E]: softmax probabilities or sigmoid scores (for backward)
};

// The routing of `n` tokens. `bias` [E] is the sigmoid-bias router's selection bias (ignored by
// softmax-topk; null reads as zeros).
void Route(MoeRouter router, const float* logits, const float* bias, int64_t n, int64_t experts, int k,
           bool norm_topk_prob, Routing* out);

// d(loss)/d(logits) [n, E] (overwritten) from d(loss)/d(weight) [n, k].
void RouteBackward(MoeRouter router, const Routing& r, const float* dweight, bool norm_topk_prob, float* dlogits);

// Tokens routed to each expert: [E], summed over the tokens' k choices.
std::vector<int64_t> ExpertCounts(const Routing& r);

// softmax-topk's load-balancing loss coef · E · Σ_e f_e·P_e, and its gradient times `scale` ADDED
// to dlogits [n, E] (f_e is a count: only P_e carries a gradient).
double AuxLoss(const Routing& r, double coef);
void AuxLossBackward(const Routing& r, double coef, float scale, float* dlogits);

// sigmoid-bias's update after a step: bias_e += rate · sign(mean(load) − load_e) (0 for an expert
// exactly at the mean). `load` [E]: tokens routed to each expert over the step.
void UpdateRouterBias(const float* load, int64_t experts, double rate, float* bias);

// Balance of per-expert loads: min and max as multiples of the mean (1 = balanced), and the
// coefficient of variation (population standard deviation / mean). All 0 for no load.
struct LoadBalance {
  double min = 0, max = 0, cv = 0;
};
LoadBalance Balance(const float* load, int64_t experts);

}  // namespace fp8::train::moe
