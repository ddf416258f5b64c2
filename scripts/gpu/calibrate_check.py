#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks an `fp8-worker calibrate` output with the reference tooling (safetensors + torch).

Loads every shard with safetensors' own loader (so a layout the reference rejects fails here),
then for each FP8 weight `<name>` with `<name>_scale_inv`:
  * dequantizes it in torch the DeepSeek way (weight.float() * scale_inv expanded over
    128x128 blocks / channels / the tensor) and checks the E4M3 error bound against the
    original weight: |x - x_hat| <= max(|x| * 2^-4, s * 2^-10) + |x| * 1e-6;
  * checks the scale layout [ceil(out/128), ceil(in/128)] and the config/index fields;
  * optionally compares with the BF16 output of `direction: dequantize` (bit-exact).
Every tensor the calibration did not quantize must be byte-identical to the original.

Usage (on the GPU machine, after running the worker):
  fp8-worker calibrate --spec spec.json            # {"input": ORIG, "output_dir": FP8}
  fp8-worker calibrate --spec back.json            # {"input": FP8, "output_dir": BF16,
                                                   #  "direction": "dequantize"}
  python3 scripts/gpu/calibrate_check.py --original ORIG --fp8 FP8 [--bf16 BF16] [--device cuda]
  python3 scripts/gpu/calibrate_check.py --make-model ORIG   # writes a small test model first

Exits 0 when everything holds, 1 with a list of failures otherwise.
"""
import argparse
import json
import math
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

BLOCK = 128
# transformers' GPT-2 keeps these as Conv1D [in, out]; their scales are written [out, in]-oriented,
# as vLLM's GPT-2 loader reads them (it transposes the weight, not the scale).
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def is_conv1d(name):
    return name.startswith("transformer.") and name.endswith(".weight") and any(m in name for m in CONV1D)


def load_dir(path):
    """name -> (tensor, shard) for every .safetensors file in `path`, via safetensors."""
    out = {}
    for f in sorted(os.listdir(path)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(path, f), framework="pt", device="cpu") as st:
            for k in st.keys():
                out[k] = (st.get_tensor(k), f)
    return out


def expand_scale(scale, rows, cols):
    if scale.numel() == 1:
        return scale.reshape(1, 1).expand(rows, cols)
    if list(scale.shape) == [rows, 1]:
        return scale.expand(rows, cols)
    s = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return s[:rows, :cols]


def make_model(path):
    """A small two-shard BF16 model with shapes that are not multiples of 128."""
    os.makedirs(path, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    shards = {
        "model-00001-of-00002.safetensors": {
            "model.embed_tokens.weight": torch.randn(300, 136, generator=g),
            "model.layers.0.self_attn.qkv_proj.weight": torch.randn(408, 136, generator=g) * 0.02,
            "model.layers.0.input_layernorm.weight": torch.ones(136),
        },
        "model-00002-of-00002.safetensors": {
            "model.layers.0.mlp.down_proj.weight": torch.randn(136, 260, generator=g) * 0.02,
            "model.layers.0.mlp.up_proj.weight": torch.randn(260, 136, generator=g) * 0.5,
            "lm_head.weight": torch.randn(300, 136, generator=g),
        },
    }
    weight_map = {}
    for shard, tensors in shards.items():
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()},
                  os.path.join(path, shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in tensors})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"hidden_size": 136, "architectures": ["LlamaForCausalLM"]}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--original")
    ap.add_argument("--fp8")
    ap.add_argument("--bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--make-model")
    a = ap.parse_args()
    if a.make_model:
        make_model(a.make_model)
        print(f"wrote a test model to {a.make_model}")
        if not a.fp8:
            return 0
    failures = []
    orig = load_dir(a.original)
    fp8 = load_dir(a.fp8)
    config = json.load(open(os.path.join(a.fp8, "config.json")))
    index = json.load(open(os.path.join(a.fp8, "model.safetensors.index.json")))
    qc = config.get("quantization_config", {})
    for key, want in (("quant_method", "fp8"), ("fmt", "e4m3")):
        if qc.get(key) != want:
            failures.append(f"config.json quantization_config.{key} = {qc.get(key)!r}, want {want!r}")
    if set(index["weight_map"]) != set(fp8):
        failures.append("index weight_map does not list exactly the output tensors")
    for name, (t, shard) in fp8.items():
        if index["weight_map"].get(name) != shard:
            failures.append(f"index puts {name} in {index['weight_map'].get(name)}, it is in {shard}")

    quantized = 0
    worst = 0.0
    for name, (x, _) in orig.items():
        y, _ = fp8[name]
        if y.dtype != torch.float8_e4m3fn:
            if y.dtype != x.dtype or y.shape != x.shape or not torch.equal(y.view(torch.uint8), x.view(torch.uint8)):
                failures.append(f"{name}: untouched tensor differs")
            continue
        quantized += 1
        s, _ = fp8[name + "_scale_inv"]
        conv1d = is_conv1d(name)
        if conv1d:  # checked in nn.Linear's [out, in], as vLLM loads it
            x, y = x.t(), y.view(torch.uint8).t().contiguous().view(torch.float8_e4m3fn)
        rows, cols = x.shape
        if "weight_block_size" in qc and list(s.shape) != [math.ceil(rows / BLOCK), math.ceil(cols / BLOCK)]:
            failures.append(f"{name}: scale shape {list(s.shape)}")
        xs = x.to(a.device, torch.float32)
        sc = expand_scale(s.to(a.device, torch.float32), rows, cols)
        x_hat = y.to(a.device).to(torch.float32) * sc
        bound = torch.maximum(xs.abs() * 2.0 ** -4, sc * 2.0 ** -10) + xs.abs() * 1e-6
        over = ((xs - x_hat).abs() > bound).sum().item()
        if over:
            failures.append(f"{name}: {over} elements outside the E4M3 bound")
        err = (xs - x_hat).norm() / xs.norm().clamp_min(1e-30)
        worst = max(worst, err.item())
        if a.bf16:
            b = load_dir(a.bf16) if not hasattr(main, "_bf16") else main._bf16
            main._bf16 = b
            got, _ = b[name]
            got = got.t() if conv1d else got
            if got.dtype != torch.bfloat16 or not torch.equal(got.to(a.device), x_hat.to(torch.bfloat16)):
                failures.append(f"{name}: BF16 dequantize output differs from torch's float8 * scale_inv")
    if quantized == 0:
        failures.append("no FP8 tensor in the output")
    print(f"{quantized} FP8 tensors checked on {a.device}; worst relative error {worst:.4g}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
