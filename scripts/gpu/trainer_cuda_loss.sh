#!/usr/bin/env bash
# FP8 vs BF16 final loss at equal steps (DeepSeek-V3's criterion: within 0.25%), on the GPU
# machine: bench_trainer_cuda's bytes-l12 shape (GPT-2 124M's 12 blocks, C=768, T=1024, vocab
# 256: 85M parameters) on byte tokens of data/corpus.txt, batch 8, constant lr 6e-4, grad clip
# 1.0, the same seed and batch order for bf16, fp8-tensorwise and fp8-blockwise. Prints each
# recipe's mean training loss over the last LOSS_WINDOW steps and its difference to bf16.
#   bash scripts/gpu/trainer_cuda_loss.sh            (binaries in .trainer-cuda-carry, see trainer_cuda.sh)
#   LOSS_STEPS=400 LOSS_WINDOW=100 OUT=/tmp/x bash scripts/gpu/trainer_cuda_loss.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-trainer-out}
STEPS=${LOSS_STEPS:-400}
WINDOW=${LOSS_WINDOW:-100}
C=$PWD/.trainer-cuda-carry
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
D=/tmp/fp8d-data; mkdir -p $D
python3 scripts/gpu/byte_shards.py "$PWD/data/corpus.txt" $D
timeout ${LOSS_TIMEOUT:-150} $C/bin/bench_trainer_cuda --shapes bytes-l12 --recipes bf16,fp8-tensorwise,fp8-blockwise \
  --steps "$STEPS" --warmup 0 --loss-window "$WINDOW" --data "$D/train_*.bin" --json /tmp/fp8d-loss.json \
  > "$OUT/loss.txt" 2> "$OUT/loss.log"
echo "loss run rc=$?"
cat "$OUT/loss.txt"
python3 - /tmp/fp8d-loss.json "$STEPS" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
ref = next((r for r in rows if r["recipe"] == "bf16"), None)
for r in rows:
    rel = (r["loss_tail_mean"] / ref["loss_tail_mean"] - 1) if ref else float("nan")
    print("%-15s %s steps, mean training loss of the last %d: %.5f (%+.3f%% vs bf16; %s)" % (
        r["recipe"], sys.argv[2], r["loss_window"], r["loss_tail_mean"], 100 * rel,
        "within 0.25%" if abs(rel) <= 0.0025 else "OUTSIDE 0.25%"))
PY
