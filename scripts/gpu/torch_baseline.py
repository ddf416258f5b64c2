# SPDX-License-Identifier: Apache-2.0
"""Same-run torch baselines for bench_kernels_cuda (docs/performance.md, "GPU: kernels and trainer").

Times, with CUDA events (median of 30 after warm-up) on the same card in the same call:
device-to-device copy, torch-eager 1x128 activation quantization, torch._scaled_mm with
DeepSeek blockwise scales (1x128 x 128x128) and a BF16 matmul, for the bench's shapes.
Each item is independent: a failure prints its error and the script goes on.
"""
import statistics
import sys

import torch


def median_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def act_quant_eager(x):
    g = x.float().view(x.shape[0], -1, 128)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-4)
    s = amax / 448.0
    q = (g / s).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(x.shape), s.squeeze(-1)


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    rows, cols = 16384, 7168
    n = rows * cols
    xs = [torch.randn(rows, cols, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    dst = torch.empty_like(xs[0])
    it = [0]

    def nxt():
        it[0] += 1
        return xs[it[0] % 2]

    print("\n| torch baseline (memory-bound) | time (us) | TB/s |\n|---|---:|---:|")
    try:
        ms = median_ms(lambda: dst.copy_(nxt()))
        print(f"| D2D copy (copy_), bf16 16384x7168 | {ms * 1e3:.1f} | {4 * n / ms / 1e9:.2f} |")
    except Exception as e:  # noqa: BLE001
        print(f"| D2D copy | error: {e} | |")
    try:
        ms = median_ms(lambda: act_quant_eager(nxt()))
        print(f"| eager 1x128 act quant bf16 -> e4m3 | {ms * 1e3:.1f} | {(3 * n + 4 * n / 128) / ms / 1e9:.2f} |")
    except Exception as e:  # noqa: BLE001
        print(f"| eager act quant | error: {e} | |")
    del xs, dst
    torch.cuda.empty_cache()

    print("\n| M | N | K | torch._scaled_mm blockwise TFLOPS | torch bf16 mm TFLOPS |\n|---:|---:|---:|---:|---:|")
    l2 = 60e6
    for m in (128, 4096):
        for nn, k in ((7168, 16384), (4096, 7168), (7168, 2048), (24576, 1536)):
            set_bytes = (m * k + nn * k) * 2 + m * nn * 2
            sets = int(min(8, max(1, 3 * l2 / set_bytes + 1)))
            a = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
            b = [torch.randn(nn, k, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
            flops = 2 * m * nn * k
            cols_out = []
            try:
                qa = [x.to(torch.float8_e4m3fn) for x in a]
                qb = [x.to(torch.float8_e4m3fn) for x in b]
                kb = k // 128
                ld = (kb + 3) // 4 * 4
                # scale_a [M, K/128] with strides (1, M); scale_b [round4(K/128), N/128] strides (1, ld)
                sa = torch.rand(kb, m, device=dev, dtype=torch.float32).add_(0.5).t()
                sb = torch.rand(nn // 128, ld, device=dev, dtype=torch.float32).add_(0.5).t()
                i = [0]

                def run_fp8():
                    i[0] += 1
                    s = i[0] % sets
                    return torch._scaled_mm(qa[s], qb[s].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

                ms = median_ms(run_fp8)
                cols_out.append(f"{flops / ms / 1e9:.0f}")
            except Exception as e:  # noqa: BLE001
                cols_out.append("error: " + str(e).splitlines()[0][:80])
            try:
                j = [0]

                def run_bf16():
                    j[0] += 1
                    s = j[0] % sets
                    return a[s] @ b[s].t()

                ms = median_ms(run_bf16)
                cols_out.append(f"{flops / ms / 1e9:.0f}")
            except Exception as e:  # noqa: BLE001
                cols_out.append("error: " + str(e).splitlines()[0][:80])
            print(f"| {m} | {nn} | {k} | {cols_out[0]} | {cols_out[1]} |")
            sys.stdout.flush()
            del a, b
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
