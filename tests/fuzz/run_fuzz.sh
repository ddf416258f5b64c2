#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds one libFuzzer target with clang (a small build of only the sources it needs, beside
# the main build) and runs it for a bounded time on the corpus kept in the repo
# (tests/fuzz/corpus/<target>). New inputs go to a temporary directory, not into the repo.
# Exit 77 (CTest: skipped) when clang or libFuzzer is missing.
# Usage: run_fuzz.sh SOURCE_DIR PROTO_GEN_DIR OUT_DIR TARGET [SECONDS]
#   TARGET: job_file | requests | http_request; SECONDS: default $FP8D_FUZZ_SECONDS or 60.
set -euo pipefail
SRC=$1 GEN=$2 OUT=$3 TARGET=$4
SECONDS_TO_RUN=${5:-${FP8D_FUZZ_SECONDS:-60}}

CLANG=""
for c in clang++ clang++-14; do command -v "$c" >/dev/null && { CLANG=$c; break; }; done
[ -n "$CLANG" ] || { echo "clang++ not installed: skipping the fuzz run"; exit 77; }
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    "$CLANG" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "libFuzzer (libclang-rt-*-dev) not installed: skipping the fuzz run"
  exit 77
fi

EXTRA_FLAGS=()
case "$TARGET" in
  job_file) SOURCES=(tests/fuzz/job_file_fuzz.cc client/job_file.cc common/status.cc)
            PROTOS=(job.pb.cc); LIBS=(-lyaml-cpp -lprotobuf); MAX_LEN=65536 ;;
  requests) SOURCES=(tests/fuzz/request_fuzz.cc daemon/api/validation.cc common/status.cc common/label_selector.cc
                    jobspec/defaults.cc jobspec/validate.cc jobspec/kind.cc
                    daemon/core/new_job.cc daemon/core/job_fields.cc daemon/core/job_lifecycle.cc)
            PROTOS=(job.pb.cc job_service.pb.cc worker_event.pb.cc); LIBS=(-lprotobuf); MAX_LEN=16384 ;;
  http_request) SOURCES=(tests/fuzz/http_request_fuzz.cc daemon/api/http_request_handler.cc daemon/api/http_metrics.cc
                        daemon/api/process_metrics.cc
                        daemon/api/auth_policy.cc daemon/api/validation.cc common/status.cc common/label_selector.cc
                        jobspec/defaults.cc jobspec/validate.cc jobspec/kind.cc)
                PROTOS=(job.pb.cc job_service.pb.cc)
                # shellcheck disable=SC2207
                # common/version.h is generated beside the protos (build/common/generated).
                EXTRA_FLAGS=($(pkg-config --cflags spdlog) -I"$GEN/../../common/generated")
                LIBS=(-lprotobuf -lprometheus-cpp-core $(pkg-config --libs grpc++ spdlog)); MAX_LEN=16384 ;;
  *) echo "unknown target $TARGET"; exit 2 ;;
esac

mkdir -p "$OUT/obj-$TARGET"
LAUNCHER=""
command -v ccache >/dev/null && LAUNCHER=ccache
FLAGS=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$SRC" -I"$GEN" "${EXTRA_FLAGS[@]}" -w)
objects=()
pids=()
compile() {  # $1: source, $2: object
  $LAUNCHER "$CLANG" "${FLAGS[@]}" -c "$1" -o "$2"
}
for s in "${SOURCES[@]}"; do
  o="$OUT/obj-$TARGET/$(echo "$s" | tr '/' '_').o"
  objects+=("$o"); compile "$SRC/$s" "$o" & pids+=($!)
  [ ${#pids[@]} -ge 2 ] && { wait "${pids[0]}"; pids=("${pids[@]:1}"); }
done
for p in "${PROTOS[@]}"; do
  o="$OUT/obj-$TARGET/$p.o"
  objects+=("$o"); compile "$GEN/fp8d/v1/$p" "$o" & pids+=($!)
  [ ${#pids[@]} -ge 2 ] && { wait "${pids[0]}"; pids=("${pids[@]:1}"); }
done
for p in "${pids[@]}"; do wait "$p"; done
BIN="$OUT/fuzz_$TARGET"
"$CLANG" -fsanitize=fuzzer,address,undefined "${objects[@]}" "${LIBS[@]}" -o "$BIN"

NEW=$(mktemp -d)
trap 'rm -rf "$NEW"' EXIT
echo "fuzzing $TARGET for ${SECONDS_TO_RUN}s (corpus $SRC/tests/fuzz/corpus/$TARGET)"
# -rss_limit_mb: an alias bomb that the parser failed to stop would be caught here.
# -error_exitcode: libFuzzer's default (77) is CTest's "skipped"; a crash must fail.
set +e
"$BIN" "$NEW" "$SRC/tests/fuzz/corpus/$TARGET" -max_total_time="$SECONDS_TO_RUN" -timeout=10 \
  -rss_limit_mb=2048 -max_len="$MAX_LEN" -print_final_stats=1 -error_exitcode=1 \
  -artifact_prefix="$OUT/crash-$TARGET-" 2>&1 | tail -25
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "FAIL: the $TARGET fuzzer found a crash (artifacts: $OUT/crash-$TARGET-*)"
  exit 1
fi
echo "PASS: $TARGET ran ${SECONDS_TO_RUN}s without a crash"
