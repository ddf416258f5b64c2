# SPDX-License-Identifier: Apache-2.0
# Sourced on the GPU machine by the scripts that run binaries from a carry folder (made here by a
# *_pack.sh; set C to it first, an absolute path): the carried libraries first on the library
# path, NVLink multicast off (KINDS.md), the carried fp8-worker for the 2-GPU test, and
#   link_test_corpus TEST_BINARY   the shipped corpus at the path the test binary was built with
#                                  (the build machine's checkout), unless that path exists
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
export FP8_WORKER_BINARY=$C/bin/fp8-worker

link_test_corpus() {
  local path
  path=$(strings "$1" | grep -m1 '/data/corpus.txt$')
  if [ -n "$path" ] && [ ! -e "$path" ]; then mkdir -p "$(dirname "$path")" && ln -sf "$PWD/data/corpus.txt" "$path"; fi
}
