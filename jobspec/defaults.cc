#include "jobspec/defaults.h"

#include <string>

namespace fp8::jobspec {
namespace {

void DefaultString(const char* value, std::string* field) {
  if (field->empty()) *field = value;
}

struct Preset {
  const char* name;
  int n_layer, n_head, d_model, seq_len, vocab_size;
};
constexpr Preset kPresets[] = {
    {"tiny", 2, 4, 128, 64, 256},
    {"gpt2-124m", 12, 12, 768, 1024, 50257},
    {"gpt-1b", 24, 16, 2048, 2048, 50304},
    {"gpt-2b", 24, 20, 2560, 2048, 50304},
};

void ApplyModelDefaults(fp8d::v1::ModelSpec* m) {
  DefaultString(kDefaultPreset, m->mutable_preset());
  for (const Preset& p : kPresets) {
    if (m->preset() != p.name) continue;
    if (m->n_layer() == 0) m->set_n_layer(p.n_layer);
    if (m->n_head() == 0) m->set_n_head(p.n_head);
    if (m->d_model() == 0) m->set_d_model(p.d_model);
    if (m->seq_len() == 0) m->set_seq_len(p.seq_len);
    if (m->vocab_size() == 0) m->set_vocab_size(p.vocab_size);
  }
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
}

void ApplySpecDefaults(fp8d::v1::Job* job) {
  switch (job->spec_case()) {
    case fp8d::v1::Job::kTrain: ApplyTrainDefaults(job->mutable_train()); break;
    case fp8d::v1::Job::kCalibrate: ApplyCalibrateDefaults(job->mutable_calibrate()); break;
    case fp8d::v1::Job::SPEC_NOT_SET: break;
  }
}

}  // namespace fp8::jobspec
