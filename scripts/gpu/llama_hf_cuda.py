#!/usr/bin/env python3
"""A Llama (and a Qwen3) made by transformers, through fp8d on the CUDA backend and back (issue 26).

For each model: transformers builds it (its own initialisation, float32) and saves it with
save_pretrained; fp8d's logits of a token sequence (`fp8-worker evaluate`, CPU reference, fp32)
must equal transformers' (eager attention, float32) to 1e-4 relative; `fp8-worker train` fine-tunes
it with `init_from` and `backend: cuda` under fp8-blockwise, whose step-1 loss must be the loaded
model's loss on the same batch (2e-2 relative: the FP8 step against the CPU's fp8-blockwise
forward) and whose loss must fall; its `export: hf` must load back in transformers
(AutoModelForCausalLM) with logits equal to fp8d's of the exported directory (1e-4 relative).
Prints one JSON line per model and exits 1 if any check fails.
  usage: llama_hf_cuda.py FP8_WORKER CORPUS_TXT
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

WORKER, CORPUS = sys.argv[1], sys.argv[2]
TOKENS = [3, 101, 7, 255, 0, 42, 42, 200, 17, 64, 9, 128, 5, 77, 31, 250]
BATCH, STEPS = 4, 20
# CUDA-friendly widths (the blockwise recipe tiles 128), byte vocabulary.
COMMON = dict(vocab_size=256, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, tie_word_embeddings=False)
MODELS = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON)),
    "qwen3": lambda: transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=64, **COMMON)),
}


def run(args):
    p = subprocess.run([WORKER] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"fp8-worker {' '.join(args)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def fp8d_logits(model_dir):
    out = json.loads(run(["evaluate", "--model", model_dir, "--tokens", ",".join(map(str, TOKENS)),
                          "--recipe", "fp32"]).stdout)
    return np.array(out["logits"], dtype=np.float64)


def hf_logits(model):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].double().numpy()


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


torch.manual_seed(26)
failures = 0
with tempfile.TemporaryDirectory(prefix="fp8-llama-hf-cuda-") as d:
    run(["prepare-data", "--text", CORPUS, "--out", f"{d}/data"])
    for name, make in MODELS.items():
        src = f"{d}/{name}"
        model = make().float()
        model.config._attn_implementation = "eager"
        model.save_pretrained(src)
        imported = rel(fp8d_logits(src), hf_logits(model))
        spec = {"data": {"train": f"{d}/data/train_*.bin", "val": f"{d}/data/val_*.bin"},
                "training": {"max_steps": STEPS, "per_device_train_batch_size": BATCH, "logging_steps": 1,
                             "eval_steps": STEPS, "save_steps": STEPS, "learning_rate": 1e-3, "export": "hf"},
                "init_from": src, "precision": {"recipe": "fp8-blockwise"},
                "output_dir": f"{d}/run-{name}", "backend": "cuda"}
        with open(f"{d}/{name}.json", "w") as f:
            json.dump(spec, f)
        # Event lines are {"time": t, "<type>": {...}} (worker_event.proto as JSON).
        events = [json.loads(line) for line in run(["train", "--spec", f"{d}/{name}.json"]).stdout.splitlines()
                  if line.strip()]
        losses = [e["progress"]["loss"] for e in events if "progress" in e]
        loaded = json.loads(run(["evaluate", "--model", src, "--data", f"{d}/data/train_*.bin", "--seed", "42",
                                 "--first-batch", str(BATCH), "--recipe", "fp8-blockwise"]).stdout)["first_batch_loss"]
        step1 = abs(losses[0] / loaded - 1)
        exported = f"{d}/run-{name}/hf"
        back = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32,
                                                                 attn_implementation="eager")
        round_trip = rel(hf_logits(back), fp8d_logits(exported))
        ok = imported < 1e-4 and step1 < 2e-2 and losses[-1] < losses[0] and round_trip < 1e-4
        failures += not ok
        print(json.dumps({"model": name, "class": type(back).__name__,
                          "import_logits_rel": imported, "cuda_step1_loss": losses[0], "loaded_loss": loaded,
                          "step1_rel": step1, "last_loss": losses[-1], "export_logits_rel": round_trip,
                          "ok": ok}), flush=True)
sys.exit(1 if failures else 0)
