#!/usr/bin/env python3
"""Run the nofib_like benchmarks against their GHC twins and print one table.

    python3 nofib_like/run.py --build-dir build [--reps 3] [--quick]
        [--only prog,prog] [--no-ghc] [--markdown FILE] [--json FILE]
        [--caps 1,2,4,8] [--run-seconds S] [--timeout SECONDS] [--dry-run]

Every benchmark prints exactly one line on stdout:

    capstan-bench name=<prog> impl=<capstan|ghc> caps=<N> n=<size> \
        <metric>=<value> [key=value ...] check=ok

The first key after n= (the program's first argument) is the primary
metric, a number; any others are secondary: numbers, slash-separated number
tuples such as sparks=<created>/<converted>/<overflowed>/<dud>/<gcd>/<fizzled>
(medians are taken element by element), or "na".  All numeric metrics are "lower is
better", except a benchmark's higher_is_better ones (e.g. bfs's ratio =
seq_ms / ms, a speed-up, and http's req_per_s).  BENCHMARKS holds one
Benchmark record per row of the table, with everything known about it.
`http` runs nofib_like/http.py (wrk against examples/http_hello, or the
Warp twin haskell/http_warp.hs when ghc has the warp package).  For the spark
programs the table also shows the speed-up of -N2 over -N1 (median at -N1 /
median at -N2).  A program may appear several times with different
arguments (e.g. parfib 32 2 and parfib 38 20); each is its own row.  The
C++ programs live in <build-dir>/nofib_like/<prog>; the Haskell twins
(nofib_like/haskell/*.hs) are compiled into <build-dir>/nofib_like/haskell/
when ghc is available; a twin that calls C (the foreign-call programs)
is compiled together with its benchmark's twin_c_sources, with the extra
ghc flags of its twin_flags.  --dry-run prints the commands (ghc builds and
benchmark runs) without running them.

--json writes the same results machine-readably (every row: program,
metric, N, capstan's and the twin's median/min/max; see json_rows), which
`scripts/plot.py table` draws as a picture.

Every program runs at -N1, -N2, -N4 and -N8 (--caps); the rows above -N2
(three runs each) show how much worse they are than -N2 ("vs N2"): on a
2-core machine they check that more capabilities than cores lose nothing.
A per-operation program (Benchmark.per_op) whose full-size run would take
longer than --run-seconds runs fewer operations, decided by a probe run
(sized_args): GHC's cross-capability hand-offs cost microseconds each, and
at full size they alone took most of half an hour.  The table shows such
series' operation counts as ran_n.

A failed check, a crash, a timeout or a missing binary shows up as FAIL in
the table, and makes the runner exit with status 1 after printing everything.
Runs are strictly sequential.
"""

import argparse
import datetime
from dataclasses import dataclass
import json
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    """One row of the table: a program at one size, and what run.py needs
    to know to run it, build its Haskell twin and show its results."""
    name: str          # the program, nofib_like/<name>.cpp
    args: tuple        # its arguments; the first is the size (n=)
    quick_args: tuple  # its arguments under --quick
    metric: str        # primary metric: the programs' own output takes
                       # precedence, this only labels a row whose runs all failed
    higher_is_better: tuple = ()  # metrics where higher is better; every
                                  # other one is lower is better
    spark: bool = False  # built on sparks: the row shows the -N2 over -N1 speed-up
    min_reps: int = 0    # noisy: never fewer repetitions than this
    max_reps: int = 0    # long runs: never more repetitions than this (0: no cap)
    binary: str = ""     # the C++ program, relative to the build directory
                         # (default nofib_like/<name>)
    driver: Path = None  # run through this script, given the binary as
                         # --server, instead of running the binary itself
    twin: str = ""       # its Haskell twin haskell/<twin>.hs (default <name>)
    twin_packages: tuple = ()   # ghc packages the twin needs (skipped, not
                                # failed, when one is missing)
    twin_c_sources: tuple = ()  # C files (relative to nofib_like/) that ghc
                                # compiles and links into the twin
    twin_flags: tuple = ()      # extra ghc flags for the twin
    per_op: bool = False  # the first argument counts operations and the
                          # primary metric is per operation: a series whose
                          # full-size run would take far longer than
                          # --run-seconds runs fewer (see sized_args)
    twin_only_sized: bool = False  # per_op sizing for the twin only: capstan's
                                   # figure depends on the full size (stacks
                                   # gone cold, teardown spread over n)

    def run_args(self, quick):
        """The arguments of one run, as strings."""
        return tuple(str(a) for a in (self.quick_args if quick else self.args))

    def binary_in(self, build_dir):
        return build_dir / (self.binary or f"nofib_like/{self.name}")

    def twin_source(self):
        return self.twin or self.name


# http.py starts the server (examples/http_hello, or the Warp twin) and
# drives it with wrk.
HTTP = dict(binary="examples/http_hello", driver=HERE / "http.py",
            twin="http_warp", twin_packages=("warp",),
            higher_is_better=("req_per_s",))

# Every benchmark, in the order they are run.  A program may appear several
# times with different arguments (each is its own row).
BENCHMARKS = [
    Benchmark("switch", (10_000_000,), (1_000_000,), "ns_per_switch", per_op=True),
    Benchmark("pingpong", (2_000_000,), (200_000,), "ns_per_handoff", per_op=True, min_reps=5),
    Benchmark("threads001", (1_000_000,), (100_000,), "ns_per_thread", per_op=True),
    Benchmark("ring", (10_000_000,), (1_000_000,), "ns_per_hop", per_op=True),
    # The sync primitives, each with its baselines in the same line.
    Benchmark("mutex", (4_000_000,), (400_000,), "ns_per_op", min_reps=5, per_op=True,
              binary="nofib_like/mutex_bench"),
    Benchmark("condvar", (1_000_000,), (100_000,), "ns_per_handoff", per_op=True, min_reps=5),
    Benchmark("waitgroup", (100_000,), (100_000,), "ns_per_thread", per_op=True),
    # Blocked threads: GHC's -N2 releases cost ~20 us each, and 1,000,000
    # threads took 4.4 GB and most of a minute per twin run.
    Benchmark("parked", (250_000,), (100_000,), "bytes_per_thread", per_op=True),
    Benchmark("idle", (1,), (1,), "cpu_percent", max_reps=3),
    # Short threads, ms the hog computes without a safe point: ms until the
    # last short thread is done (alone_ms: the same threads, no hog).
    Benchmark("hog", (200, 300), (200, 100), "last_ms"),
    # n, threshold
    Benchmark("parfib", (32, 2), (25, 2), "ms", spark=True, min_reps=5),
    Benchmark("parfib", (38, 20), (30, 12), "ms", spark=True, min_reps=5),
    # n, spark depth
    Benchmark("nqueens", (12, 3), (10, 3), "ms", spark=True, min_reps=5),
    # n, cutoff
    Benchmark("mergesort", (5_000_000, 10_000), (500_000, 10_000), "ms", spark=True, min_reps=5),
    # tasks
    Benchmark("balanced", (1024,), (128,), "ms", spark=True, min_reps=5),
    Benchmark("imbalanced", (1024,), (128,), "ms", spark=True, min_reps=5),
    # n, steps
    Benchmark("heat", (512, 400), (128, 100), "ms", spark=True, min_reps=5),
    # n, out-degree; ratio = seq_ms / ms, a speed-up
    Benchmark("bfs", (1_000_000, 16), (100_000, 16), "ms", spark=True, min_reps=5,
              higher_is_better=("ratio",)),
    Benchmark("sieve", (2_000_000,), (200_000,), "ms", spark=True, min_reps=5),
    # Foreign calls.  safecall: calls, green threads; its twin's callee is
    # the very C file the C++ program links.
    Benchmark("safecall", (5_000_000, 1), (500_000, 1), "added_ns", per_op=True,
              twin_c_sources=("ffi_nop.c",)),
    # Long enough for the OS to spread the threads; 2 green threads:
    # calls/s against 1 thread.
    Benchmark("safecall", (20_000_000, 2), (2_000_000, 2), "scaling",
              higher_is_better=("scaling",), twin_c_sources=("ffi_nop.c",)),
    # Blocking 200 ms calls.  The twin's computing thread never allocates,
    # so without -fno-omit-yields it would pass no safe point at all (the
    # C++ program calls yield_point() instead).
    Benchmark("overlap", (5,), (3,), "return_latency_us",
              higher_is_better=("overlap_percent", "work_percent"),
              twin_c_sources=("haskell/overlap_stubs.c",),
              twin_flags=("-fno-omit-yields",)),
    # In-calls per OS thread, OS threads; the stubs are the pthreads that
    # call the twins' foreign exports.
    Benchmark("callback001", (10_000, 4), (1_000, 4), "ns_per_incall", per_op=True,
              twin_c_sources=("haskell/callback001_stubs.c",)),
    # In-calls (and condvar round trips).
    Benchmark("callback002", (100_000,), (10_000,), "ratio", per_op=True,
              twin_c_sources=("haskell/callback002_stubs.c",)),
    Benchmark("boundpingpong", (200_000,), (20_000,), "ns_per_handoff", per_op=True,
              twin_c_sources=("haskell/boundpingpong_stubs.c",)),
    # IO manager.  delay: threads, each sleeping 1 ms; http: wrk
    # connections, seconds.
    Benchmark("delay", (100_000,), (100_000,), "ms"),
    # Stopping threads.  kill: threads, forked masked and killed (threads006);
    # killblocked: blocked threads killed, frames each (prints the bare
    # throw+catch floor through the same frames, and the ratio).
    Benchmark("kill", (1_000_000,), (100_000,), "ns_per_thread", per_op=True),
    Benchmark("killblocked", (100_000, 5), (20_000, 5), "ns_per_thread", per_op=True,
              twin_only_sized=True),
    # 500 threads in a line, values pumped through.
    Benchmark("threads003", (20_000,), (2_000,), "ns_per_hop", per_op=True),
    # Threads blocked at exit (threads007: mvars, sleeps; shutdown: and fd
    # waits): time from main returning to run() returning, per thread.
    Benchmark("threads007", (20_000,), (5_000,), "exit_ns", per_op=True,
              twin_only_sized=True),
    Benchmark("shutdown", (100_000,), (20_000,), "exit_ns", per_op=True,
              twin_only_sized=True),
    # Quick timeouts, then 1 ms expiries.
    Benchmark("timeout", (1_000_000, 200), (100_000, 50), "ns_per_timeout"),
    # Rounds; ms from main blocking to blocked_indefinitely.
    Benchmark("deadlock", (10,), (3,), "ms", per_op=True),
    # Channels: one writer, one reader, n items (GHC's smp chan);
    # mvar_items_per_s is the same pipe through an mvar; split_items_per_s
    # the chan with writer and reader on different capabilities (-N2).
    Benchmark("chan", (10_000_000,), (1_000_000,), "items_per_s", per_op=True,
              higher_is_better=("items_per_s", "mvar_items_per_s", "split_items_per_s")),
    Benchmark("http", (64, 2), (64, 2), "req_per_s", max_reps=3, **HTTP),
    Benchmark("http", (1000, 2), (1000, 2), "req_per_s", max_reps=3, **HTTP),
]
CAPS = (1, 2, 4, 8)  # --caps: -N4 and -N8 on this 2-core machine check oversubscription
OVER_REPS = 3        # repetitions per series above -N2 (at most)
GHC_FLAGS = ["-O2", "-threaded", "-rtsopts"]
GHC_C_FLAGS = ["-optc-O2"]  # for the C files


class RunError(Exception):
    """One run did not produce a valid, checked result line."""


class RunTimeout(RunError):
    """A run that did not finish within its time limit."""


# ---------------------------------------------------------------- running

def parse_result(stdout):
    """Return the key=value pairs of the capstan-bench line, in order."""
    lines = [l for l in stdout.splitlines() if l.startswith("capstan-bench ")]
    if len(lines) != 1:
        raise RunError(f"expected one capstan-bench line, got {len(lines)}")
    fields = {}
    for tok in lines[0].split()[1:]:
        key, sep, value = tok.partition("=")
        if not sep:
            raise RunError(f"malformed field {tok!r}")
        fields[key] = value
    return fields


def row_label(prog, args):
    """Table name of a row: the program, plus its arguments if several."""
    return " ".join((prog,) + args) if len(args) > 1 else prog


def parse_metric(value):
    """A metric value: a float, a tuple of floats (a/b/c) or a string."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parts = tuple(float(v) for v in value.split("/"))
        if len(parts) > 1:
            return parts
    except ValueError:
        pass
    return value


def command_for(binary, bench, impl, args, caps):
    """The command running one benchmark: its binary, or its driver script
    given the server binary."""
    if bench.driver:
        prefix = [sys.executable, str(bench.driver), "--server", str(binary), "--impl", impl]
    else:
        prefix = [str(binary)]
    return [*prefix, *args, "+RTS", f"-N{caps}", "-RTS"]


def run_once(binary, bench, impl, args, caps, timeout):
    """Run one benchmark; return its metrics {key: value} in printed order:
    the primary one a float, secondaries as parse_metric returns them."""
    prog, n = bench.name, args[0]
    cmd = command_for(binary, bench, impl, args, caps)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunTimeout(f"timeout after {timeout} s")
    except OSError as e:
        raise RunError(f"cannot run: {e}")
    tail = " | ".join(p.stderr.strip().splitlines()[-3:])  # for messages
    tail = f": {tail}" if tail else ""
    if p.returncode < 0:
        try:
            sig = signal.Signals(-p.returncode).name
        except ValueError:
            sig = f"signal {-p.returncode}"
        raise RunError(f"killed by {sig}{tail}")
    try:
        fields = parse_result(p.stdout)
    except RunError as e:
        raise RunError(f"{e} (exit {p.returncode}){tail}")
    if fields.get("check") != "ok":
        raise RunError(f"check={fields.get('check')} (exit {p.returncode}){tail}")
    if p.returncode != 0:
        raise RunError(f"exit status {p.returncode}{tail}")
    # Sanity: the program ran what we asked for (e.g. it honoured -N).
    expect = {"name": prog, "impl": impl, "caps": str(caps), "n": str(n)}
    for key, want in expect.items():
        if fields.get(key) != want:
            raise RunError(f"{key}={fields.get(key)}, expected {want}")
    keys = list(fields)
    metrics = keys[keys.index("n") + 1:]
    metrics.remove("check")
    if not metrics:
        raise RunError("no metric in result line")
    values = {k: parse_metric(fields[k]) for k in metrics}
    if not isinstance(values[metrics[0]], float):
        raise RunError(f"bad metric value: {metrics[0]}={fields[metrics[0]]}")
    return values


PROBE_FRACTION = 100  # sized_args's probe runs 1/100 of the operations
PROBE_KEEP = 0.02     # a probe shorter than this keeps the full size


def round2(x):
    """x rounded down to two significant digits (at least 1)."""
    x = max(1, int(x))
    scale = 10 ** max(0, len(str(x)) - 2)
    return x // scale * scale


def sized_args(binary, bench, impl, args, caps, timeout, target):
    """The arguments for a per_op series: args itself, unless a probe run
    of 1/PROBE_FRACTION of the operations says a full run would take more
    than `target` seconds; then the first argument is cut so that a run
    takes about `target` (never below the probe's size).  GHC's -N2 twins of
    the hand-off programs take 8-22 us per operation where capstan takes
    40 ns: at full size one such series took minutes.  A probe shorter than
    PROBE_KEEP seconds keeps the full size: its time is mostly process
    start, so the estimate would cut runs that are already short."""
    n = int(args[0])
    probe_n = max(1, n // PROBE_FRACTION)
    probe = (str(probe_n),) + tuple(args[1:])
    t0 = time.monotonic()
    run_once(binary, bench, impl, probe, caps, timeout)  # raises RunError
    t = time.monotonic() - t0
    if t < PROBE_KEEP:
        return args
    est = t * n / probe_n
    if est <= target:
        return args
    return (str(max(probe_n, round2(n * target / est))),) + tuple(args[1:])


RESIZE_FACTOR = 4  # run_series: a per_op run this many times over target re-sizes
STOP_FACTOR = 30   # ... and one this many times over it is stopped and re-run smaller


def run_series(binary, bench, impl, args, caps, reps, timeout, target=None):
    """Run reps times.  Return (list of metric dicts, error or None, the
    arguments of the last run); the series stops at the first failure.
    With `target` (a per_op series), a run that took over RESIZE_FACTOR x
    target seconds cuts the operation count of the runs after it so that
    each takes about target: a probe can be fast by luck (GHC's -N2 ring
    ran its probe of 1/100 of the hops in under 20 ms, then each full run
    in about 90 s), and per-operation figures stay comparable.  A run that
    reaches STOP_FACTOR x target is stopped and run again with 1/STOP_FACTOR
    of the operations (at most three times), so one such run cannot cost
    more than a few seconds either."""
    results = []
    limit = min(timeout, max(5.0, STOP_FACTOR * target)) if target else timeout
    i = stops = 0
    while i < reps:
        print(f"  {bench.name:<10} N={caps} {impl:<7} {i + 1}/{reps}",
              end="", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            m = run_once(binary, bench, impl, args, caps, limit)
        except RunTimeout as e:
            n = int(args[0])
            if not target or stops == 3 or n < STOP_FACTOR:
                print(f"  FAIL: {e}", file=sys.stderr)
                return results, str(e), args
            stops += 1
            args = (str(n // STOP_FACTOR),) + tuple(args[1:])
            print(f"  stopped after {limit:g} s; again with n={args[0]}", file=sys.stderr)
            continue
        except RunError as e:
            print(f"  FAIL: {e}", file=sys.stderr)
            return results, str(e), args
        took = time.monotonic() - t0
        print("  " + " ".join(f"{k}={show_value(v)}" for k, v in m.items()),
              file=sys.stderr)
        results.append(m)
        if target and took > RESIZE_FACTOR * target and i + 1 < reps:
            n = int(args[0])
            cut = max(1, round2(n * target / took))
            if cut < n:
                args = (str(cut),) + tuple(args[1:])
                print(f"  {bench.name:<10} N={caps} {impl:<7} n={cut} for the rest"
                      f" (that run took {took:.1f} s)", file=sys.stderr)
        i += 1
    return results, None, args


# ---------------------------------------------------------------- ghc twins

def build_twin(bench, out_dir, dry_run=False):
    """Compile haskell/<twin>.hs if the binary is missing or older (with
    dry_run, only print the ghc command).  Return the binary's path; raise
    RunError if compilation fails; return None if a package the twin needs
    is not installed (twin_packages)."""
    for pkg in bench.twin_packages:
        out = subprocess.run(["ghc-pkg", "--simple-output", "list", pkg],
                             capture_output=True, text=True).stdout.strip()
        if not out:
            print(f"note: ghc package {pkg} not installed; skipping the {bench.name} twin",
                  file=sys.stderr)
            return None
    prog = bench.twin_source()
    src = HERE / "haskell" / f"{prog}.hs"
    c_srcs = [HERE / c for c in bench.twin_c_sources]
    exe = out_dir / prog
    for s in [src] + c_srcs:
        if not s.exists():
            raise RunError(f"missing {s}")
    # Shared modules (haskell/Unwind.hs, ...) are named with a capital.
    shared = sorted(p for p in (HERE / "haskell").glob("*.hs") if p.name[0].isupper())
    if exe.exists() and all(exe.stat().st_mtime >= s.stat().st_mtime
                            for s in [src] + c_srcs + shared):
        return exe
    flags = GHC_FLAGS + list(bench.twin_flags) + (GHC_C_FLAGS if c_srcs else [])
    cmd = ["ghc", *flags, f"-i{HERE / 'haskell'}", "-outputdir", str(out_dir / f"{prog}.o.d"),
           "-o", str(exe), str(src), *map(str, c_srcs)]
    if dry_run:
        print(shlex.join(cmd))
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    print("  " + shlex.join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise RunError("ghc failed")
    return exe


# ---------------------------------------------------------------- table

def fmt(v):
    """Compact number: integers as such, otherwise 2-3 significant decimals."""
    if v == int(v) and abs(v) >= 10:
        return str(int(v))
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def show_value(v):
    """Text of one metric value (a float, a tuple of floats or a string)."""
    if isinstance(v, tuple):  # counters: whole numbers stay whole
        return "/".join(str(int(x)) if x == int(x) else fmt(x) for x in v)
    return v if isinstance(v, str) else f"{v:g}"


def median(series, key):
    """Median of one metric over a successful series, else None.  Tuples
    (a/b/c) take the (low) median of each element, so counters stay whole;
    strings must all agree."""
    results, err = series
    if err or not results or key not in results[0]:
        return None
    values = [r.get(key) for r in results]
    if all(isinstance(v, float) for v in values):
        return statistics.median(values)
    if all(isinstance(v, tuple) and len(v) == len(values[0]) for v in values):
        return tuple(statistics.median_low(column) for column in zip(*values))
    return values[0] if all(v == values[0] for v in values) else "varies"


def cell(series, key):
    """Table text for the median of one metric: a value, FAIL or -."""
    m = median(series, key)
    if series[1] or m is None:
        return "FAIL" if series[1] else "-"
    return fmt(m) if isinstance(m, float) else show_value(m)


def speedup(cells, row, impl, primary):
    """Median at -N1 / median at -N2 of the primary metric, as text."""
    one = cells.get((*row, 1), {}).get(impl, ([], None))
    two = cells.get((*row, 2), {}).get(impl, ([], None))
    a, b = median(one, primary), median(two, primary)
    if not isinstance(a, float) or not isinstance(b, float) or not b:
        return "FAIL" if one[1] or two[1] else "-"
    return f"{a / b:.2f}"


def versus_n2(cells, row, impl, primary, caps, higher_is_better):
    """How much worse the primary metric is at -N<caps> than at -N2, as
    text: median at N / median at N2 (N2 / N when higher is better), so
    1.10 means 10 % worse."""
    two = cells.get((*row, 2), {}).get(impl, ([], None))
    this = cells.get((*row, caps), {}).get(impl, ([], None))
    a, b = median(this, primary), median(two, primary)
    if not isinstance(a, float) or not isinstance(b, float) or not a or not b:
        return "FAIL" if this[1] or two[1] else "-"
    return f"{(b / a if higher_is_better else a / b):.2f}"


def table_rows(cells, have_ghc, with_speedup, with_vs2=False, sized=None):
    """cells: {(benchmark, args, caps): {impl: (results, error)}} -> list
    of row lists.  A series that was not run (no ghc) is ([], None).
    with_speedup adds the -N2/-N1 speed-up column, filled in the -N2 rows of
    the spark programs; with_vs2 the "vs N2" column (versus_n2), filled in
    the rows above -N2.  sized: {(benchmark, args, caps, impl): n} for the
    per_op series that ran fewer operations (shown as ran_n=capstan/ghc)."""
    sized = sized or {}
    rows = []
    for (bench, args, caps), by_impl in cells.items():
        cap = by_impl["capstan"]
        ghc = by_impl.get("ghc", ([], None))
        # Metric names as printed by the programs; the expected primary
        # metric names the row when every run failed.
        keys = []
        for results, _ in (cap, ghc):
            keys += [k for k in (results[0] if results else []) if k not in keys]
        primary = keys[0] if keys else bench.metric

        cap_range = "FAIL" if cap[1] else "-"
        if median(cap, primary) is not None:
            vals = [r[primary] for r in cap[0]]
            cap_range = f"{fmt(min(vals))}..{fmt(max(vals))}"
        ratio = "-"
        c, g = median(cap, primary), median(ghc, primary)
        if c is not None and g:
            r = c / g
            ratio = f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"
        # A ghc "na" (e.g. sparks=na: GHC has no such counters here) is
        # left out rather than shown after a tuple's slashes.
        extra = " ".join(f"{k}={cell(cap, k)}"
                         + (f"/{cell(ghc, k)}" if have_ghc and cell(ghc, k) != "na" else "")
                         for k in keys[1:])
        row = [row_label(bench.name, args), primary, str(caps), cell(cap, primary),
               cap_range, cell(ghc, primary), ratio]
        if with_speedup:
            up = ""
            if bench.spark and caps == 2:
                up = speedup(cells, (bench, args), "capstan", primary)
                if have_ghc:
                    up += "/" + speedup(cells, (bench, args), "ghc", primary)
            row.append(up)
        if with_vs2:
            vs = ""
            if caps > 2:
                hib = primary in bench.higher_is_better
                vs = versus_n2(cells, (bench, args), "capstan", primary, caps, hib)
                if have_ghc:
                    vs += "/" + versus_n2(cells, (bench, args), "ghc", primary, caps, hib)
            row.append(vs)
        ran = [sized.get((bench, args, caps, impl)) for impl in ("capstan", "ghc")]
        if any(ran):
            full = args[0]
            extra = (f"ran_n={ran[0] or full}" + (f"/{ran[1] or full}" if have_ghc else "")
                     + (" " if extra else "") + extra)
        rows.append(row + [extra])
    return rows


def json_value(v):
    """A metric value for JSON: a number, a list (a/b/c tuples) or a string."""
    return list(v) if isinstance(v, tuple) else v


def json_series(series, primary, keys):
    """One implementation's results in a row, for --json: the primary
    metric's median, min and max over the runs (None when it failed), the
    number of successful runs, the error of a failed series, and the
    medians of the secondary metrics."""
    results, err = series
    m = median(series, primary)
    vals = [r[primary] for r in results if isinstance(r.get(primary), float)]
    ok = isinstance(m, float) and not err
    return {"median": m if ok else None,
            "min": min(vals) if ok else None,
            "max": max(vals) if ok else None,
            "runs": len(results),
            "error": err,
            "secondary": {k: json_value(median(series, k)) for k in keys
                          if median(series, k) is not None}}


def metric_unit(metric):
    """A metric's unit, as it reads: ns_per_switch -> ns/switch, ms -> ms."""
    return metric.replace("_per_", "/")


def json_rows(cells, have_ghc):
    """cells (as for table_rows) -> one dict per table row, for --json:
    program (the row's label), name, args, metric, unit, higher_is_better,
    spark, caps, and "capstan" and "ghc" as json_series gives them ("ghc"
    is None when the twin was not run)."""
    rows = []
    for (bench, args, caps), by_impl in cells.items():
        cap = by_impl["capstan"]
        ghc = by_impl.get("ghc")
        keys = []
        for results, _ in (cap, ghc or ([], None)):
            keys += [k for k in (results[0] if results else []) if k not in keys]
        primary = keys[0] if keys else bench.metric
        rows.append({
            "program": row_label(bench.name, args),
            "name": bench.name,
            "args": list(args),
            "metric": primary,
            "unit": metric_unit(primary),
            "higher_is_better": primary in bench.higher_is_better,
            "spark": bench.spark,
            "caps": caps,
            "capstan": json_series(cap, primary, keys[1:]),
            "ghc": json_series(ghc, primary, keys[1:]) if have_ghc and ghc else None,
        })
    return rows


HEADER = ["program", "metric", "N", "capstan median", "capstan min..max",
          "ghc median", "capstan/ghc", "secondary (capstan/ghc medians)"]
# With spark programs in the run, before the secondaries:
SPEEDUP_HEADER = "N2 speed-up (capstan/ghc)"
# With rows above -N2 (table_rows' with_vs2), before the secondaries:
VS2_HEADER = "vs N2 (capstan/ghc)"
RIGHT = {2, 3, 4, 5, 6, 7, 8}  # right-aligned (numeric) columns, secondaries excepted


def header(with_speedup, with_vs2=False):
    """HEADER, with the optional columns table_rows was asked for."""
    return (HEADER[:-1] + [SPEEDUP_HEADER] * with_speedup + [VS2_HEADER] * with_vs2
            + HEADER[-1:])


def plain_table(rows, head):
    last = len(head) - 1  # the secondaries: always left-aligned
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(r):
        return "  ".join(c.rjust(w) if i in RIGHT and i != last else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), sep] + [line(r) for r in rows])


def markdown_table(rows, head):
    last = len(head) - 1
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---:" if i in RIGHT and i != last else "---"
                          for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(c or " " for c in r) + " |" for r in rows]
    return "\n".join(out)


def command_output(cmd):
    """First line of a command's stdout, or '?' if it cannot run."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
    except OSError:
        return "?"
    return (out.strip().splitlines() or ["?"])[0]


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", required=True, type=Path)
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions per cell (default 3; the spark programs, pingpong, "
                         "mutex and condvar at least 5: their min_reps)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and 3 reps, for smoke testing")
    ap.add_argument("--only", default="",
                    help="comma-separated subset of: "
                         + ",".join(dict.fromkeys(b.name for b in BENCHMARKS)))
    ap.add_argument("--no-ghc", action="store_true",
                    help="do not build or run the Haskell twins")
    ap.add_argument("--markdown", type=Path, metavar="FILE",
                    help="also write the table as GitHub markdown to FILE")
    ap.add_argument("--json", type=Path, metavar="FILE",
                    help="also write the results as JSON to FILE "
                         "(scripts/plot.py table draws it)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds per run (default 300)")
    ap.add_argument("--caps", default=",".join(map(str, CAPS)),
                    help="capability counts to run (default %(default)s)")
    ap.add_argument("--run-seconds", type=float, default=0.3,
                    help="per-operation programs: cut the operation count of a "
                         "series whose full-size run would take longer than this "
                         "(default 0.3; not with --quick)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the commands (ghc builds, then every run of "
                         "every benchmark, once per series) and run none")
    args = ap.parse_args()

    reps = args.reps if args.reps is not None else 3
    if reps < 1:
        ap.error("--reps must be at least 1")
    try:
        caps_list = tuple(int(c) for c in args.caps.split(","))
    except ValueError:
        caps_list = ()
    if not caps_list or any(not 1 <= c <= 256 for c in caps_list):
        ap.error(f"--caps must be a comma-separated list of counts from 1 to 256, got {args.caps!r}")
    if not args.run_seconds > 0:
        ap.error("--run-seconds must be positive")
    known = list(dict.fromkeys(b.name for b in BENCHMARKS))
    only = [p for p in args.only.split(",") if p]
    for p in only:
        if p not in known:
            ap.error(f"unknown program {p!r} (known: {', '.join(known)})")
    selected = [(b, b.run_args(args.quick)) for b in BENCHMARKS
                if not only or b.name in only]

    bench_dir = args.build_dir / "nofib_like"
    have_ghc = not args.no_ghc and shutil.which("ghc") is not None
    if not args.no_ghc and not have_ghc:
        print("note: ghc not on PATH; skipping the Haskell twins",
              file=sys.stderr)

    failures = []  # (row label, caps, impl, reason)
    twins = {}     # program -> binary path or RunError
    if have_ghc:
        print("building Haskell twins", file=sys.stderr)
        for bench, _ in selected:
            if bench.name not in twins:
                try:
                    twins[bench.name] = build_twin(bench, bench_dir / "haskell",
                                                   args.dry_run)
                except RunError as e:
                    twins[bench.name] = e

    cells = {}
    sized = {}  # (bench, args, caps, impl) -> the n a per_op series ran with
    started = time.monotonic()
    for bench, prog_args in selected:
        prog_reps = max(reps, bench.min_reps)
        if bench.max_reps:
            prog_reps = min(prog_reps, bench.max_reps)
        print(f"{bench.name} n={' '.join(prog_args)} reps={prog_reps}"
              f" [{(time.monotonic() - started) / 60:.1f} min]", file=sys.stderr)
        impls = [("capstan", bench.binary_in(args.build_dir))]
        if have_ghc and twins[bench.name] is not None:
            impls.append(("ghc", twins[bench.name]))
        for caps in caps_list:
            # Above -N2 (oversubscribed on a 2-core machine) the rows check
            # that nothing is lost against -N2: three runs suffice.
            caps_reps = prog_reps if caps <= 2 else min(prog_reps, OVER_REPS)
            series = cells[(bench, prog_args, caps)] = {}
            for impl, binary in impls:
                if args.dry_run:
                    if not isinstance(binary, RunError):
                        cmd = command_for(binary, bench, impl, prog_args, caps)
                        print(f"{shlex.join(cmd)}  # x{caps_reps}")
                    continue
                if isinstance(binary, RunError):
                    res, err = [], str(binary)
                elif not binary.exists():
                    res, err = [], f"missing binary {binary}"
                else:
                    run_args, res, err = prog_args, [], None
                    sizing = (bench.per_op and not args.quick
                              and (impl == "ghc" or not bench.twin_only_sized))
                    if sizing:
                        try:
                            run_args = sized_args(binary, bench, impl, prog_args, caps,
                                                  args.timeout, args.run_seconds)
                        except RunError as e:
                            err = str(e)
                        if run_args != prog_args:
                            print(f"  {bench.name:<10} N={caps} {impl:<7} n={run_args[0]}"
                                  f" (a full-size run would take over {args.run_seconds:g} s)",
                                  file=sys.stderr)
                            sized[(bench, prog_args, caps, impl)] = run_args[0]
                    if not err:
                        res, err, last_args = run_series(
                            binary, bench, impl, run_args, caps, caps_reps, args.timeout,
                            args.run_seconds if sizing else None)
                        if last_args != run_args:
                            sized[(bench, prog_args, caps, impl)] = last_args[0]
                if err:
                    failures.append((row_label(bench.name, prog_args), caps, impl, err))
                series[impl] = (res, err)
    if args.dry_run:
        return 0

    with_speedup = any(b.spark for b, _ in selected) and 1 in caps_list and 2 in caps_list
    with_vs2 = 2 in caps_list and any(c > 2 for c in caps_list)
    rows = table_rows(cells, have_ghc, with_speedup, with_vs2, sized)
    head = header(with_speedup, with_vs2)
    print()
    print(plain_table(rows, head))
    elapsed = time.monotonic() - started
    print(f"\nran in {elapsed / 60:.1f} minutes", file=sys.stderr)
    notes = [f"FAIL {prog} N={caps} {impl}: {err}"
             for prog, caps, impl, err in failures]
    if notes:
        print()
        print("\n".join(notes))

    cmdline = shlex.join([Path(sys.executable).name] + sys.argv)
    date = datetime.datetime.now().astimezone().isoformat(timespec='seconds')
    if args.json:
        doc = {"date": date,
               "machine": command_output(["uname", "-srm"]),
               "command": cmdline,
               "reps": reps,
               "ghc": command_output(["ghc", "--numeric-version"]) if have_ghc else None,
               "rows": json_rows(cells, have_ghc)}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nwrote {args.json}", file=sys.stderr)

    if args.markdown:
        sizes = ", ".join(f"{b.name}={' '.join(a)}" for b, a in selected)
        # Every benchmark's, not only the selected ones': the note is the
        # same on every table.
        min_reps = {b.name: max(reps, b.min_reps) for b in BENCHMARKS if b.min_reps}
        higher = sorted({(b.name, m) for b in BENCHMARKS for m in b.higher_is_better})
        text = [
            "# capstan nofib_like benchmarks",
            "",
            f"- date: {date}",
            f"- machine: `{command_output(['uname', '-srm'])}`",
            f"- command: `{cmdline}`",
            f"- reps: {reps} ("
            + ", ".join(f"{p}: {r}" for p, r in min_reps.items()) + "); "
            f"sizes: {sizes}",
            "- ghc twins: " + (f"ghc {command_output(['ghc', '--numeric-version'])}"
                               if have_ghc else "not run") + "; "
            "all metrics lower is better but "
            + ", ".join(f"{p}'s {m}" for p, m in higher) + "; "
            "capstan/ghc = capstan median / ghc median"
            + ("; N2 speed-up = median at -N1 / median at -N2" if with_speedup else "")
            + ("; vs N2 = median at -N / median at -N2 (inverted where higher is better:"
               " above 1 is worse)" if with_vs2 else "")
            + ("; ran_n: a per-operation series cut to about "
               f"{args.run_seconds:g} s per run" if sized else ""),
            "",
            markdown_table(rows, head),
        ]
        if notes:
            text += [""] + [f"- {n}" for n in notes]
        args.markdown.write_text("\n".join(text) + "\n")
        print(f"\nwrote {args.markdown}", file=sys.stderr)

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
