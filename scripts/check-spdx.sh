#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every tracked source file (C++, CUDA, proto, Python, shell, CMake, JavaScript) names its
# licence in an SPDX line within its first 20 lines (the vendored proto keeps its upstream header above it). Prints the files that do not; exit 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
missing=0
while IFS= read -r f; do
  [[ -f $f ]] || continue
  if ! head -n 20 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0'; then
    echo "no SPDX-License-Identifier line: $f"
    missing=1
  fi
done < <(git ls-files -co --exclude-standard -- '*.cc' '*.h' '*.cu' '*.cuh' '*.proto' '*.py' '*.sh' \
           '*.cmake' '*.js' '*.mjs' '*.ts' 'CMakeLists.txt' '*/CMakeLists.txt' | grep -v '^tests/deploy/npm/node_modules/')
exit "$missing"
