#!/usr/bin/env bash
# bench.sh - set up, build (release, -O2) and run the nofib_like suite at
# -N1 and -N2, printing one table; with --with-ghc it also installs GHC and
# runs every program's Haskell twin in the same invocation (ratio column).
# Other arguments go to nofib_like/run.py (e.g. --quick, --only ring,switch).
set -euo pipefail
cd "$(dirname "$0")/.."
ghc_flag=()
args=()
for a in "$@"; do
  if [[ "$a" == "--with-ghc" ]]; then ghc_flag=(--with-ghc); else args+=("$a"); fi
done
scripts/setup.sh "${ghc_flag[@]}"
scripts/configure.sh build
ninja -C build >/dev/null
exec python3 nofib_like/run.py --build-dir build --markdown build/nofib_results.md "${args[@]}"
