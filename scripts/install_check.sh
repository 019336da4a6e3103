#!/usr/bin/env bash
# install_check.sh BUILD_DIR - (BUILD_DIR built) build examples/hello.cpp the three ways
# README.md tells users to, and run each program:
#   1. pkg-config: against capstan installed into a scratch DESTDIR;
#   2. CMake: find_package(capstan) and capstan::capstan from that install
#      (tests/install/cmake/, CMAKE_PREFIX_PATH = the installed prefix);
#   3. meson subproject: dependency('capstan') falling back to this source
#      tree as subprojects/capstan (tests/install/meson/).
# Then the gdb extension (docs/debugging.md): both installed libraries carry
# it (.debug_gdb_scripts), its copy is where gdb looks for libcapstan.so's
# auto-load script, and, if gdb is installed, gdb loads it for the
# pkg-config hello and `info capstan-threads` lists its threads.
# Each program must print the right sum; the CMake one must link the
# installed shared library and the subproject one capstan's static library.
set -euo pipefail
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest=$work/dest
hello_says="sum of squares below 1000: 332833500"

fail() {
  echo "install check: $*" >&2
  exit 1
}
check_output() {  # check_output WHAT OUTPUT
  grep -qF "$hello_says" <<<"$2" || fail "$1: hello printed no \"$hello_says\": $2"
}

# --no-rebuild: the caller built what installs (scripts/test.sh builds no
# benchmarks, which meson install would otherwise build first).
DESTDIR="$dest" meson install -C "$build" --quiet --no-rebuild >/dev/null
prefix=$(meson introspect --buildoptions "$build" |
  python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
libdir=$(dirname "$(find "$dest" -name 'libcapstan.so' | head -n 1)")

# 1. pkg-config.
pc=$(dirname "$(find "$dest" -name capstan.pc | head -n 1)")
flags=$(PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$dest" pkg-config --cflags --libs capstan)
# shellcheck disable=SC2086 # flags are words
g++ -std=c++20 "$top/examples/hello.cpp" $flags -o "$work/hello-pkgconfig"
out=$(LD_LIBRARY_PATH="$libdir" "$work/hello-pkgconfig" +RTS -N2 -RTS) || fail "pkg-config: hello failed"
check_output pkg-config "$out"

# gdb: the script inside both libraries, and the auto-load copy at
# <datadir>/gdb/auto-load/<the installed library's path>-gdb.py.
for lib in libcapstan.so libcapstan.a; do
  # grep -c reads all of it: with -q, readelf could die of SIGPIPE (pipefail).
  readelf -z -p .debug_gdb_scripts "$libdir/$lib" 2>/dev/null | grep -cF capstan_gdb.py >/dev/null ||
    fail "gdb: $lib has no capstan_gdb.py in its .debug_gdb_scripts section"
done
datadir=$(meson introspect --buildoptions "$build" |
  python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "datadir"))')
[[ $datadir == /* ]] || datadir=$prefix/$datadir
autoload=$dest$datadir/gdb/auto-load${libdir#"$dest"}/libcapstan.so-gdb.py
cmp -s "$autoload" "$top/gdb/capstan_gdb.py" || fail "gdb: no copy of gdb/capstan_gdb.py at $autoload"
if command -v gdb >/dev/null 2>&1; then
  out=$(LD_LIBRARY_PATH="$libdir" gdb -batch -nx -iex "add-auto-load-safe-path $dest" \
    -ex 'set breakpoint pending on' -ex 'break capstan::label_thread' -ex run \
    -ex 'info capstan-threads' --args "$work/hello-pkgconfig" +RTS -N2 -RTS 2>&1) || true
  grep -qE '^[0-9]+ +\(main\) ' <<<"$out" && grep -qF 'green threads on 2 capabilities' <<<"$out" ||
    fail "gdb: info capstan-threads did not list hello's threads: $out"
fi

# 2. CMake: no CMAKE_CXX_STANDARD in the project, so C++20 and -pthread
# must come from capstan::capstan.
mkdir -p "$work/cmake"
cp "$top/tests/install/cmake/CMakeLists.txt" "$top/examples/hello.cpp" "$work/cmake/"
cmake -S "$work/cmake" -B "$work/cmake/build" -G Ninja -DCMAKE_PREFIX_PATH="$dest$prefix" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; fail "CMake: configuring a find_package(capstan) project failed"; }
cmake --build "$work/cmake/build" >>"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; fail "CMake: building against capstan::capstan failed"; }
compile=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["command"])' \
  "$work/cmake/build/compile_commands.json")
grep -qE -- '-std=(c|gnu)\+\+20' <<<"$compile" || fail "CMake: capstan::capstan did not ask for C++20: $compile"
grep -qF -- '-pthread' <<<"$compile" || fail "CMake: capstan::capstan did not add -pthread: $compile"
readelf -d "$work/cmake/build/hello" | grep -qF '[libcapstan.so]' ||
  fail "CMake: hello does not link libcapstan.so by name"
out=$(LD_LIBRARY_PATH="$libdir" "$work/cmake/build/hello" +RTS -N2 -RTS) || fail "CMake: hello failed"
check_output CMake "$out"

# 3. meson subproject.  --force-fallback-for: use the subproject even if a
# capstan is installed on this machine.
mkdir -p "$work/meson/subprojects"
cp "$top/tests/install/meson/meson.build" "$top/examples/hello.cpp" "$work/meson/"
ln -s "$top" "$work/meson/subprojects/capstan"
(unset PKG_CONFIG_PATH; meson setup "$work/meson/build" "$work/meson" --force-fallback-for=capstan) \
  >"$work/meson.log" 2>&1 || { cat "$work/meson.log" >&2; fail "meson: configuring a project with capstan as a subproject failed"; }
ninja -C "$work/meson/build" hello >>"$work/meson.log" 2>&1 ||
  { cat "$work/meson.log" >&2; fail "meson: building hello against the capstan subproject failed"; }
if readelf -d "$work/meson/build/hello" | grep -qF 'libcapstan'; then
  fail "meson: the subproject's hello links libcapstan.so; it should link capstan statically"
fi
out=$("$work/meson/build/hello" +RTS -N2 -RTS) || fail "meson: hello failed"
check_output "meson subproject" "$out"

echo "install check: examples/hello.cpp builds and runs against capstan via pkg-config, CMake (find_package) and a meson subproject; the gdb extension is installed and loads"
