#!/usr/bin/env bash
# setup.sh - install the Debian packages capstan needs, if any are missing.
#   scripts/setup.sh            build and test dependencies
#   scripts/setup.sh --with-ghc also GHC, the parallel package and Warp (Haskell twins)
# Uses apt-get as root, sudo otherwise; says clearly what to do if neither works.
set -euo pipefail

packages=(meson ninja-build g++ pkg-config cmake python3 libuv1-dev libfmt-dev libgtest-dev wrk libboost-fiber-dev
          python3-matplotlib  # scripts/plot.py
          spin                # scripts/check_models.sh
          gdb)                # tests/gdb/: the gdb extension
if [[ "${1:-}" == "--with-ghc" ]]; then
  packages+=(ghc libghc-parallel-dev libghc-warp-dev)
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
  apt_get=(apt-get)
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  apt_get=(sudo apt-get)
else
  echo "setup: cannot install ${missing[*]}: not root and no password-less sudo." >&2
  echo "setup: run as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${apt_get[@]}" update -qq
"${apt_get[@]}" install -y -qq --no-install-recommends "${missing[@]}"
