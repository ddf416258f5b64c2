# SPDX-License-Identifier: Apache-2.0
# Shared by the *_pack.sh scripts: the GPU machine has CUDA 13.0 but none of our Debian
# libraries (gRPC, protobuf, SQLite, yaml-cpp, gloo, …), so binaries built here travel in an
# ignored carry folder with the shared libraries they resolve to. Source it, then call:
#   pack_start CARRY                      fresh CARRY/{bin,lib}, CARRY listed in .git/info/exclude
#   pack_binaries DEST_DIR SRC_DIR NAME…  stripped copies of SRC_DIR/NAME into DEST_DIR
#   pack_libs CARRY BINARY…               every library ldd resolves outside glibc, libstdc++/libgcc
#                                         and the CUDA toolkit/driver, into CARRY/lib
pack_start() {
  grep -qx "/$1/" .git/info/exclude 2>/dev/null || echo "/$1/" >> .git/info/exclude
  rm -rf "$1" && mkdir -p "$1/bin" "$1/lib"
}

pack_binaries() {
  local dest=$1 src=$2; shift 2
  mkdir -p "$dest"
  for b in "$@"; do strip -o "$dest/$b" "$src/$b"; done
}

pack_libs() {
  local carry=$1; shift
  ldd "$@" | awk '/=> \//{print $3}' | sort -u | \
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' | \
    while read -r lib; do cp -L "$lib" "$carry/lib/"; done
  du -sh "$carry"
  ls "$carry/lib" | tr '\n' ' '; echo
}
