// SPDX-License-Identifier: Apache-2.0
#include "jobspec/defaults.h"

#include <string>

namespace fp8::jobspec {
namespace {

void DefaultString(const char* value, std::string* field) {
  if (field->empty()) *field = value;
}

struct Preset {
  const char* name;
  const char* architecture;
  int n_layer, n_head, d_model, seq_len, vocab_size;
  // The Llama family's (0 / false for GPT-2's presets).
  int num_key_value_heads = 0, intermediate_size = 0, head_dim = 0;
  double rms_norm_eps = 0, rope_theta = 0;
  bool tie_word_embeddings = false, qk_norm = false;
  double llama3_rope_factor = 0;  // > 0: Llama-3's rope scaling (low 1, high 4, original 8192)
  int moe_experts = 0, moe_experts_per_token = 0, moe_intermediate_size = 0;  // > 0: model.moe
};
// The Llama presets are the Hugging Face models' shapes (their config.json), trained at
// seq_len 2048; llama-tiny is CI-sized.
constexpr Preset kPresets[] = {
    {"tiny", "gpt2", 2, 4, 128, 64, 256},
    {"gpt2-124m", "gpt2", 12, 12, 768, 1024, 50257},
    {"gpt-1b", "gpt2", 24, 16, 2048, 2048, 50304},
    {"gpt-2b", "gpt2", 24, 20, 2560, 2048, 50304},
    {"llama-tiny", "llama", 2, 4, 128, 64, 256, 2, 256, 32, 1e-5, 10000, false, false, 0},
    {"llama-1b", "llama", 16, 32, 2048, 2048, 128256, 8, 8192, 64, 1e-5, 500000, true, false, 32},  // Llama-3.2-1B
    {"llama-3b", "llama", 28, 24, 3072, 2048, 128256, 8, 8192, 128, 1e-5, 500000, true, false, 32},  // Llama-3.2-3B
    {"qwen3-0.6b", "llama", 28, 16, 1024, 2048, 151936, 8, 3072, 128, 1e-6, 1000000, true, true, 0},  // Qwen3-0.6B
    // Qwen3-MoE-like (q/k norms), CI-sized: 8 experts, top-2, every layer sparse.
    {"moe-tiny", "llama", 2, 4, 128, 64, 256, 2, 256, 32, 1e-6, 1000000, false, true, 0, 8, 2, 64},
};

constexpr int kDefaultMoeExperts = 8;
constexpr double kDefaultAuxLossCoef = 0.001;     // Qwen3-MoE's router_aux_loss_coef
constexpr double kDefaultBiasUpdateRate = 0.001;  // DeepSeek-V3's bias update speed

// model.moe's defaults; `p` is the preset (or null).
void ApplyMoeDefaults(const Preset* p, fp8d::v1::ModelSpec* m) {
  if (!m->has_moe() && !(p && p->moe_experts > 0)) return;
  fp8d::v1::MoeSpec* moe = m->mutable_moe();
  if (p && p->moe_experts > 0) {
    if (moe->num_experts() == 0) moe->set_num_experts(p->moe_experts);
    if (moe->experts_per_token() == 0) moe->set_experts_per_token(p->moe_experts_per_token);
    if (moe->moe_intermediate_size() == 0) moe->set_moe_intermediate_size(p->moe_intermediate_size);
  }
  if (moe->num_experts() == 0) moe->set_num_experts(kDefaultMoeExperts);
  if (moe->experts_per_token() == 0) moe->set_experts_per_token(moe->num_experts() == 1 ? 1 : 2);
  if (moe->moe_intermediate_size() == 0) moe->set_moe_intermediate_size(m->intermediate_size());
  DefaultString("softmax-topk", moe->mutable_router());
  if (!moe->has_norm_topk_prob()) moe->set_norm_topk_prob(true);
  const bool sigmoid = moe->router() == "sigmoid-bias";
  if (!moe->has_aux_loss_coef()) moe->set_aux_loss_coef(sigmoid ? 0 : kDefaultAuxLossCoef);
  if (!moe->has_bias_update_rate()) moe->set_bias_update_rate(sigmoid ? kDefaultBiasUpdateRate : 0);
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

void ApplyModelDefaults(fp8d::v1::ModelSpec* m) {
  // The family follows the preset; a preset left out follows the family.
  if (m->architecture().empty()) {
    const Preset* named = FindPreset(m->preset());
    m->set_architecture(named ? named->architecture : "gpt2");
  }
  DefaultString(m->architecture() == "llama" ? kDefaultLlamaPreset : kDefaultPreset, m->mutable_preset());
  const Preset* p = FindPreset(m->preset());
  if (p) {
    if (m->n_layer() == 0) m->set_n_layer(p->n_layer);
    if (m->n_head() == 0) m->set_n_head(p->n_head);
    if (m->d_model() == 0) m->set_d_model(p->d_model);
    if (m->seq_len() == 0) m->set_seq_len(p->seq_len);
    if (m->vocab_size() == 0) m->set_vocab_size(p->vocab_size);
  }
  // A GPT-2 model has none of the fields below (the validator refuses them), and a preset of
  // the other family is refused too: nothing to fill in.
  if (m->architecture() != "llama" || (p && std::string(p->architecture) != "llama")) return;
  if (p) {
    if (m->num_key_value_heads() == 0) m->set_num_key_value_heads(p->num_key_value_heads);
    if (m->intermediate_size() == 0) m->set_intermediate_size(p->intermediate_size);
    if (m->head_dim() == 0) m->set_head_dim(p->head_dim);
    if (m->rms_norm_eps() == 0) m->set_rms_norm_eps(p->rms_norm_eps);
    if (m->rope_theta() == 0) m->set_rope_theta(p->rope_theta);
    if (!m->has_tie_word_embeddings()) m->set_tie_word_embeddings(p->tie_word_embeddings);
    if (!m->has_qk_norm()) m->set_qk_norm(p->qk_norm);
    if (!m->has_rope_scaling() && p->llama3_rope_factor > 0) {
      fp8d::v1::RopeScalingSpec* r = m->mutable_rope_scaling();
      r->set_rope_type("llama3");
      r->set_factor(p->llama3_rope_factor);
      r->set_low_freq_factor(1);
      r->set_high_freq_factor(4);
      r->set_original_max_position_embeddings(8192);
    }
  }
  if (m->num_key_value_heads() == 0) m->set_num_key_value_heads(m->n_head());
  // A d_model that n_head does not divide needs head_dim given (the validator says so).
  if (m->head_dim() == 0 && m->n_head() > 0 && m->d_model() % m->n_head() == 0) m->set_head_dim(m->d_model() / m->n_head());
  if (m->rms_norm_eps() == 0) m->set_rms_norm_eps(1e-5);
  if (m->rope_theta() == 0) m->set_rope_theta(10000);
  if (!m->has_tie_word_embeddings()) m->set_tie_word_embeddings(false);
  if (!m->has_attention_bias()) m->set_attention_bias(false);
  if (!m->has_qk_norm()) m->set_qk_norm(false);
  ApplyMoeDefaults(p, m);
}

}  // namespace

void ApplyTrainDefaults(fp8d::v1::TrainSpec* spec) {
  if (spec->init_from().empty()) ApplyModelDefaults(spec->mutable_model());

  fp8d::v1::PrecisionSpec* p = spec->mutable_precision();
  DefaultString(kDefaultRecipe, p->mutable_recipe());
  if (p->amax_history_len() == 0) p->set_amax_history_len(kDefaultAmaxHistoryLen);
  DefaultString("fp32", p->mutable_scale_format());
  DefaultString("max", p->mutable_amax_compute_algo());

  fp8d::v1::TrainingArgs* t = spec->mutable_training();
  if (t->max_steps() == 0) t->set_max_steps(200);
  if (t->per_device_train_batch_size() == 0) t->set_per_device_train_batch_size(8);
  if (t->gradient_accumulation_steps() == 0) t->set_gradient_accumulation_steps(1);
  if (t->learning_rate() == 0) t->set_learning_rate(1e-3);
  DefaultString("cosine", t->mutable_lr_scheduler_type());
  if (t->adam_beta1() == 0) t->set_adam_beta1(0.9);
  if (t->adam_beta2() == 0) t->set_adam_beta2(0.999);
  if (t->adam_epsilon() == 0) t->set_adam_epsilon(1e-8);
  if (t->max_grad_norm() == 0) t->set_max_grad_norm(1.0);
  if (t->seed() == 0) t->set_seed(42);
  if (t->logging_steps() == 0) t->set_logging_steps(10);
  if (t->eval_steps() == 0) t->set_eval_steps(100);
  if (t->save_steps() == 0) t->set_save_steps(500);
  if (t->save_total_limit() == 0) t->set_save_total_limit(3);
  if (t->report_to().empty()) t->add_report_to("none");

  DefaultString("auto", spec->mutable_backend());
}

void ApplyCalibrateDefaults(fp8d::v1::CalibrateSpec* spec) {
  fp8d::v1::WeightQuantSpec* w = spec->mutable_weights();
  DefaultString("block", w->mutable_granularity());
  DefaultString("e4m3", w->mutable_fmt());
  DefaultString("fp32", w->mutable_scale_format());

  fp8d::v1::ActivationCalibSpec* a = spec->mutable_activations();
  if (a->num_samples() == 0) a->set_num_samples(64);
  DefaultString("max", a->mutable_method());
  if (a->percentile() == 0) a->set_percentile(99.9);

  DefaultString("quantize", spec->mutable_direction());
  DefaultString("auto", spec->mutable_backend());
  DefaultString("auto", spec->mutable_output_format());
}

void ApplySpecDefaults(fp8d::v1::Job* job) {
  switch (job->spec_case()) {
    case fp8d::v1::Job::kTrain: ApplyTrainDefaults(job->mutable_train()); break;
    case fp8d::v1::Job::kCalibrate: ApplyCalibrateDefaults(job->mutable_calibrate()); break;
    case fp8d::v1::Job::SPEC_NOT_SET: break;
  }
}

}  // namespace fp8::jobspec
