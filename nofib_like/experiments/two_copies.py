#!/usr/bin/env python3
"""two_copies.py - what speed-up can this machine give a program at all?

Runs a benchmark at -N1 alone, and two copies of it at -N1 at the same
time (two processes, no runtime shared), interleaved, and prints the
medians of its metric.  If two copies each take longer than one alone,
the two CPUs do not double the program's throughput - memory bandwidth,
a shared cache or the host take the difference - and no scheduler can
make the program faster at -N2 than

    ceiling = 2 * alone / pair

(two copies finish 2 units of work in `pair` ms; one alone does 1 in
`alone`).  No capstan change is measured here: it is the floor under the
"N2 speed-up" column of docs/benchmarks.md ("Spark programs at -N2").

    python3 nofib_like/experiments/two_copies.py [--reps 7] [--metric ms] \
        build/nofib_like/mergesort 5000000 10000
"""
import argparse
import re
import statistics
import subprocess
import sys


def metric_of(out: str, name: str) -> float:
    m = re.search(r"\b%s=([0-9.]+)" % re.escape(name), out)
    if not m or "check=FAIL" in out:
        sys.exit(f"no {name}= in the result line (or its check failed): {out.strip()}")
    return float(m.group(1))


def run(cmd, copies, name):
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(copies)]
    vals = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} exited with {p.returncode}")
        vals.append(metric_of(out, name))
    return max(vals)  # the pair is done when both are


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--metric", default="ms", help="result-line key, lower is better")
    ap.add_argument("program")
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    if a.reps < 1:
        sys.exit("--reps must be at least 1")
    cmd = [a.program, *a.args, "+RTS", "-N1", "-RTS"]
    alone, pair = [], []
    for _ in range(a.reps):
        alone.append(run(cmd, 1, a.metric))
        pair.append(run(cmd, 2, a.metric))
    ma, mp = statistics.median(alone), statistics.median(pair)
    print(f"{' '.join(cmd)}: alone {ma:.2f} ({min(alone):.2f}..{max(alone):.2f}), "
          f"pair {mp:.2f} ({min(pair):.2f}..{max(pair):.2f}) {a.metric}, "
          f"medians of {a.reps}; slowdown {mp / ma:.2f}x, -N2 ceiling {2 * ma / mp:.2f}x")


if __name__ == "__main__":
    main()
