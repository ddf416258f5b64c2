#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Calibration of a Hugging Face GPT-2 directory on the CUDA backend against the CPU one (issue 20).

Writes an independent GPT-2 (numpy, transformers' names, Conv1D [in, out] weights; n_embd 256,
so the block grids are not square), calibrates it to FP8 (128x128 blocks) with `backend: cpu`
and with `backend: cuda`, and compares the two outputs byte for byte, file by file; then the
same for `direction: dequantize` of the FP8 output. Exits 1 on any difference.
  usage: calibrate_hf_cuda.py FP8_WORKER
"""
import filecmp
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "worker_models"))
import hf_gpt2_test as hf  # noqa: E402  (the independent writer)

WORKER = sys.argv[1]
L, C, V = 2, 256, 512


def calibrate(d, name, spec):
    path = f"{d}/{name}.json"
    hf.dump_json(path, spec)
    p = subprocess.run([WORKER, "calibrate", "--spec", path], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"calibrate {name} exited {p.returncode}:\n{p.stderr[-3000:]}")
    print(f"{name}: ok", flush=True)


def same_tree(a, b):
    diffs = []
    for root, _, files in os.walk(a):
        for f in files:
            pa = os.path.join(root, f)
            pb = os.path.join(b, os.path.relpath(pa, a))
            if f.startswith("report") or f.endswith(".log"):
                continue  # the report names its backend
            if not os.path.exists(pb) or not filecmp.cmp(pa, pb, shallow=False):
                diffs.append(os.path.relpath(pa, a))
    return diffs


with tempfile.TemporaryDirectory(prefix="fp8-calib-hf-cuda-") as d:
    hf.N_LAYER, hf.N_HEAD, hf.N_EMBD, hf.N_POS, hf.VOCAB = L, 4, C, 64, V
    params = hf.gpt2_params(np.random.default_rng(5), n_layer=L, n_embd=C, n_pos=64, vocab=V)
    hf.write_gpt2_dir(f"{d}/gpt2", params, vocab=V, n_layer=L)
    failures = 0
    for backend in ["cpu", "cuda"]:
        calibrate(d, "q-" + backend, {"input": f"{d}/gpt2", "output_dir": f"{d}/q-{backend}", "backend": backend})
    diffs = same_tree(f"{d}/q-cpu", f"{d}/q-cuda")
    print("quantize cpu vs cuda differing files:", diffs or "none", flush=True)
    failures += bool(diffs)
    for backend in ["cpu", "cuda"]:
        calibrate(d, "dq-" + backend, {"input": f"{d}/q-cpu", "output_dir": f"{d}/dq-{backend}", "backend": backend,
                                       "direction": "dequantize"})
    diffs = same_tree(f"{d}/dq-cpu", f"{d}/dq-cuda")
    print("dequantize cpu vs cuda differing files:", diffs or "none", flush=True)
    failures += bool(diffs)
    sys.exit(1 if failures else 0)
