#!/usr/bin/env python3
"""Run the nofib_like benchmarks against their GHC twins and print one table.

    python3 nofib_like/run.py --build-dir build [--reps 5] [--quick]
        [--only prog,prog] [--no-ghc] [--markdown FILE] [--timeout SECONDS]

Every benchmark prints exactly one line on stdout:

    capstan-bench name=<prog> impl=<capstan|ghc> caps=<N> n=<size> \
        <metric>=<value> [key=value ...] check=ok

The first key after n= is the primary metric; any others are secondary.  All
metrics are "lower is better".  The C++ programs live in
<build-dir>/nofib_like/<prog>; the Haskell twins (nofib_like/haskell/*.hs)
are compiled into <build-dir>/nofib_like/haskell/ when ghc is available.

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

# (program, default size, --quick size), in the order they are run.
PROGRAMS = [
    ("switch", 10_000_000, 1_000_000),
    ("pingpong", 2_000_000, 200_000),
    ("threads001", 1_000_000, 100_000),
    ("ring", 10_000_000, 1_000_000),
    ("parked", 1_000_000, 100_000),
    ("idle", 5, 1),
]
# Primary metric of each program; the programs' own output takes precedence,
# this only labels rows whose runs all failed.
PRIMARY = {"switch": "ns_per_switch", "pingpong": "ns_per_handoff",
           "threads001": "ns_per_thread", "ring": "ns_per_hop",
           "parked": "bytes_per_thread", "idle": "cpu_percent"}
CAPS = (1, 2)
MIN_REPS = {"pingpong": 7}  # noisy: never fewer repetitions than this
GHC_FLAGS = ["-O2", "-threaded", "-rtsopts"]


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


def run_once(binary, prog, impl, n, caps, timeout):
    """Run one benchmark; return its metrics {key: float} in printed order."""
    cmd = [str(binary), str(n), "+RTS", f"-N{caps}", "-RTS"]
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
    try:
        return {k: float(fields[k]) for k in metrics}
    except ValueError as e:
        raise RunError(f"bad metric value: {e}")


def run_series(binary, prog, impl, n, caps, reps, timeout):
    """Run reps times.  Return (list of metric dicts, error or None);
    the series stops at the first failure."""
    results = []
    for i in range(reps):
        print(f"  {prog:<10} N={caps} {impl:<7} {i + 1}/{reps}",
              end="", file=sys.stderr, flush=True)
        try:
            m = run_once(binary, prog, impl, n, caps, timeout)
        except RunError as e:
            print(f"  FAIL: {e}", file=sys.stderr)
            return results, str(e)
        print("  " + " ".join(f"{k}={v:g}" for k, v in m.items()),
              file=sys.stderr)
        results.append(m)
    return results, None


# ---------------------------------------------------------------- ghc twins

def build_twin(prog, out_dir):
    """Compile haskell/<prog>.hs if the binary is missing or older.
    Return the binary's path; raise RunError if compilation fails."""
    src = HERE / "haskell" / f"{prog}.hs"
    exe = out_dir / prog
    if not src.exists():
        raise RunError(f"missing {src}")
    if exe.exists() and exe.stat().st_mtime >= src.stat().st_mtime:
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = ["ghc", *GHC_FLAGS, "-outputdir", str(out_dir / f"{prog}.o.d"),
           "-o", str(exe), str(src)]
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


def median(series, key):
    """Median of one metric over a successful series, else None."""
    results, err = series
    if err or not results or key not in results[0]:
        return None
    return statistics.median(r[key] for r in results)


def cell(series, key):
    """Table text for the median of one metric: a number, FAIL or -."""
    m = median(series, key)
    return "FAIL" if series[1] else "-" if m is None else fmt(m)


def table_rows(cells, have_ghc):
    """cells: {(prog, caps): {impl: (results, error)}} -> list of row lists.
    A series that was not run (no ghc) is ([], None)."""
    rows = []
    for (prog, caps), by_impl in cells.items():
        cap = by_impl["capstan"]
        ghc = by_impl.get("ghc", ([], None))
        # Metric names as printed by the programs; the expected primary
        # metric names the row when every run failed.
        keys = []
        for results, _ in (cap, ghc):
            keys += [k for k in (results[0] if results else []) if k not in keys]
        primary = keys[0] if keys else PRIMARY[prog]

        cap_range = "FAIL" if cap[1] else "-"
        if median(cap, primary) is not None:
            vals = [r[primary] for r in cap[0]]
            cap_range = f"{fmt(min(vals))}..{fmt(max(vals))}"
        ratio = "-"
        c, g = median(cap, primary), median(ghc, primary)
        if c is not None and g:
            r = c / g
            ratio = f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"
        extra = " ".join(f"{k}={cell(cap, k)}" + (f"/{cell(ghc, k)}" if have_ghc else "")
                         for k in keys[1:])
        rows.append([prog, primary, str(caps), cell(cap, primary), cap_range,
                     cell(ghc, primary), ratio, extra])
    return rows


HEADER = ["program", "metric", "N", "capstan median", "capstan min..max",
          "ghc median", "capstan/ghc", "secondary (capstan/ghc medians)"]
RIGHT = {2, 3, 4, 5, 6}  # right-aligned (numeric) columns


def plain_table(rows):
    widths = [max(len(r[i]) for r in [HEADER] + rows) for i in range(len(HEADER))]

    def line(r):
        return "  ".join(c.rjust(w) if i in RIGHT else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(HEADER), sep] + [line(r) for r in rows])


def markdown_table(rows):
    out = ["| " + " | ".join(HEADER) + " |",
           "|" + "|".join("---:" if i in RIGHT else "---"
                          for i in range(len(HEADER))) + "|"]
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
                         + ",".join(p for p, _, _ in PROGRAMS))
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
    known = [p for p, _, _ in PROGRAMS]
    only = [p for p in args.only.split(",") if p]
    for p in only:
        if p not in known:
            ap.error(f"unknown program {p!r} (known: {', '.join(known)})")
    programs = [(p, q if args.quick else d) for p, d, q in PROGRAMS
                if not only or p in only]

    bench_dir = args.build_dir / "nofib_like"
    have_ghc = not args.no_ghc and shutil.which("ghc") is not None
    if not args.no_ghc and not have_ghc:
        print("note: ghc not on PATH; skipping the Haskell twins",
              file=sys.stderr)

    failures = []  # (prog, caps, impl, reason)
    twins = {}     # prog -> binary path or RunError
    if have_ghc:
        print("building Haskell twins", file=sys.stderr)
        for prog, _ in programs:
            try:
                twins[prog] = build_twin(prog, bench_dir / "haskell")
            except RunError as e:
                twins[prog] = e

    cells = {}
    for prog, n in programs:
        prog_reps = max(reps, MIN_REPS.get(prog, 0))
        print(f"{prog} n={n} reps={prog_reps}", file=sys.stderr)
        impls = [("capstan", bench_dir / prog)]
        if have_ghc:
            impls.append(("ghc", twins[prog]))
        for caps in CAPS:
            series = cells[(prog, caps)] = {}
            for impl, binary in impls:
                if isinstance(binary, RunError):
                    res, err = [], str(binary)
                elif not binary.exists():
                    res, err = [], f"missing binary {binary}"
                else:
                    res, err = run_series(binary, prog, impl, n, caps,
                                          prog_reps, args.timeout)
                if err:
                    failures.append((prog, caps, impl, err))
                series[impl] = (res, err)

    rows = table_rows(cells, have_ghc)
    print()
    print(plain_table(rows))
    notes = [f"FAIL {prog} N={caps} {impl}: {err}"
             for prog, caps, impl, err in failures]
    if notes:
        print()
        print("\n".join(notes))

    if args.markdown:
        cmdline = shlex.join([Path(sys.executable).name] + sys.argv)
        sizes = ", ".join(f"{p}={n}" for p, n in programs)
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
            "all metrics lower is better; ratio = capstan median / ghc median",
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
