#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A Qwen3-MoE and a Mixtral made by transformers, through fp8d and back (issue 27).

For each: transformers builds the model (its own initialisation, float32) and saves it with
save_pretrained; fp8d's logits of a token sequence (`fp8-worker evaluate`, fp32) must equal
transformers' (eager attention, float32) to 1e-4 relative; `fp8-worker train` fine-tunes it with
`init_from` (CPU backend: fp8d's MoE runs there) under fp8-blockwise, whose loss must fall, and
its `export: hf` must load back in transformers (AutoModelForCausalLM) with logits equal to
fp8d's of the exported directory (1e-4 relative) and of the same class.
Prints one JSON line per model and exits 1 if any check fails.
  usage: moe_hf_check.py FP8_WORKER CORPUS_TXT
"""
import json
import sys
import tempfile

import torch
import transformers

from hf_check_common import fp8d_logits, hf_logits, rel, run, train_events

WORKER, CORPUS = sys.argv[1], sys.argv[2]
BATCH, STEPS = 4, 12
COMMON = dict(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
              tie_word_embeddings=False)
MODELS = {
    "qwen3_moe": lambda: transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        intermediate_size=256, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], head_dim=32, **COMMON)),
    "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
        router_jitter_noise=0.0, **COMMON)),
}


torch.manual_seed(27)
failures = 0
with tempfile.TemporaryDirectory(prefix="fp8-moe-hf-") as d:
    run(WORKER, ["prepare-data", "--text", CORPUS, "--out", f"{d}/data"])
    for name, make in MODELS.items():
        src = f"{d}/{name}"
        model = make().float()
        model.config._attn_implementation = "eager"
        model.save_pretrained(src)
        imported = rel(fp8d_logits(WORKER, src), hf_logits(model))
        spec = {"data": {"train": f"{d}/data/train_*.bin", "val": f"{d}/data/val_*.bin"},
                "training": {"max_steps": STEPS, "per_device_train_batch_size": BATCH, "logging_steps": 1,
                             "eval_steps": STEPS, "save_steps": STEPS, "learning_rate": 1e-3, "export": "hf"},
                "init_from": src, "precision": {"recipe": "fp8-blockwise"},
                "output_dir": f"{d}/run-{name}", "backend": "cpu"}
        with open(f"{d}/{name}.json", "w") as f:
            json.dump(spec, f)
        events = train_events(WORKER, f"{d}/{name}.json")
        losses = [e["progress"]["loss"] for e in events if "progress" in e]
        exported = f"{d}/run-{name}/hf"
        back = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32,
                                                                 attn_implementation="eager")
        round_trip = rel(hf_logits(back), fp8d_logits(WORKER, exported))
        ok = (imported < 1e-4 and losses[-1] < losses[0] and round_trip < 1e-4
              and type(back).__name__ == type(model).__name__)
        failures += not ok
        print(json.dumps({"model": name, "class": type(back).__name__, "import_logits_rel": imported,
                          "first_loss": losses[0], "last_loss": losses[-1], "export_logits_rel": round_trip,
                          "ok": ok}), flush=True)
sys.exit(1 if failures else 0)
