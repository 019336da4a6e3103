#!/usr/bin/env bash
# bench.sh - set up, build (release, -O2) and run the nofib_like suite at
# -N1, -N2, -N4 and -N8, printing one table; with --with-ghc it also installs GHC and
# runs every program's Haskell twin in the same invocation (ratio column).
# Other arguments go to nofib_like/run.py (e.g. --quick, --only ring,switch).
# Writes build/nofib_results.md (the table), build/nofib_results.json (the
# same, machine-readable) and build/nofib_results.png (its picture, drawn by
# scripts/plot.py table; skipped with a message when matplotlib is missing).
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
# No stale results: the picture is of this run or of none.
rm -f build/nofib_results.json build/nofib_results.png
status=0
python3 nofib_like/run.py --build-dir build --markdown build/nofib_results.md \
  --json build/nofib_results.json "${args[@]}" || status=$?
if [[ -f build/nofib_results.json ]]; then
  plot=0
  python3 scripts/plot.py table build/nofib_results.json -o build/nofib_results.png || plot=$?
  if [[ $plot -eq 3 ]]; then
    echo "bench: no picture of the table: matplotlib is missing (apt-get install python3-matplotlib)" >&2
  elif [[ $plot -ne 0 ]]; then
    echo "bench: scripts/plot.py table failed (status $plot); the table is in build/nofib_results.md" >&2
  fi
fi
exit $status
