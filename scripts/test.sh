#!/usr/bin/env bash
# test.sh - set up, build and run every test:
#   1. the release build: the unit suite and the stress suite;
#   2. an AArch64 cross build of the aarch64 suite (the switch and a few
#      runtime units), run under qemu-user;
#   3. an ASan+UBSan build and a TSan build: the concurrency suite.
# Ends with one line "tests: N passed, N failed" and exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

status=0
logs=()
run_suite() {  # run_suite BUILD_DIR SUITE [extra meson test args]
  local dir=$1 suite=$2
  shift 2
  echo "== meson test -C $dir --suite $suite"
  if ! meson test -C "$dir" --suite "$suite" --print-errorlogs --num-processes 2 "$@"; then
    status=1
  fi
  # meson names the log after the wrapper when there is one: take the newest.
  local newest
  newest=$(ls -t "$dir"/meson-logs/testlog*.json 2>/dev/null | grep -v -- '-suite-' | head -n 1)
  if [[ -n "$newest" ]]; then
    cp "$newest" "$dir/meson-logs/testlog-suite-$suite.json"
    logs+=("$dir/meson-logs/testlog-suite-$suite.json")
  fi
}
# build_tests DIR SUITE... [-- meson options]: what the tests of those
# suites need (their programs and everything they depend on, e.g. the
# programs a script drives) and what `meson install` installs - not the
# benchmarks, which only scripts/bench.sh runs: on CI's two cores that
# saves about a minute.
build_tests() {
  local dir=$1
  shift
  local suites=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do suites+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  echo "== building $dir (${suites[*]} tests, and what installs) $*"
  scripts/configure.sh "$dir" "$@" || exit 1
  local targets
  targets=$(python3 - "$dir" "${suites[@]}" <<'PY'
import json, os, subprocess, sys
d = os.path.abspath(sys.argv[1])
want = {"capstan:" + s for s in sys.argv[2:]}
tests = json.loads(subprocess.check_output(["meson", "introspect", d, "--tests"]))
targets = json.loads(subprocess.check_output(["meson", "introspect", d, "--targets"]))
by_id = {t["id"]: t for t in targets}
out = set()
for t in tests:
    if want & set(t["suite"]):
        for i in t["depends"]:
            out.update(os.path.relpath(f, d) for f in by_id[i]["filename"])
for t in targets:
    if t["installed"]:
        out.update(os.path.relpath(f, d) for f in t["filename"])
print("\n".join(sorted(out)))
PY
)
  [[ -n "$targets" ]] || { echo "no tests in suites ${suites[*]} of $dir" >&2; exit 1; }
  # shellcheck disable=SC2086  # one target per word
  ninja -C "$dir" $targets >/dev/null || {
    echo "build of $dir failed" >&2
    ninja -C "$dir" $targets 2>&1 | tail -30 >&2
    exit 1
  }
}
# build_suite DIR SUITE [meson options]: only the programs SUITE runs. The
# sanitizer builds need just the concurrency tests, not the benchmarks,
# examples and other units: on CI's two cores that saves minutes.
build_suite() {
  local dir=$1 suite=$2
  shift 2
  echo "== building $dir ($suite tests) $*"
  scripts/configure.sh "$dir" "$@" || exit 1
  local targets
  targets=$(meson introspect "$dir" --tests | python3 -c '
import json, os, sys
dir, suite = os.path.abspath(sys.argv[1]), "capstan:" + sys.argv[2]
for t in json.load(sys.stdin):
    if suite in t["suite"]:
        print(os.path.relpath(t["cmd"][0], dir))
' "$dir" "$suite")
  [[ -n "$targets" ]] || { echo "no tests in suite $suite of $dir" >&2; exit 1; }
  # shellcheck disable=SC2086  # one target per word
  ninja -C "$dir" $targets >/dev/null || {
    echo "build of $dir failed" >&2
    ninja -C "$dir" $targets 2>&1 | tail -30 >&2
    exit 1
  }
}

extra_passed=0 extra_failed=0
# Before building: every Note a comment refers to is defined, rts/ calls
# only down its layers (docs/design.md), and the wake-up protocols' models
# pass spin's exhaustive check while their broken variants fail
# (docs/models.md).
for check in scripts/check_notes.sh "python3 scripts/design_graph.py --check" scripts/check_models.sh; do
  if $check; then extra_passed=$((extra_passed + 1)); else extra_failed=$((extra_failed + 1)); status=1; fi
done

build_tests build unit stress
run_suite build unit --no-rebuild
run_suite build stress --no-rebuild
if scripts/install_check.sh build; then extra_passed=$((extra_passed + 1)); else extra_failed=$((extra_failed + 1)); status=1; fi

# AArch64: nothing else here runs switch_aarch64.S, so cross-build the
# aarch64 suite (tests/meson.build) and run it under qemu-user through the
# cross file's exe_wrapper (docs/stacks.md, "AArch64 under qemu").
# scripts/setup.sh installs the toolchain, qemu and the arm64 libraries, so
# a machine without them fails here, loudly: a silent skip would leave the
# switch untested with every line of the summary green.  Only an AArch64
# machine skips the step, since its release build above ran every unit natively.
if [[ $(uname -m) == aarch64 ]]; then
  echo "== aarch64 cross tests: skipped: this machine is AArch64; the release build ran them natively"
else
  cross_missing=()
  for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
    command -v "$tool" >/dev/null 2>&1 || cross_missing+=("$tool")
  done
  for pc in libuv fmt gtest; do
    PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig pkg-config --exists "$pc" || cross_missing+=("$pc (arm64 .pc)")
  done
  if [[ ${#cross_missing[@]} -ne 0 ]]; then
    echo "aarch64 cross tests cannot run, missing: ${cross_missing[*]} (scripts/setup.sh installs them on Debian amd64)" >&2
    extra_failed=$((extra_failed + 1))
    status=1
  else
    build_suite build-aarch64 aarch64 --cross-file cross/aarch64-linux-gnu.ini
    run_suite build-aarch64 aarch64 --no-rebuild
  fi
fi

# Sanitizer builds of the concurrency tests (every stack switch is annotated).
export ASAN_OPTIONS=detect_stack_use_after_return=0:detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# -g1 (line tables only): the reports keep file:line, and these two builds
# compile about a quarter faster than with full debug info.  -O1, the level
# the sanitizers' own documentation suggests: a heavy test compiles in
# 10.8 s instead of 18.8 s under ASan+UBSan, and the two builds were most
# of the suite's time.
build_suite build-asan concurrency -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized -Doptimization=1 -Dcpp_args=-g1
run_suite build-asan concurrency --no-rebuild
build_suite build-tsan concurrency -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized -Doptimization=1 -Dcpp_args=-g1
# TSan needs the classic address-space layout; newer kernels randomise
# mmap bases beyond what its shadow mapping accepts, so run without ASLR.
if setarch "$(uname -m)" -R true 2>/dev/null; then
  run_suite build-tsan concurrency --no-rebuild --wrapper "setarch $(uname -m) -R"
else
  run_suite build-tsan concurrency --no-rebuild
fi

python3 - "$extra_passed" "$extra_failed" "${logs[@]}" <<'PY'
import json, sys
passed, failed = int(sys.argv[1]), int(sys.argv[2])
for path in sys.argv[3:]:
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("result") == "OK":
                passed += 1
            elif r.get("result") not in ("SKIP", "EXPECTEDFAIL"):
                failed += 1
print(f"tests: {passed} passed, {failed} failed")
PY
exit $status
