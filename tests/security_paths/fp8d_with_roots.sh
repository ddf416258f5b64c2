#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# fp8d with the test harness's "--allowed-root /" replaced by the roots in $FP8D_TEST_ROOTS
# (colon-separated), for tests that need roots narrower than "/". Execs, so the harness's pid
# is fp8d's.
set -euo pipefail
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --allowed-root ] && [ "${2:-}" = / ]; then
    IFS=: read -r -a roots <<<"$FP8D_TEST_ROOTS"
    for r in "${roots[@]}"; do args+=(--allowed-root "$r"); done
    shift 2
  else
    args+=("$1")
    shift
  fi
done
exec "$FP8D_TEST_REAL_FP8D" "${args[@]}"
