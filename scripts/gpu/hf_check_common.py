# SPDX-License-Identifier: Apache-2.0
"""What the scripts that hold fp8d against transformers share (llama_hf_cuda.py, moe_hf_check.py):
running fp8-worker, fp8d's and transformers' logits of one token sequence, and their distance."""
import json
import subprocess
import sys

import numpy as np
import torch

TOKENS = [3, 101, 7, 255, 0, 42, 42, 200, 17, 64, 9, 128, 5, 77, 31, 250]


def run(worker, args):
    p = subprocess.run([worker] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"fp8-worker {' '.join(args)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def fp8d_logits(worker, model_dir):
    out = json.loads(run(worker, ["evaluate", "--model", model_dir, "--tokens", ",".join(map(str, TOKENS)),
                                  "--recipe", "fp32"]).stdout)
    return np.array(out["logits"], dtype=np.float64)


def hf_logits(model):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0].double().numpy()


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def train_events(worker, spec_path):
    """`fp8-worker train`'s event lines ({"time": t, "<type>": {...}}, worker_event.proto as JSON)."""
    return [json.loads(line) for line in run(worker, ["train", "--spec", spec_path]).stdout.splitlines()
            if line.strip()]
