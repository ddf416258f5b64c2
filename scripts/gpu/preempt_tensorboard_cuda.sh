#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fp8-worker on the GPU (binaries packed by scripts/gpu/trainer_cuda_pack.sh into
# .trainer-cuda-carry): the CUDA trainer tests, a CUDA llama-tiny-shaped run with report_to
# tensorboard read by TensorBoard's EventAccumulator, and SIGTERM mid-run on CUDA
# (checkpoint, `preempted`, exit 76) then a resume to the end.
#   device run: bash scripts/gpu/preempt_tensorboard_cuda.sh   (carry: .trainer-cuda-carry)
set -uo pipefail
C=$PWD/.trainer-cuda-carry
. scripts/gpu/carry_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; rm -rf /tmp/run-tb /tmp/run-pre
nvidia-smi --query-gpu=name,clocks.sm --format=csv | tee $OUT/summary.txt
link_test_corpus $C/bin/worker_train_cuda_test
timeout 200 $C/bin/worker_train_cuda_test --gtest_color=no > $OUT/test.log 2>&1; echo "tests rc=$?" | tee -a $OUT/summary.txt
grep -E "^\[  (FAILED|PASSED) |tests ran" $OUT/test.log | tail -8 | tee -a $OUT/summary.txt
D=/tmp/fp8d-data; mkdir -p $D; python3 scripts/gpu/byte_shards.py "$PWD/data/corpus.txt" $D > /dev/null
spec() { cat > $1 <<JSON
{"model": {"preset": "llama-tiny", "d_model": 256, "n_head": 4, "num_key_value_heads": 2, "intermediate_size": 512, "seq_len": 128, "head_dim": 64}, "data": {"train": "$D/train_*.bin", "val": "$D/val_*.bin"},
 "precision": {"recipe": "fp8-blockwise"},
 "training": {"max_steps": $2, "per_device_train_batch_size": 8, "learning_rate": 1e-3, "logging_steps": 1,
   "eval_steps": $2, "save_steps": 1000, "report_to": ["tensorboard"]},
 "output_dir": "$3", "backend": "cuda"}
JSON
}
spec /tmp/tb.json 30 /tmp/run-tb
FP8D_JOB=jobs/tb timeout 120 $C/bin/fp8-worker train --spec /tmp/tb.json > $OUT/tb.events 2> $OUT/tb.log; echo "tb train rc=$?" | tee -a $OUT/summary.txt
find /tmp/run-tb/runs -type f | tee -a $OUT/summary.txt
TB=$(dirname "$(find /tmp/run-tb/runs -name "events.out.tfevents.*" | head -1)"); echo "run dir $TB" | tee -a $OUT/summary.txt
python3 scripts/gpu/tensorboard_check.py "$TB" --events $OUT/tb.events --steps 30 2>&1 | tail -25 | tee -a $OUT/summary.txt
spec /tmp/pre.json 1000000 /tmp/run-pre
timeout 120 $C/bin/fp8-worker train --spec /tmp/pre.json > $OUT/pre.events 2> $OUT/pre.log &
P=$!; sleep 6; kill -TERM $P; wait $P; echo "sigterm rc=$?" | tee -a $OUT/summary.txt
grep -E '"(preempted|checkpoint|done)"' $OUT/pre.events | tail -4 | cut -c1-300 | tee -a $OUT/summary.txt
# Resume the preempted run from its checkpoint to a few steps past it.
PE=$(grep '"preempted"' $OUT/pre.events | tail -1)
S=$(python3 -c 'import json,sys; e=json.loads(sys.argv[1]); print(e["preempted"]["step"])' "$PE" 2>/dev/null)
CK=$(python3 -c 'import json,sys; e=json.loads(sys.argv[1]); print(e["preempted"]["checkpoint"])' "$PE" 2>/dev/null)
echo "preempted at step ${S:-none}, checkpoint ${CK:-none}" | tee -a $OUT/summary.txt
if [ -n "$S" ] && [ -n "$CK" ]; then
  sed -i "s/\"max_steps\": 1000000/\"max_steps\": $((S+10))/" /tmp/pre.json
  timeout 120 $C/bin/fp8-worker train --spec /tmp/pre.json --resume-from "$CK" > $OUT/resume.events 2> $OUT/resume.log; echo "resume rc=$?" | tee -a $OUT/summary.txt
  grep -E 'resum|"started"' $OUT/resume.events $OUT/resume.log | head -3 | cut -c1-300 | tee -a $OUT/summary.txt
  grep -E '"progress"' $OUT/resume.events | head -1 | cut -c1-200 | tee -a $OUT/summary.txt
  grep -E '"done"' $OUT/resume.events | cut -c1-300 | tee -a $OUT/summary.txt
fi
