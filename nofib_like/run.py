#!/usr/bin/env python3
"""Run the nofib_like benchmarks against their GHC twins and print one table.

    python3 nofib_like/run.py --build-dir build [--reps 5] [--quick]
        [--only prog,prog] [--no-ghc] [--markdown FILE] [--timeout SECONDS]

Every benchmark prints exactly one line on stdout:

    capstan-bench name=<prog> impl=<capstan|ghc> caps=<N> n=<size> \
        <metric>=<value> [key=value ...] check=ok

The first key after n= (the program's first argument) is the primary
metric, a number; any others are secondary: numbers, slash-separated number
tuples such as sparks=<created>/<converted>/<overflowed>/<dud>/<gcd>/<fizzled>
(medians are taken element by element), or "na".  All numeric metrics are "lower is
better", except those in HIGHER_IS_BETTER (e.g. bfs's ratio = seq_ms / ms,
a speed-up, and http's req_per_s).
`http` runs nofib_like/http.py (wrk against examples/http_hello, or the
Warp twin haskell/http_warp.hs when ghc has the warp package).  For the spark
programs the table also shows the speed-up of -N2 over -N1 (median at -N1 /
median at -N2).  A program may appear several times with different
arguments (e.g. parfib 32 2 and parfib 38 20); each is its own row.  The
C++ programs live in <build-dir>/nofib_like/<prog>; the Haskell twins
(nofib_like/haskell/*.hs) are compiled into <build-dir>/nofib_like/haskell/
when ghc is available; a twin that calls C (the foreign-call programs)
is compiled together with the C files listed in TWIN_C_SOURCES, with the
extra ghc flags of TWIN_FLAGS.

A failed check, a crash, a timeout or a missing binary shows up as FAIL in
the table, and makes the runner exit with status 1 after printing everything.
Runs are strictly sequential.
"""

import argparse
import datetime
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (program, default arguments, --quick arguments), in the order they are run.
# Arguments are a size or a tuple whose first element is the size (n=).
PROGRAMS = [
    ("switch", 10_000_000, 1_000_000),
    ("pingpong", 2_000_000, 200_000),
    ("threads001", 1_000_000, 100_000),
    ("ring", 10_000_000, 1_000_000),
    ("parked", 1_000_000, 100_000),
    ("idle", 5, 1),
    ("parfib", (32, 2), (25, 2)),          # n, threshold
    ("parfib", (38, 20), (30, 12)),
    ("nqueens", (12, 3), (10, 3)),         # n, spark depth
    ("mergesort", (5_000_000, 10_000), (500_000, 10_000)),  # n, cutoff
    ("balanced", 1024, 128),               # tasks
    ("imbalanced", 1024, 128),
    ("heat", (512, 400), (128, 100)),      # n, steps
    ("bfs", (1_000_000, 16), (100_000, 16)),  # n, out-degree
    ("sieve", 2_000_000, 200_000),
    # Foreign calls.
    ("safecall", (5_000_000, 1), (500_000, 1)),   # calls, green threads
    ("safecall", (20_000_000, 2), (2_000_000, 2)),  # long enough for the OS to spread the threads
    ("overlap", 10, 3),                    # blocking 200 ms calls
    ("callback001", (10_000, 4), (1_000, 4)),  # in-calls per OS thread, OS threads
    ("callback002", 100_000, 10_000),      # in-calls (and condvar round trips)
    ("boundpingpong", 200_000, 20_000),
    # IO manager.
    ("delay", 100_000, 100_000),           # threads, each sleeping 1 ms
    ("http", (64, 10), (64, 2)),           # wrk connections, seconds
    ("http", (1000, 10), (1000, 2)),
]
# Programs run through a driver script instead of a binary of their own:
# http.py starts the server (examples/http_hello, or the GHC twin) and
# drives it with wrk.  Its twin is haskell/<TWIN_SOURCE>.hs, needing the
# packages in TWIN_PACKAGES (skipped, not failed, when they are missing).
DRIVERS = {"http": HERE / "http.py"}
TWIN_SOURCE = {"http": "http_warp"}
TWIN_PACKAGES = {"http": ["warp"]}
# Primary metric of each program; the programs' own output takes precedence,
# this only labels rows whose runs all failed.
PRIMARY = {"switch": "ns_per_switch", "pingpong": "ns_per_handoff",
           "threads001": "ns_per_thread", "ring": "ns_per_hop",
           "parked": "bytes_per_thread", "idle": "cpu_percent",
           "parfib": "ms", "nqueens": "ms", "mergesort": "ms",
           "balanced": "ms", "imbalanced": "ms", "heat": "ms", "bfs": "ms",
           "sieve": "ms", "delay": "ms", "http": "req_per_s",
           "safecall": "added_ns",
           "overlap": "return_latency_us",
           "callback001": "ns_per_incall",
           "callback002": "ratio",
           "boundpingpong": "ns_per_handoff",
           }
# Rows whose primary metric is not their program's, by (program, arguments
# after the size).
PRIMARY_BY_ARGS = {
    ("safecall", ("2",)): "scaling",  # 2 green threads: calls/s vs 1 thread
}
# Metrics where higher is better; every other one is lower is better.
HIGHER_IS_BETTER = {
    ("bfs", "ratio"),
    ("safecall", "scaling"),
    ("overlap", "overlap_percent"),
    ("overlap", "work_percent"),
    ("http", "req_per_s"),
}
# Programs built on sparks: their rows also show the -N2 over -N1 speed-up.
SPARK_PROGRAMS = {"parfib", "nqueens", "mergesort", "balanced", "imbalanced",
                  "heat", "bfs", "sieve"}
CAPS = (1, 2)
MIN_REPS = {"pingpong": 7}  # noisy: never fewer repetitions than this
GHC_FLAGS = ["-O2", "-threaded", "-rtsopts"]
# C files (relative to nofib_like/) that ghc compiles and links into a twin:
# the C functions its `foreign import`s call, and the pthreads that call its
# `foreign export`s.  safecall's callee is the very file the C++ program links.
TWIN_C_SOURCES = {
    "safecall": ["ffi_nop.c"],
    "overlap": ["haskell/overlap_stubs.c"],
    "callback001": ["haskell/callback001_stubs.c"],
    "callback002": ["haskell/callback002_stubs.c"],
    "boundpingpong": ["haskell/boundpingpong_stubs.c"],
}
# Extra ghc flags per twin.
TWIN_FLAGS = {
    # overlap's computing thread never allocates, so without
    # -fno-omit-yields it would pass no safe point at all (the C++ program
    # calls yield_point() instead).
    "overlap": ["-fno-omit-yields"],
}
GHC_C_FLAGS = ["-optc-O2"]  # for the C files


class RunError(Exception):
    """One run did not produce a valid, checked result line."""


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


def as_args(spec):
    """A PROGRAMS size entry as a tuple of argument strings."""
    return tuple(str(a) for a in (spec if isinstance(spec, tuple) else (spec,)))


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


def command_for(binary, prog, impl):
    """The command prefix running one program: its binary, or its driver
    script given the server binary (DRIVERS)."""
    if prog in DRIVERS:
        return [sys.executable, str(DRIVERS[prog]), "--server", str(binary), "--impl", impl]
    return [str(binary)]


def run_once(binary, prog, impl, args, caps, timeout):
    """Run one benchmark; return its metrics {key: value} in printed order:
    the primary one a float, secondaries as parse_metric returns them."""
    n = args[0]
    cmd = [*command_for(binary, prog, impl), *args, "+RTS", f"-N{caps}", "-RTS"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError(f"timeout after {timeout} s")
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


def run_series(binary, prog, impl, args, caps, reps, timeout):
    """Run reps times.  Return (list of metric dicts, error or None);
    the series stops at the first failure."""
    results = []
    for i in range(reps):
        print(f"  {prog:<10} N={caps} {impl:<7} {i + 1}/{reps}",
              end="", file=sys.stderr, flush=True)
        try:
            m = run_once(binary, prog, impl, args, caps, timeout)
        except RunError as e:
            print(f"  FAIL: {e}", file=sys.stderr)
            return results, str(e)
        print("  " + " ".join(f"{k}={show_value(v)}" for k, v in m.items()),
              file=sys.stderr)
        results.append(m)
    return results, None


# ---------------------------------------------------------------- ghc twins

def build_twin(prog, out_dir):
    """Compile haskell/<prog>.hs if the binary is missing or older.
    Return the binary's path; raise RunError if compilation fails; return
    None if a package the twin needs is not installed (TWIN_PACKAGES)."""
    for pkg in TWIN_PACKAGES.get(prog, []):
        out = subprocess.run(["ghc-pkg", "--simple-output", "list", pkg],
                             capture_output=True, text=True).stdout.strip()
        if not out:
            print(f"note: ghc package {pkg} not installed; skipping the {prog} twin",
                  file=sys.stderr)
            return None
    prog = TWIN_SOURCE.get(prog, prog)
    src = HERE / "haskell" / f"{prog}.hs"
    c_srcs = [HERE / c for c in TWIN_C_SOURCES.get(prog, [])]
    exe = out_dir / prog
    for s in [src] + c_srcs:
        if not s.exists():
            raise RunError(f"missing {s}")
    if exe.exists() and all(exe.stat().st_mtime >= s.stat().st_mtime
                            for s in [src] + c_srcs):
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = GHC_FLAGS + TWIN_FLAGS.get(prog, []) + (GHC_C_FLAGS if c_srcs else [])
    cmd = ["ghc", *flags, "-outputdir", str(out_dir / f"{prog}.o.d"),
           "-o", str(exe), str(src), *map(str, c_srcs)]
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
    one = cells.get((row[0], row[1], 1), {}).get(impl, ([], None))
    two = cells.get((row[0], row[1], 2), {}).get(impl, ([], None))
    a, b = median(one, primary), median(two, primary)
    if not isinstance(a, float) or not isinstance(b, float) or not b:
        return "FAIL" if one[1] or two[1] else "-"
    return f"{a / b:.2f}"


def table_rows(cells, have_ghc, with_speedup):
    """cells: {(prog, args, caps): {impl: (results, error)}} -> list of row
    lists.  A series that was not run (no ghc) is ([], None).  with_speedup
    adds the -N2/-N1 speed-up column, filled in the -N2 rows of the spark
    programs."""
    rows = []
    for (prog, args, caps), by_impl in cells.items():
        cap = by_impl["capstan"]
        ghc = by_impl.get("ghc", ([], None))
        # Metric names as printed by the programs; the expected primary
        # metric names the row when every run failed.
        keys = []
        for results, _ in (cap, ghc):
            keys += [k for k in (results[0] if results else []) if k not in keys]
        primary = keys[0] if keys else PRIMARY_BY_ARGS.get((prog, args[1:]),
                                                            PRIMARY[prog])

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
        row = [row_label(prog, args), primary, str(caps), cell(cap, primary),
               cap_range, cell(ghc, primary), ratio]
        if with_speedup:
            up = ""
            if prog in SPARK_PROGRAMS and caps == 2:
                up = speedup(cells, (prog, args), "capstan", primary)
                if have_ghc:
                    up += "/" + speedup(cells, (prog, args), "ghc", primary)
            row.append(up)
        rows.append(row + [extra])
    return rows


HEADER = ["program", "metric", "N", "capstan median", "capstan min..max",
          "ghc median", "capstan/ghc", "secondary (capstan/ghc medians)"]
# With spark programs in the run, before the secondaries:
SPEEDUP_HEADER = "N2 speed-up (capstan/ghc)"
RIGHT = {2, 3, 4, 5, 6, 7}  # right-aligned (numeric) columns, secondaries excepted


def header(rows):
    """HEADER, with the speed-up column if the rows have it."""
    if rows and len(rows[0]) > len(HEADER):
        return HEADER[:-1] + [SPEEDUP_HEADER, HEADER[-1]]
    return HEADER


def plain_table(rows):
    head = header(rows)
    last = len(head) - 1  # the secondaries: always left-aligned
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(r):
        return "  ".join(c.rjust(w) if i in RIGHT and i != last else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), sep] + [line(r) for r in rows])


def markdown_table(rows):
    head = header(rows)
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
                    help="repetitions per cell (default 5, or 3 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and 3 reps, for smoke testing")
    ap.add_argument("--only", default="",
                    help="comma-separated subset of: "
                         + ",".join(dict.fromkeys(p for p, _, _ in PROGRAMS)))
    ap.add_argument("--no-ghc", action="store_true",
                    help="do not build or run the Haskell twins")
    ap.add_argument("--markdown", type=Path, metavar="FILE",
                    help="also write the table as GitHub markdown to FILE")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds per run (default 300)")
    args = ap.parse_args()

    reps = args.reps if args.reps is not None else (3 if args.quick else 5)
    if reps < 1:
        ap.error("--reps must be at least 1")
    known = list(dict.fromkeys(p for p, _, _ in PROGRAMS))
    only = [p for p in args.only.split(",") if p]
    for p in only:
        if p not in known:
            ap.error(f"unknown program {p!r} (known: {', '.join(known)})")
    programs = [(p, as_args(q if args.quick else d)) for p, d, q in PROGRAMS
                if not only or p in only]

    bench_dir = args.build_dir / "nofib_like"
    have_ghc = not args.no_ghc and shutil.which("ghc") is not None
    if not args.no_ghc and not have_ghc:
        print("note: ghc not on PATH; skipping the Haskell twins",
              file=sys.stderr)

    failures = []  # (row label, caps, impl, reason)
    twins = {}     # prog -> binary path or RunError
    if have_ghc:
        print("building Haskell twins", file=sys.stderr)
        for prog in dict.fromkeys(p for p, _ in programs):
            try:
                twins[prog] = build_twin(prog, bench_dir / "haskell")
            except RunError as e:
                twins[prog] = e

    cells = {}
    for prog, prog_args in programs:
        prog_reps = max(reps, MIN_REPS.get(prog, 0))
        print(f"{prog} n={' '.join(prog_args)} reps={prog_reps}", file=sys.stderr)
        if prog in DRIVERS:
            impls = [("capstan", args.build_dir / "examples" / "http_hello")]
        else:
            impls = [("capstan", bench_dir / prog)]
        if have_ghc and twins[prog] is not None:
            impls.append(("ghc", twins[prog]))
        for caps in CAPS:
            series = cells[(prog, prog_args, caps)] = {}
            for impl, binary in impls:
                if isinstance(binary, RunError):
                    res, err = [], str(binary)
                elif not binary.exists():
                    res, err = [], f"missing binary {binary}"
                else:
                    res, err = run_series(binary, prog, impl, prog_args, caps,
                                          prog_reps, args.timeout)
                if err:
                    failures.append((row_label(prog, prog_args), caps, impl, err))
                series[impl] = (res, err)

    with_speedup = any(p in SPARK_PROGRAMS for p, _ in programs)
    rows = table_rows(cells, have_ghc, with_speedup)
    print()
    print(plain_table(rows))
    notes = [f"FAIL {prog} N={caps} {impl}: {err}"
             for prog, caps, impl, err in failures]
    if notes:
        print()
        print("\n".join(notes))

    if args.markdown:
        cmdline = shlex.join([Path(sys.executable).name] + sys.argv)
        sizes = ", ".join(f"{p}={' '.join(a)}" for p, a in programs)
        text = [
            "# capstan nofib_like benchmarks",
            "",
            f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
            f"- machine: `{command_output(['uname', '-srm'])}`",
            f"- command: `{cmdline}`",
            f"- reps: {reps} (pingpong: {max(reps, MIN_REPS['pingpong'])}); "
            f"sizes: {sizes}",
            "- ghc twins: " + (f"ghc {command_output(['ghc', '--numeric-version'])}"
                               if have_ghc else "not run") + "; "
            "all metrics lower is better but "
            + ", ".join(f"{p}'s {m}" for p, m in sorted(HIGHER_IS_BETTER)) + "; "
            "capstan/ghc = capstan median / ghc median"
            + ("; N2 speed-up = median at -N1 / median at -N2" if with_speedup else ""),
            "",
            markdown_table(rows),
        ]
        if notes:
            text += [""] + [f"- {n}" for n in notes]
        args.markdown.write_text("\n".join(text) + "\n")
        print(f"\nwrote {args.markdown}", file=sys.stderr)

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
