#!/usr/bin/env python3
"""trace_test.py TRACE_PROGRAM - runs trace_program.cpp's programs with
+RTS -l at -N1 and -N2 and checks the trace each leaves:
  * it is valid JSON, complete after a normal exit, after main's uncaught
    exception (the program then aborts) and after blocked_indefinitely;
  * run, idle and sleeping spans on one capability never overlap;
  * every wake-up flow's end has its start, and lands where a run span of
    the woken thread starts, on the same capability;
  * the counts agree with statistics(): run spans that began with a switch
    = context_switches, sleeping spans = sleeps, the last spark counters =
    the spark statistics, every thread created ran at least once;
  * labels name the spans of their threads; stop reasons are the documented ones.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

STOPS = {"none", "yield", "timeslice", "preempted", "blocked_mvar", "blocked_chan",
         "blocked_timer", "blocked_fd", "blocked_spark", "blocked_sync", "blocked_shutdown",
         "migrated", "safe_call", "finished", "killed"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def run(program, mode, n, path):
    return subprocess.run([program, mode, "+RTS", f"-N{n}", f"-l{path}", "-RTS"],
                          capture_output=True, text=True, timeout=120)


def load(path, where):
    try:
        with open(path, encoding="utf-8") as f:  # strict: JSON is UTF-8
            return json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"{where}: trace is not valid JSON: {e}")
        return None


def invariants(trace, where, ncaps):
    ev = trace["traceEvents"]
    check(trace["otherData"]["capabilities"] == ncaps, f"{where}: otherData.capabilities")
    check(trace["otherData"]["dropped"] == 0, f"{where}: events were dropped")
    spans = defaultdict(list)
    runs = defaultdict(list)  # (tid, ts) -> thread
    for e in ev:
        if e["ph"] == "X":
            spans[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e))
            check(e["dur"] >= 0, f"{where}: negative duration {e}")
            if e["cat"] == "thread":
                check(e["args"]["stop"] in STOPS, f"{where}: unknown stop {e['args']['stop']}")
                runs[(e["tid"], round(e["ts"], 3))].append(e["args"]["thread"])
    for tid, s in spans.items():
        if tid >= 998:
            continue  # the IO track and task tracks are separate OS threads' spans
        s.sort(key=lambda x: (x[0], x[1]))
        for (a0, a1, ea), (b0, b1, eb) in zip(s, s[1:]):
            if not check(b0 >= a1 - 0.0015, f"{where}: spans overlap on tid {tid}: {ea} / {eb}"):
                break
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = [e for e in ev if e["ph"] == "f"]
    for f in ends:
        s = starts.get(f["id"])
        if not check(s is not None, f"{where}: flow end without a start: {f}"):
            continue
        check(s["args"]["thread"] == f["args"]["thread"], f"{where}: flow {f['id']} names two threads")
        check(f["args"]["thread"] in runs.get((f["tid"], round(f["ts"], 3)), []),
              f"{where}: flow {f['id']} does not land on a run of thread {f['args']['thread']}")
    return ev


def main():
    program = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="capstan-trace-")
    for n in (1, 2):
        where = f"mix -N{n}"
        path = os.path.join(tmp, f"mix{n}.json")
        r = run(program, "mix", n, path)
        if not check(r.returncode == 0, f"{where}: exit {r.returncode}: {r.stderr}"):
            continue
        stats = dict(line.split(" ", 1)[1].split("=") for line in r.stdout.splitlines()
                     if line.startswith("stat "))
        stats = {k: int(v) for k, v in stats.items()}
        trace = load(path, where)
        if trace is None:
            continue
        ev = invariants(trace, where, n)
        thread_spans = [e for e in ev if e["ph"] == "X" and e["cat"] == "thread"]
        switched = [e for e in thread_spans if not e["args"].get("resumed")]
        check(len(switched) == stats["context_switches"],
              f"{where}: {len(switched)} run spans begun by a switch, statistics say "
              f"{stats['context_switches']} context switches")
        sleeping = [e for e in ev if e["ph"] == "X" and e["name"] == "sleeping"]
        check(len(sleeping) == stats["sleeps"],
              f"{where}: {len(sleeping)} sleeping spans, statistics say {stats['sleeps']} sleeps")
        check(len(sleeping) >= 1, f"{where}: no capability slept")
        last = {}
        for e in ev:
            if e["ph"] == "C" and e["name"].startswith("sparks cap "):
                last[e["tid"]] = e["args"]
        for k in ("created", "converted", "fizzled", "overflowed"):
            total = sum(a[k] for a in last.values())
            check(total == stats["sparks_" + k],
                  f"{where}: spark counters say {total} {k}, statistics {stats['sparks_' + k]}")
        ran = {e["args"]["thread"] for e in thread_spans}
        check(len(ran) == stats["threads_created"],
              f"{where}: {len(ran)} threads ran, {stats['threads_created']} were created")
        labelled = [e for e in thread_spans if e["args"].get("label") == "pinger"]
        check(len(labelled) >= 1 and all(e["name"].endswith(" pinger") for e in labelled),
              f"{where}: the label 'pinger' names no span")
        check(any(e["args"].get("label") == 'ponger "quoted"' for e in thread_spans),
              f"{where}: a label with quotes did not survive")
        bad = "bad \ufffd\ufffd \ufffd( caf\u00e9 \ufffd\ufffd"
        check(any(e["args"].get("label") == bad for e in thread_spans),
              f"{where}: a label that is not UTF-8 was not written with U+FFFD for its bad bytes")
        stops = {e["args"]["stop"] for e in thread_spans}
        for s in ("blocked_mvar", "blocked_chan", "blocked_timer", "safe_call", "finished", "killed"):
            check(s in stops, f"{where}: no run span stopped with {s} (saw {sorted(stops)})")
        check(any(e["ph"] == "X" and e["cat"] == "foreign" and e["name"] == "safe_call" and
                  e["dur"] >= 1500 for e in ev), f"{where}: no safe_call span of >= 1.5 ms on a task")
        check(any(e["ph"] == "X" and e["name"] == "io wait" for e in ev),
              f"{where}: no IO manager wait")
        check(len([e for e in ev if e["ph"] == "f"]) >= 200, f"{where}: fewer wake flows than hops")
    for mode, want in (("throw", "main gives up"), ("deadlock", "blocked indefinitely")):
        for n in (1, 2):
            where = f"{mode} -N{n}"
            path = os.path.join(tmp, f"{mode}{n}.json")
            r = run(program, mode, n, path)
            check(r.returncode != 0 and want in r.stderr,
                  f"{where}: expected to die of '{want}', got exit {r.returncode}: {r.stderr}")
            trace = load(path, where)
            if trace is not None:
                ev = invariants(trace, where, n)
                check(any(e["ph"] == "X" and e["cat"] == "thread" and e["args"]["thread"] == 1
                          for e in ev), f"{where}: main's run is missing")
    # A trace file that cannot be created: said on stderr, and the run goes on.
    bad = os.path.join(tmp, "no-such-dir", "x.json")
    r = run(program, "mix", 2, bad)
    check(r.returncode == 0 and f"cannot write the trace to {bad}" in r.stderr and
          "running untraced" in r.stderr and "stat context_switches=" in r.stdout,
          f"unwritable trace file: exit {r.returncode}, stderr {r.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    print(f"trace_test: {len(failures)} failure(s)")
    if failures:
        print(f"trace_test: the traces are kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
