# SPDX-License-Identifier: Apache-2.0
"""PyTorch BF16 baseline for bench_trainer_cuda's Llama rows: transformers' LlamaForCausalLM
built from a LlamaConfig of the same preset (GQA, SwiGLU, RMSNorm, RoPE, tied head), the same
B and T, torch.compile, autocast BF16 with FP32 master weights, fused AdamW, SDPA attention,
cross-entropy of the logits against the targets (no shift: the batches are (inputs, targets)
pairs as in the bench). Prints one JSON line per shape: tokens/s, MFU (6·N + 12·L·(n_head·head_dim)·T
FLOPs/token over 989 TFLOP/s, TrainFlopsPerToken's count for a tied Llama, as bench_trainer_cuda) and
torch.cuda.max_memory_reserved. --accum N: gradient accumulation as bench_trainer_cuda --accum,
N micro-batches of the same B×T (forward and backward each, the loss divided by N) per clip and
AdamW step; tokens/s counts all N. --accum 1,4 measures each in turn on the same compiled model
(one compilation), a JSON line each.

  python3 scripts/gpu/torch_llama_baseline.py [--shapes llama-1b,llama-3b] [--steps 10] [--accum N[,M…]]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

# The fp8d presets (jobspec/defaults.cc) at B=4, T=2048.
SHAPES = {
    "llama-1b": dict(n_layer=16, n_head=32, n_kv_head=8, d_model=2048, head_dim=64, intermediate=8192, vocab=128256,
                     rope_theta=500000.0, seq_len=2048, batch=4),
    "llama-3b": dict(n_layer=28, n_head=24, n_kv_head=8, d_model=3072, head_dim=128, intermediate=8192, vocab=128256,
                     rope_theta=500000.0, seq_len=2048, batch=4),
}
PEAK = 989e12


def make_model(s):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["d_model"], intermediate_size=s["intermediate"],
                      num_hidden_layers=s["n_layer"], num_attention_heads=s["n_head"],
                      num_key_value_heads=s["n_kv_head"], head_dim=s["head_dim"], rms_norm_eps=1e-5,
                      rope_theta=s["rope_theta"], max_position_embeddings=s["seq_len"], tie_word_embeddings=True,
                      attention_bias=False, mlp_bias=False, initializer_range=0.02)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def run(name, steps, warmup, accums=(1,)):
    s = SHAPES[name]
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    model = make_model(s).cuda().float()
    n_params = sum(p.numel() for p in model.parameters())  # the tied head counted once
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=True)
    cmodel = torch.compile(model)
    idx = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"]), device="cuda")
    tgt = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"]), device="cuda")

    def step(accum):
        for _ in range(accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = cmodel(input_ids=idx, use_cache=False).logits
                loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for accum in accums:
        t_compile = time.time()
        for _ in range(warmup):
            loss0 = step(accum).item()
        t_compile = time.time() - t_compile
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(steps):
            loss = step(accum)
        last = loss.item()
        torch.cuda.synchronize()
        secs = time.time() - t0
        tokens = s["batch"] * s["seq_len"] * steps * accum
        tps = tokens / secs
        fpt = 6 * n_params + 12 * s["n_layer"] * s["n_head"] * s["head_dim"] * s["seq_len"]
        out = dict(shape=name, recipe="torch-bf16-compile", accum=accum, params=n_params, tokens_per_s=tps, mfu=tps * fpt / PEAK,
                   ms_per_step=1e3 * secs / steps, mem_gib=torch.cuda.max_memory_reserved() / 2**30,
                   loss_first=loss0, loss_last=last, warmup_s=t_compile)
        print(json.dumps(out), flush=True)
    del model, cmodel, opt
    torch.cuda.empty_cache()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="llama-1b")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--accum", default="1")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    import transformers

    print(json.dumps(dict(torch=torch.__version__, transformers=transformers.__version__,
                          device=torch.cuda.get_device_name())), flush=True)
    for name in a.shapes.split(","):
        try:
            run(name, a.steps, a.warmup, [max(1, int(x)) for x in a.accum.split(",")])
        except Exception as e:  # noqa: BLE001 (one shape's failure does not stop the others)
            print(json.dumps(dict(shape=name, error=str(e).splitlines()[0][:200])), flush=True)
