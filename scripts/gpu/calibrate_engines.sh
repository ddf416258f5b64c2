#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On the GPU machine: does transformers load what `fp8-worker calibrate` writes, and how far are
# its logits from the BF16 model's (scripts/gpu/calibrate_engines.py)? fp8-worker is carried in
# .calibrate-engines-carry (scripts/gpu/calibrate_engines_pack.sh, run here first).
#   device run: bash scripts/gpu/calibrate_engines.sh     (carry: .calibrate-engines-carry)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fp8d-calibrate-engines-out}
mkdir -p "$OUT"
C=$PWD/.calibrate-engines-carry
. scripts/gpu/carry_env.sh
python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|compressed-tensors|kernels|safetensors|accelerate) " | tee "$OUT/packages.txt"
PYTHONUNBUFFERED=1 timeout 480 python3 scripts/gpu/calibrate_engines.py "$C/bin/fp8-worker" 2>&1 | tee "$OUT/calibrate_engines.log"
rc=${PIPESTATUS[0]}
echo "rc=$rc" | tee -a "$OUT/calibrate_engines.log"
exit "$rc"
