# SPDX-License-Identifier: Apache-2.0
"""The own blockwise FP8 GEMM timed exactly as DeepGEMM is timed, in one process beside it.

DeepGEMM's bench (the anchors' deepgemm_bench.py) times with its kineto timer, which by default
runs an 8 GB memset before every call (L2 flushed, and the power-limited GPU gets a pause, so the
GEMM starts at a higher clock than in back-to-back runs). bench_kernels_cuda times back to back.
This script runs both GEMMs on DeepGEMM's own inputs (generate_normal: A 1x128 and B 128x128
FP32 scales, NT, BF16 out), checks both against the same reference with DeepGEMM's calc_diff,
and times both with the same timer: with the memset (DeepGEMM's default) and without it.
usage (cwd: DeepGEMM's source dir, develop.sh run): python3 deepgemm_vs_own.py libfp8d_own_gemm_capi.so
       python3 deepgemm_vs_own.py libfp8d_own_gemm_capi.so --profile M N K [TILE ...]
         one call of DeepGEMM and of each own tile (Sm90BlockwiseGemmTile values, default 0 = kAuto)
         on one shape, for ncu (scripts/gpu/gemm_deepgemm.sh NCU_SHAPE)
"""
import ctypes
import os
import sys

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
import torch
import deep_gemm
from deep_gemm.testing import bench_kineto, calc_diff
from generators import KernelType, MajorTypeAB, generate_normal

lib = ctypes.CDLL(sys.argv[1])
lib.fp8d_block_scale_ld.restype = ctypes.c_int64
lib.fp8d_block_scale_ld.argtypes = [ctypes.c_int64]
lib.fp8d_own_gemm.restype = ctypes.c_int
lib.fp8d_own_gemm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
# Sm90BlockwiseGemmTile values (kernels/cuda/sm90_fp8_gemm_tile_heuristics.h)
TILES = {"auto": 0, "128x128": 1, "128x64": 2, "128x64 split 2": 7, "256x128 mc": 8}
VARIANTS = {128: ["128x64", "128x64 split 2"], 4096: ["128x128", "256x128 mc"]}
OWN_KERNEL = "Sm90Fp8BlockwiseGemmKernel"


def make_inputs(m, n, k):
    """DeepGEMM's inputs for one shape and our layouts of the same scales."""
    torch.manual_seed(0)
    a, b, c, d, ref = generate_normal(m, n, k, MajorTypeAB.KMajor, MajorTypeAB.KMajor, False, torch.bfloat16,
                                      KernelType.Kernel1D2D, use_ue8m0=False)
    (qa, sfa), (qb, sfb) = a, b
    sa = sfa.t().contiguous()  # [K/128, M]
    ld = lib.fp8d_block_scale_ld(k)
    sb = torch.zeros((n // 128, ld), device="cuda", dtype=torch.float)
    sb[:, : k // 128] = sfb
    return a, b, d, ref, qa, sa, qb, sb


def own_call(m, n, k, qa, sa, qb, sb, own_d, tile):
    stream = torch.cuda.current_stream().cuda_stream
    if lib.fp8d_own_gemm(qa.data_ptr(), sa.data_ptr(), qb.data_ptr(), sb.data_ptr(), m, n, k, own_d.data_ptr(),
                         stream, tile) != 0:
        raise RuntimeError(f"own GEMM failed (tile {tile})")


if len(sys.argv) >= 6 and sys.argv[2] == "--profile":
    m, n, k = (int(v) for v in sys.argv[3:6])
    tiles = [int(v) for v in sys.argv[6:]] or [0]
    a, b, d, ref, qa, sa, qb, sb = make_inputs(m, n, k)
    own_d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    for tile in tiles:
        own_call(m, n, k, qa, sa, qb, sb, own_d, tile)
        torch.cuda.synchronize()
        print(f"profile m={m} n={n} k={k} tile {tile}: calc_diff own vs DeepGEMM {calc_diff(own_d, d):.2e}")
    sys.exit(0)

print("deep_gemm", getattr(deep_gemm, "__version__", "?"), "torch", torch.__version__, torch.cuda.get_device_name())
rows = []
for m in (128, 4096):
    for n, k in ((7168, 16384), (4096, 7168), (7168, 2048), (24576, 1536)):
        a, b, d, ref, qa, sa, qb, sb = make_inputs(m, n, k)
        own_d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)

        def own(tile):
            return lambda: own_call(m, n, k, qa, sa, qb, sb, own_d, tile)

        def dg():
            deep_gemm.fp8_fp4_gemm_nt(a, b, d, disable_ue8m0_cast=True)

        dg()
        own(0)()
        torch.cuda.synchronize()
        dg_diff, own_diff, own_vs_dg = calc_diff(d, ref), calc_diff(own_d, ref), calc_diff(own_d, d)
        tflops = lambda t: 2 * m * n * k / t / 1e12
        best = lambda fn, name, flush, reps: min(
            bench_kineto(fn, name, suppress_kineto_output=True, flush_l2=flush) for _ in range(reps))
        t_dg, t_own = best(dg, "gemm_", True, 2), best(own(0), OWN_KERNEL, True, 2)
        t_dg_hot, t_own_hot = best(dg, "gemm_", False, 1), best(own(0), OWN_KERNEL, False, 1)
        variants = " ".join(f"{v}={tflops(best(own(TILES[v]), OWN_KERNEL, True, 1)):.0f}" for v in VARIANTS[m])
        print(f"m={m} n={n} k={k}: DeepGEMM {tflops(t_dg):.0f}, own {tflops(t_own):.0f} (memset before each call); "
              f"back to back DeepGEMM {tflops(t_dg_hot):.0f}, own {tflops(t_own_hot):.0f}; calc_diff vs fp32 ref "
              f"DeepGEMM {dg_diff:.2e} own {own_diff:.2e}, own vs DeepGEMM {own_vs_dg:.2e}; {variants}", flush=True)
        rows.append((m, n, k, tflops(t_dg), tflops(t_own), tflops(t_dg_hot), tflops(t_own_hot), own_diff, dg_diff))

print("\n### Own vs DeepGEMM, both timed by DeepGEMM's kineto timer, same process and inputs, TFLOPS\n")
print("| M | N | K | DeepGEMM | own | own / DeepGEMM | DeepGEMM back to back | own back to back | ratio | "
      "calc_diff own | calc_diff DeepGEMM |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for m, n, k, dg_t, own_t, dg_h, own_h, od, dd in rows:
    print(f"| {m} | {n} | {k} | {dg_t:.0f} | {own_t:.0f} | {own_t / dg_t:.2f} | {dg_h:.0f} | {own_h:.0f} | "
          f"{own_h / dg_h:.2f} | {od:.2e} | {dd:.2e} |")
