#!/usr/bin/env python3
"""http: drive an HTTP hello-world server with wrk and print one result line.

    python3 nofib_like/http.py --server BIN --impl capstan|ghc CONNS [SECONDS] \
        [+RTS -N<n> -RTS] [--wrk-threads T]

Starts `BIN PORT +RTS -N<n> -RTS` on a free loopback port (BIN is
examples/http_hello, or the Warp twin built from haskell/http_warp.hs), waits
for its "listening on" line, runs

    wrk -t T -c CONNS -d SECONDS s --latency --timeout 2s http://127.0.0.1:PORT/

and prints, in nofib_like/run.py's format,

    capstan-bench name=http impl=<impl> caps=<n> n=<CONNS> req_per_s=<r> \
        p99_ms=<p> timeouts=<t> errors=<e> rss_kb=<server peak RSS> check=ok

req_per_s is higher-is-better (the exception in run.py's table).  check=ok
needs at least one request served, no non-2xx answer, and the server still
alive at the end.  wrk runs with one thread by default: the server and wrk
share this machine's two cores (compare only figures from one run).
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_ms(value, unit):
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}[unit]


def parse_wrk(out):
    """requests/s, p99 in ms, timeouts, other socket errors, non-2xx count."""
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise ValueError("no Requests/sec in wrk output")
    rps = float(m.group(1))
    m = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
    p99 = to_ms(*m.groups()) if m else float("nan")
    timeouts = errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        c, r, w, t = (int(x) for x in m.groups())
        timeouts, errors = t, c + r + w
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    non2xx = int(m.group(1)) if m else 0
    m = re.search(r"(\d+) requests in", out)
    total = int(m.group(1)) if m else 0
    return rps, p99, timeouts, errors, non2xx, total


def peak_rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def main():
    argv = sys.argv[1:]
    caps = 1
    rts = []
    if "+RTS" in argv:  # the run.py convention: +RTS -N<n> -RTS, passed on to the server
        i = argv.index("+RTS")
        j = argv.index("-RTS", i) if "-RTS" in argv[i:] else len(argv)
        rts = argv[i + 1:j]
        argv = argv[:i] + argv[j + 1:]
        for flag in rts:
            if flag.startswith("-N") and flag[2:].isdigit():
                caps = int(flag[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--impl", required=True)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("conns", type=int)
    ap.add_argument("seconds", type=float, nargs="?", default=10)
    a = ap.parse_args(argv)
    if a.conns < 1 or a.seconds <= 0:
        ap.error("CONNS must be >= 1 and SECONDS > 0")
    if not shutil.which("wrk"):
        print("http: wrk is not installed (Debian package wrk; scripts/setup.sh installs it)",
              file=sys.stderr)
        return 2

    port = free_port()
    cmd = [a.server, str(port), "+RTS", *rts, "-RTS"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # "listening on ..." once it accepts
        if "listening on" not in line:
            err = server.stderr.read() if server.poll() is not None else ""
            print(f"http: server {cmd} did not start: {line!r} {err}", file=sys.stderr)
            return 1
        wrk = ["wrk", "-t", str(a.wrk_threads), "-c", str(a.conns), "-d", f"{a.seconds:g}s",
               "--latency", "--timeout", "2s", f"http://127.0.0.1:{port}/"]
        p = subprocess.run(wrk, capture_output=True, text=True, timeout=a.seconds + 60)
        alive = server.poll() is None
        rss = peak_rss_kb(server.pid)
        try:
            rps, p99, timeouts, errors, non2xx, total = parse_wrk(p.stdout)
        except ValueError as e:
            print(f"http: {e}:\n{p.stdout}{p.stderr}", file=sys.stderr)
            return 1
        ok = alive and total > 0 and non2xx == 0 and p.returncode == 0
        if not ok:
            print(f"http: alive={alive} requests={total} non2xx={non2xx} wrk exit {p.returncode}",
                  file=sys.stderr)
        print(f"capstan-bench name=http impl={a.impl} caps={caps} n={a.conns} "
              f"req_per_s={rps:.0f} p99_ms={p99:.2f} timeouts={timeouts} errors={errors} "
              f"rss_kb={rss} check={'ok' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


if __name__ == "__main__":
    sys.exit(main())
