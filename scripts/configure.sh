#!/usr/bin/env bash
# configure.sh DIR [meson options...] - meson setup DIR, or reconfigure it if
# it exists, so every script works on a fresh clone and on a reused tree.
set -euo pipefail
dir=$1
shift
if [[ -f "$dir/build.ninja" ]]; then
  meson setup --reconfigure "$dir" "$@" >/dev/null
else
  rm -rf "$dir"
  meson setup "$dir" "$@" >/dev/null
fi
