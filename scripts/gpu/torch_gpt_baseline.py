# SPDX-License-Identifier: Apache-2.0
"""PyTorch BF16 baseline for bench_trainer_cuda: the same GPT-2 style model (pre-LN blocks,
tanh GELU, tied head, biases), the same shapes, torch.compile, autocast BF16 with FP32 master
weights, fused AdamW, flash attention through scaled_dot_product_attention. Prints one JSON
line per shape: tokens/s, MFU (6·N + 12·L·C·T FLOPs/token over 989 TFLOP/s, the count
bench_trainer_cuda uses) and torch.cuda.max_memory_reserved.

  python3 scripts/gpu/torch_gpt_baseline.py [--shapes gpt2-124m,d4096-l8] [--steps 10]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    "gpt2-124m": dict(n_layer=12, n_head=12, d_model=768, seq_len=1024, vocab=50304, batch=32),
    "d4096-l8": dict(n_layer=8, n_head=32, d_model=4096, seq_len=2048, vocab=50304, batch=4),
    "gpt-1b": dict(n_layer=24, n_head=16, d_model=2048, seq_len=2048, vocab=50304, batch=4),
}
PEAK = 989e12


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.wte = nn.Embedding(s["vocab"], s["d_model"])
        self.wpe = nn.Embedding(s["seq_len"], s["d_model"])
        self.h = nn.ModuleList(Block(s["d_model"], s["n_head"]) for _ in range(s["n_layer"]))
        self.ln_f = nn.LayerNorm(s["d_model"])
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * s["n_layer"]) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def run(name, steps, warmup):
    s = SHAPES[name]
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    model = GPT(s).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=True)
    cmodel = torch.compile(model)
    idx = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"]), device="cuda")
    tgt = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"]), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t_compile = time.time()
    for _ in range(warmup):
        loss0 = step().item()
    t_compile = time.time() - t_compile
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(steps):
        loss = step()
    last = loss.item()
    torch.cuda.synchronize()
    secs = time.time() - t0
    tokens = s["batch"] * s["seq_len"] * steps
    tps = tokens / secs
    fpt = 6 * n_params + 12 * s["n_layer"] * s["d_model"] * s["seq_len"]
    out = dict(shape=name, recipe="torch-bf16-compile", params=n_params, tokens_per_s=tps, mfu=tps * fpt / PEAK,
               ms_per_step=1e3 * secs / steps, mem_gib=torch.cuda.max_memory_reserved() / 2**30,
               loss_first=loss0, loss_last=last, warmup_s=t_compile)
    print(json.dumps(out), flush=True)
    del model, cmodel, opt
    torch.cuda.empty_cache()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gpt2-124m,d4096-l8")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    print(json.dumps(dict(torch=torch.__version__, device=torch.cuda.get_device_name())), flush=True)
    for name in a.shapes.split(","):
        run(name, a.steps, a.warmup)
