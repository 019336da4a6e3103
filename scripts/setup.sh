#!/usr/bin/env bash
# setup.sh - install the Debian packages capstan needs, if any are missing.
#   scripts/setup.sh            build and test dependencies
#   scripts/setup.sh --with-ghc also GHC, the parallel package and Warp (Haskell twins)
# On an x86-64 (amd64) Debian it also installs the AArch64 cross toolchain,
# qemu-user and the arm64 builds of the dependencies (multiarch, adding the
# arm64 architecture to dpkg if it is missing): scripts/test.sh cross-builds
# part of the test suite for AArch64 and runs it under qemu
# (cross/aarch64-linux-gnu.ini, docs/stacks.md).
# Uses apt-get as root, sudo otherwise; says clearly what to do if neither works.
set -euo pipefail

packages=(meson ninja-build g++ pkg-config cmake python3 libuv1-dev libfmt-dev libgtest-dev wrk libboost-fiber-dev
          python3-matplotlib  # scripts/plot.py
          spin                # scripts/check_models.sh
          gdb)                # tests/gdb/: the gdb extension
if [[ "${1:-}" == "--with-ghc" ]]; then
  packages+=(ghc libghc-parallel-dev libghc-warp-dev)
fi
# The AArch64 cross step of scripts/test.sh: only where the machine is not
# AArch64 itself (there the ordinary build already is).
cross_arm64=0
if [[ $(dpkg --print-architecture 2>/dev/null) == amd64 ]]; then
  cross_arm64=1
  packages+=(g++-aarch64-linux-gnu qemu-user libuv1-dev:arm64 libfmt-dev:arm64 libgtest-dev:arm64)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "setup: installing missing Debian packages: ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo)
else
  echo "setup: cannot install ${missing[*]}: not root and no password-less sudo." >&2
  if [[ $cross_arm64 -eq 1 ]]; then
    echo "setup: run as root: dpkg --add-architecture arm64 && apt-get update && apt-get install -y ${missing[*]}" >&2
  else
    echo "setup: run as root: apt-get install -y ${missing[*]}" >&2
  fi
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The :arm64 packages exist for apt only once dpkg knows the architecture;
# adding it again is harmless, but only add it when it is missing.
if [[ $cross_arm64 -eq 1 ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "setup: adding the arm64 architecture to dpkg (multiarch) for the AArch64 cross build"
  "${as_root[@]}" dpkg --add-architecture arm64
fi
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
