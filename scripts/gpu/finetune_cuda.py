#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fine-tuning from a Hugging Face GPT-2 directory on the CUDA backend (issue 20), one device call.

Writes an independent GPT-2 (numpy, transformers' names and Conv1D layout) with a CUDA-friendly
shape, trains 2 steps from it with `backend: cuda` under each recipe, and compares step 1's loss
with the loaded model's loss on the same first batch computed by the CPU reference
(`fp8-worker evaluate`), and with the loss of a random-init CUDA run. Prints one JSON line per
recipe and exits 1 if any check fails.
  usage: finetune_cuda.py FP8_WORKER CORPUS_TXT
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "worker_models"))
import hf_gpt2_test as hf  # noqa: E402  (the independent writer)

WORKER, CORPUS = sys.argv[1], sys.argv[2]
L, H, C, P, V = 2, 2, 128, 128, 256
BATCH = 4


def run(args):
    p = subprocess.run([WORKER] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"fp8-worker {' '.join(args)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def train(d, name, extra):
    spec = {"data": {"train": f"{d}/data/train_*.bin", "val": f"{d}/data/val_*.bin"},
            "training": {"max_steps": 2, "per_device_train_batch_size": BATCH, "logging_steps": 1,
                         "eval_steps": 100, "save_steps": 100, "learning_rate": 1e-4},
            "output_dir": f"{d}/{name}", "backend": "cuda"}
    spec.update(extra)
    path = f"{d}/{name}.json"
    hf.dump_json(path, spec)
    ev = hf.events(run(["train", "--spec", path]).stdout)
    return [e for e in ev if e["type"] == "progress"][0]["loss"]


with tempfile.TemporaryDirectory(prefix="fp8-finetune-cuda-") as d:
    run(["prepare-data", "--text", CORPUS, "--out", f"{d}/data"])
    hf.N_LAYER, hf.N_HEAD, hf.N_EMBD, hf.N_POS, hf.VOCAB = L, H, C, P, V
    params = hf.gpt2_params(np.random.default_rng(20), n_layer=L, n_embd=C, n_pos=P, vocab=V)
    hf.write_gpt2_dir(f"{d}/gpt2", params, vocab=V, n_layer=L)
    model = {"n_layer": L, "n_head": H, "d_model": C, "seq_len": P, "vocab_size": V}
    failures = 0
    for recipe in ["bf16", "fp8-tensorwise", "fp8-blockwise"]:
        random_loss = train(d, "random-" + recipe, {"model": model, "precision": {"recipe": recipe}})
        step1 = train(d, "finetune-" + recipe, {"init_from": f"{d}/gpt2", "precision": {"recipe": recipe}})
        loaded = json.loads(run(["evaluate", "--model", f"{d}/gpt2", "--data", f"{d}/data/train_*.bin",
                                 "--seed", "42", "--first-batch", str(BATCH), "--recipe", recipe]).stdout)
        loaded = loaded["first_batch_loss"]
        rel = abs(step1 / loaded - 1)
        ok = rel < 2e-2 and abs(step1 - random_loss) > 0.5
        failures += not ok
        print(json.dumps({"recipe": recipe, "cuda_step1_loss": step1, "cpu_loaded_loss": loaded,
                          "rel_diff": rel, "cuda_random_init_loss": random_loss, "ok": ok}), flush=True)
    sys.exit(1 if failures else 0)
