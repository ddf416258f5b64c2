#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# FP8 vs BF16 loss at equal steps (DeepSeek-V3's criterion: within 0.25%), on the GPU machine.
# Model: bench_trainer_cuda's bytes-l12 shape (GPT-2 124M's 12 blocks, C=768, T=1024, vocab 256:
# 85M parameters); LOSS_SHAPE=llama-bytes: the same size as a Llama block (GQA 12/4, SwiGLU 2048,
# untied head). Data (CORPUS=code, the default): byte tokens of every *.py file in the host
# Python's site-packages (scripts/gpu/code_corpus_shards.py: deduplicated, a few hundred MB,
# val held out by file), so LOSS_STEPS × LOSS_BATCH × 1024 tokens stay far below one pass and
# nothing is memorised; CORPUS=small uses data/corpus.txt (400 KB: memorised within ~400 steps).
# Each recipe in its own process (bf16, fp8-tensorwise, fp8-blockwise), the same seed, the same
# batch order, lr 6e-4 with 5% warm-up and cosine decay to 10%, clip 1.0; the held-out loss of
# the same LOSS_EVAL_BATCHES val batches every LOSS_EVAL_EVERY steps and after the last step.
# Prints each run's final val loss against the bf16 run of its seed and, per recipe, the mean over
# seeds against bf16's with its standard error and a verdict (scripts/gpu/loss_summary.py).
#   bash scripts/gpu/trainer_cuda_loss.sh            (binaries in .trainer-cuda-carry, see trainer_cuda.sh)
#   LOSS_STEPS=1000 LOSS_BATCH=16 OUT=/tmp/x bash scripts/gpu/trainer_cuda_loss.sh
#   LOSS_STEPS=3000 LOSS_SEEDS=6 LOSS_RECIPES="bf16 fp8-blockwise" ...   (the 0.25% decision; the runs so far, eval every 500, 32 batches,
#   are in docs/data/loss_bytes_l12_3000.jsonl: append a call's loss_runs.jsonl there and summarize)
#   LOSS_RECIPES=fp8-tensorwise LOSS_BENCH_ARGS="--amax-history 1 --margin 1" ...   (scaling experiments;
#   bf16's JSON from an earlier run in /tmp is reused for the comparison when bf16 is not rerun)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-trainer-out}
mkdir -p "$OUT"
STEPS=${LOSS_STEPS:-1000}
BATCH=${LOSS_BATCH:-16}
EVAL_EVERY=${LOSS_EVAL_EVERY:-100}
EVAL_BATCHES=${LOSS_EVAL_BATCHES:-32}
C=${CARRY:-$PWD/.trainer-cuda-carry}  # CARRY: another carry folder with bench_trainer_cuda (multi_gpu.sh)
. scripts/gpu/carry_env.sh
if [ "${CORPUS:-code}" = code ]; then
  D=/tmp/fp8d-code-data; mkdir -p $D
  [ -e $D/val_000.bin ] || timeout ${CORPUS_TIMEOUT:-90} python3 scripts/gpu/code_corpus_shards.py $D "${CORPUS_MB:-300}" 2
else
  D=/tmp/fp8d-data; mkdir -p $D
  python3 scripts/gpu/byte_shards.py "$PWD/data/corpus.txt" $D
fi
ls -la $D
# LOSS_RUNS: recipe[@init-seed] entries, e.g. "bf16 bf16@2 fp8-tensorwise fp8-blockwise" (a second
# bf16 seed gives the noise floor). Run i goes to GPU i mod LOSS_GPUS (default: every GPU the
# machine has); the runs of one GPU follow each other, the GPUs run side by side.
# LOSS_SEEDS=N (with LOSS_SEED_FIRST, default 1): every recipe of LOSS_RECIPES at init seeds
# first .. first + N − 1, seed by seed, so the GPUs share the seeds evenly.
RUNS=${LOSS_RUNS:-${LOSS_RECIPES:-bf16 fp8-tensorwise fp8-blockwise}}
if [ -n "${LOSS_SEEDS:-}" ]; then
  RUNS=""
  for s in $(seq "${LOSS_SEED_FIRST:-1}" $(( ${LOSS_SEED_FIRST:-1} + LOSS_SEEDS - 1 ))); do
    for r in ${LOSS_RECIPES:-bf16 fp8-blockwise}; do RUNS+="$r@$s "; done
  done
fi
GPUS=${LOSS_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "$GPUS" -ge 1 ] 2>/dev/null || GPUS=1
tag_of() { echo "$1" | sed 's/@/-seed/'; }
run_one() {  # $1 = recipe[@seed], $2 = GPU
  local r=${1%@*} seed=1 t; t=$(tag_of "$1")
  [[ "$1" == *@* ]] && seed=${1#*@}
  local s0; s0=$(date +%s)
  CUDA_VISIBLE_DEVICES=$2 timeout ${LOSS_TIMEOUT:-75} $C/bin/bench_trainer_cuda --shapes "${LOSS_SHAPE:-bytes-l12}" --recipes $r --batch "$BATCH" --cosine \
    --steps "$STEPS" --warmup 0 --loss-window 100 --data "$D/train_*.bin" --val "$D/val_*.bin" \
    --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES" --init-seed "$seed" ${LOSS_BENCH_ARGS:-} --json /tmp/fp8d-loss-$t.json \
    > /tmp/fp8d-loss-$t.txt 2> /tmp/fp8d-loss-$t.log
  echo "loss run $1 on GPU $2 rc=$? ($(( $(date +%s) - s0 )) s)" > /tmp/fp8d-loss-$t.rc
}
i=0
declare -a PER_GPU
for run in $RUNS; do PER_GPU[$((i % GPUS))]+="$run "; i=$((i + 1)); done
for g in $(seq 0 $((GPUS - 1))); do
  ( for run in ${PER_GPU[$g]:-}; do run_one "$run" "$g"; done ) &
done
wait
for run in $RUNS; do
  t=$(tag_of "$run")
  cat /tmp/fp8d-loss-$t.rc
  grep -E "tokens|val loss|error|:[0-9]+:" /tmp/fp8d-loss-$t.log | tail -4
  # one file for every run: the machine sends back at most 8 files from $OUT
  cat /tmp/fp8d-loss-$t.txt /tmp/fp8d-loss-$t.log >> "$OUT/loss.log"
done
# One JSON line per run (the files of several calls can be concatenated and summarized together);
# bf16 from an earlier run of this machine when this call did not run it.
for run in $(echo bf16 $RUNS | tr ' ' '\n' | awk 'NF && !s[$0]++'); do
  t=$(tag_of "$run")
  [ -s /tmp/fp8d-loss-$t.json ] && python3 -c 'import json, sys; r = json.load(open(sys.argv[2])); r and print(json.dumps({"run": sys.argv[1], "result": r[0]}))' \
    "$run" /tmp/fp8d-loss-$t.json >> "$OUT/loss_runs.jsonl"
done
echo "$STEPS steps x $BATCH x 1024 tokens = $(( STEPS * BATCH * 1024 / 1000000 ))M tokens per run"
python3 scripts/gpu/loss_summary.py "$OUT/loss_runs.jsonl"
