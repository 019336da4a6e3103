#!/usr/bin/env bash
# install_check.sh BUILD_DIR - install into a scratch DESTDIR and build
# examples/hello.cpp the way the README tells users to, with pkg-config.
set -euo pipefail
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
DESTDIR="$dest" meson install -C "$build" --quiet >/dev/null
pc=$(dirname "$(find "$dest" -name capstan.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$dest"
g++ -std=c++20 "$top/examples/hello.cpp" $(pkg-config --cflags --libs capstan) -o "$dest/hello"
libdir=$(dirname "$(find "$dest" -name 'libcapstan.so' | head -n 1)")
out=$(LD_LIBRARY_PATH="$libdir" "$dest/hello" +RTS -N2 -RTS)
grep -q "sum of squares below 1000: 332833500" <<<"$out"
echo "install check: installed headers, library and capstan.pc build and run examples/hello.cpp"
