# SPDX-License-Identifier: Apache-2.0
"""PyTorch's causal SDPA at the CUDA trainer's attention shapes: the baseline for
bench_attention_cuda (scripts/gpu/attention.sh runs both). q, k, v are views of one
[B, T, 3, H, hd] BF16 tensor, as the trainer's fused qkv GEMM lays them out; the backward gets
a random dy; the grouped-query shapes (the Llama models) take q [B, T, H, hd] and k, v
[B, T, KV, hd] tensors through enable_gqa (torch >= 2.5). Times: CUDA events around --reps calls after --warmup, mean per call.

Prints one line per shape, "KEY FWD_MS FWD_BWD_MS" (bench_attention_cuda --torch reads it), and
the backend SDPA chose on stderr.
  python3 scripts/gpu/attention_torch.py [--reps 20] [--warmup 3] > torch_attention.txt
"""
import argparse
import sys

import torch
import torch.nn.functional as F

SHAPES = [("hd64", 32, 12, 1024, 64), ("hd128", 4, 32, 2048, 128)]
GQA_SHAPES = [("gqa1b", 4, 32, 8, 2048, 64), ("gqa3b", 4, 24, 8, 2048, 128)]  # key, B, H, KV, T, hd


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    for key, b, h, t, hd in SHAPES:
        qkv = (torch.randn(b, t, 3, h, hd, device="cuda", dtype=torch.bfloat16) * 1.5).requires_grad_(True)
        dy = torch.randn(b, h, t, hd, device="cuda", dtype=torch.bfloat16)

        def fwd():
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, T, hd] views
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            qkv.grad = None
            fwd().backward(dy)

        with torch.no_grad():
            f = time_ms(fwd, args.warmup, args.reps)
        fb = time_ms(fwd_bwd, args.warmup, args.reps)
        print(f"{key} {f:.4f} {fb:.4f}", flush=True)
    for key, b, h, kv, t, hd in GQA_SHAPES:
        q = (torch.randn(b, t, h, hd, device="cuda", dtype=torch.bfloat16) * 1.5).requires_grad_(True)
        k = (torch.randn(b, t, kv, hd, device="cuda", dtype=torch.bfloat16) * 1.5).requires_grad_(True)
        v = torch.randn(b, t, kv, hd, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
        dy = torch.randn(b, h, t, hd, device="cuda", dtype=torch.bfloat16)

        def gqa_fwd():
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True)

        def gqa_fwd_bwd():
            q.grad = k.grad = v.grad = None
            gqa_fwd().backward(dy)

        try:
            with torch.no_grad():
                f = time_ms(gqa_fwd, args.warmup, args.reps)
            fb = time_ms(gqa_fwd_bwd, args.warmup, args.reps)
        except TypeError as e:  # torch before 2.5: no enable_gqa
            print(f"{key}: {e}", file=sys.stderr)
            continue
        print(f"{key} {f:.4f} {fb:.4f}", flush=True)
    print(f"torch {torch.__version__}, flash SDP enabled: {torch.backends.cuda.flash_sdp_enabled()}, "
          f"cudnn SDP enabled: {torch.backends.cuda.cudnn_sdp_enabled()}", file=sys.stderr)


if __name__ == "__main__":
    main()
