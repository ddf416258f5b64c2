#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Does transformers load what `fp8-worker calibrate` writes (issue 29 item 6)? On the GPU machine.

Builds a small Llama with transformers itself (random weights, untied lm_head, every linear
dimension a multiple of 128, saved in BF16), calibrates it with fp8-worker (CPU backend) into
  channel-ct  per-channel weights, dynamic activations      -> compressed-tensors
  tensor-ct   per-tensor weights, dynamic activations       -> compressed-tensors
  block-ct    128x128 block weights, dynamic activations    -> compressed-tensors (explicit)
  block-ds    128x128 block weights, dynamic activations    -> deepseek (output_format auto)
and loads each with AutoModelForCausalLM.from_pretrained on the GPU, printing max |logit diff|
against the BF16 model on fixed tokens (and that relative to the BF16 logits' max |logit|).
Static activation scales are calibrated for fp8d's GPT-2 only, whose transformers class uses
Conv1D, not nn.Linear, so neither compressed-tensors nor transformers' FP8 path quantizes it:
those layouts are checked by tests/worker_calibrate/loader_rules_test.py, not here.

transformers reads quant_method compressed-tensors only with the compressed-tensors package
installed, and runs its FP8 (fine-grained, quant_method fp8) layers only with the `kernels`
package; the script says what it found. A missing package's ImportError is printed, not counted
as a failure; any other load or forward error is one. Every checkpoint is also dequantized by its
layout's rule (weight * scale, the scale broadcast per tensor, output channel or 128x128 block:
compressed-tensors' lifecycle/forward.py, DeepSeek's weight_scale_inv alike) into the BF16 Llama,
whose logits are compared the same way.
  usage: calibrate_engines.py FP8_WORKER [WORK_DIR]
"""
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import traceback

import torch

WORKER = sys.argv[1]


def version(pkg):
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def calibrate(d, name, spec):
    path = os.path.join(d, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    p = subprocess.run([WORKER, "calibrate", "--spec", path], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"calibrate {name} exited {p.returncode}:\n{p.stderr[-3000:]}")
    with open(os.path.join(spec["output_dir"], "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    return qc["quant_method"]


def dequantized_state_dict(out):
    """The checkpoint's FP8 weights times their scales (weight_scale or weight_scale_inv), in BF16;
    scale tensors dropped, every other tensor as stored."""
    from safetensors.torch import load_file

    sd = {}
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(out, f)))
    res = {}
    for n, t in sd.items():
        if n.endswith(("_scale", "_scale_inv", ".input_scale")):
            continue
        if t.dtype != torch.float8_e4m3fn:
            res[n] = t
            continue
        s = (sd[n + "_scale"] if n + "_scale" in sd else sd[n + "_scale_inv"]).float()
        x = t.float()
        if s.numel() > 1 and s.shape != (x.shape[0], 1):  # 128x128 blocks
            s = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: x.shape[0], : x.shape[1]]
        res[n] = (x * s).to(torch.bfloat16)
    return res


def logits(model, tokens):
    with torch.no_grad():
        return model(tokens).logits.float()


def main(d):
    import transformers
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    ct = version("compressed-tensors")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"compressed-tensors {ct or 'NOT INSTALLED'}, GPU {torch.cuda.get_device_name(0)}", flush=True)

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512, max_position_embeddings=64, tie_word_embeddings=False)
    bf16_dir = os.path.join(d, "llama-bf16")
    ref_model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    ref_model.save_pretrained(bf16_dir, safe_serialization=True)
    ref_model = ref_model.to("cuda").eval()
    tokens = torch.randint(0, cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1)).to("cuda")
    ref = logits(ref_model, tokens)
    scale = ref.abs().max().item()
    print(f"bf16: max |logit| {scale:.4f}", flush=True)

    cases = [("channel-ct", {"granularity": "channel"}, None), ("tensor-ct", {"granularity": "tensor"}, None),
             ("block-ct", {"granularity": "block"}, "compressed-tensors"), ("block-ds", {"granularity": "block"}, None)]
    failures = 0
    for name, weights, fmt in cases:
        out = os.path.join(d, name)
        spec = {"input": bf16_dir, "output_dir": out, "backend": "cpu", "weights": weights}
        if fmt:
            spec["output_format"] = fmt
        method = calibrate(d, name, spec)
        # Loading and running apart: transformers' FP8 forward needs the `kernels` package, its
        # compressed-tensors path the compressed-tensors package (an ImportError: not our layout).
        stage = "from_pretrained"
        try:
            model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16, device_map="cuda").eval()
            layer = model.model.layers[0].self_attn.q_proj
            params = {n: (tuple(p.shape), str(p.dtype)) for n, p in layer.named_parameters(recurse=False)}
            params.update({n: (tuple(b.shape), str(b.dtype)) for n, b in layer.named_buffers(recurse=False)})
            print(f"{name}: quant_method {method}: loaded, q_proj as {type(layer).__name__} {params}", flush=True)
            stage = "forward"
            got = logits(model, tokens)
            diff = (got - ref).abs().max().item()
            # FP8 weights: a few percent of the logits' range is expected; far more means a
            # scale read wrongly (or a layer left uninitialised).
            ok = diff < 0.25 * scale and torch.isfinite(got).all().item()
            print(f"{name}: transformers forward: max |logit diff| {diff:.4f} ({diff / scale:.2%} of max |logit|) "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
            failures += not ok
            del model
        except ImportError as e:  # a package transformers needs for this layout is missing here
            print(f"{name}: quant_method {method}: {stage} needs a package not installed here: {str(e)[:300]}",
                  flush=True)
        except Exception as e:  # the loader's own error is the finding
            print(f"{name}: quant_method {method}: {stage} raised {type(e).__name__}: {str(e)[:500]}", flush=True)
            traceback.print_exc(limit=3)
            failures += 1
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        model.load_state_dict(dequantized_state_dict(out), strict=True)
        got = logits(model.to("cuda").eval(), tokens)
        diff = (got - ref).abs().max().item()
        ok = diff < 0.25 * scale and torch.isfinite(got).all().item()
        print(f"{name}: dequantized by the layout's rule into the BF16 Llama: max |logit diff| {diff:.4f} "
              f"({diff / scale:.2%} of max |logit|) {'ok' if ok else 'FAIL'}", flush=True)
        failures += not ok
        del model
    print(f"failures: {failures}", flush=True)
    return failures


if __name__ == "__main__":
    if len(sys.argv) > 2:
        os.makedirs(sys.argv[2], exist_ok=True)
        sys.exit(1 if main(sys.argv[2]) else 0)
    with tempfile.TemporaryDirectory(prefix="fp8-calib-engines-") as d:
        sys.exit(1 if main(d) else 0)
