#!/usr/bin/env bash
# trace_pictures.sh [BUILD_DIR] - the pictures in docs/trace.md, from real
# runs traced with +RTS -l at -N2:
#   docs/trace-parfib.png  nofib_like/parfib 32 18 (sparks)
#   docs/trace-http.png    examples/http_hello (serving for 2 s) under
#                          `wrk -c64 -t2 -d1s`: a 20 ms window of it
# Needs a release build (scripts/configure.sh build && ninja -C build), wrk
# and python3-matplotlib (scripts/setup.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

"$build/nofib_like/parfib" 32 18 +RTS -N2 -l"$work/parfib.json" -RTS
python3 scripts/plot.py trace "$work/parfib.json" -o docs/trace-parfib.png

"$build/examples/http_hello" 0 2 +RTS -N2 -l"$work/http.json" -RTS >"$work/server.out" &
server=$!
for _ in $(seq 100); do
  port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/server.out")
  [[ -n "$port" ]] && break
  sleep 0.05
done
[[ -n "$port" ]] || { echo "trace_pictures: http_hello did not start" >&2; exit 1; }
wrk -c64 -t2 -d1s "http://127.0.0.1:$port/" | sed -n 's/^Requests\/sec:/http_hello under wrk: req\/s/p'
wait "$server"  # it stops after 2 s and writes the trace
python3 scripts/plot.py trace "$work/http.json" -o docs/trace-http.png --from-ms 600 --to-ms 620
echo "wrote docs/trace-parfib.png docs/trace-http.png"
